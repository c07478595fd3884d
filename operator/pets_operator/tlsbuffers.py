"""asyncio's read buffer per TLS connection, made small: the operator holds one connection per followed log.

asyncio's `SSLProtocol` (CPython 3.11 on) gives every TLS connection a zero-filled read buffer of
`max_size` = 256 KiB for the bytes from the socket, for as long as the connection lives. Each
followed pod log is one TLS connection to kube-apiserver, so 1,000 followed logs held 250 MiB in
these buffers alone (the operator's RSS: 535 MiB on kube-apiserver, 201 MiB on the emulated
server's plain HTTP; docs/performance-operator.md). The buffer only bounds how much one read takes
from the socket: 16 KiB holds a whole TLS record (at most 16 KiB of data), and a large answer (a
list of 1,000 jobs) takes more reads, not more memory.
"""
from __future__ import annotations

from asyncio import sslproto

TLS_READ_BUFFER = 16 * 1024


def shrink_tls_read_buffers(size: int = TLS_READ_BUFFER) -> None:
    """Every asyncio TLS connection this process makes from now on reads through a `size`-byte buffer (never a
    larger one than asyncio's own). A Python whose asyncio has no such buffer is left as it is."""
    current = getattr(sslproto.SSLProtocol, "max_size", None)
    if isinstance(current, int) and current > size:
        sslproto.SSLProtocol.max_size = size
