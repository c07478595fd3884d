"""Stand-ins on 127.0.0.1 for the hosts the product downloads from: a data set host (Range
requests, injected failures) and the Hugging Face Hub's file endpoint (what `hf_hub_download`
asks: HEAD then GET of `/{repo}/resolve/{revision}/{filename}` with `X-Repo-Commit`, `ETag`)."""
from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class FileHost:
    """Serves `files` (path -> bytes). `fail_next[path] = [status or "drop", ...]` injects faults in order."""
    files: dict[str, bytes] = field(default_factory=dict)
    fail_next: dict[str, list] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, Range)
    hub_commit: str = "0123456789abcdef0123456789abcdef01234567"

    def __post_init__(self) -> None:
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet test output
                pass

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _serve(self, body: bool) -> None:
                path = self.path.split("?")[0]
                host.requests.append((self.command, path, self.headers.get("Range")))
                faults = host.fail_next.get(path) or []
                fault = faults.pop(0) if faults and body else None
                if path not in host.files:
                    self._status(404, {"X-Error-Code": "RepoNotFound" if "/resolve/" in path else "NotFound"})
                    return
                data = host.files[path]
                if isinstance(fault, int):
                    self._status(fault, {})
                    return
                start = 0
                ranged = self.headers.get("Range")
                if ranged and ranged.startswith("bytes="):
                    start = int(ranged[6:].split("-")[0])
                    if start >= len(data):
                        self._status(416, {"Content-Range": f"bytes */{len(data)}"})
                        return
                chunk = data[start:]
                self.send_response(206 if start else 200)
                headers = {"Content-Length": str(len(chunk)), "Accept-Ranges": "bytes",
                           "ETag": f'"{hashlib.sha256(data).hexdigest()}"', "X-Repo-Commit": host.hub_commit}
                if start:
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                if not body:
                    return
                if fault == "drop":  # half the bytes, then the connection goes
                    self.wfile.write(chunk[: len(chunk) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(chunk)

            def _status(self, code: int, headers: dict[str, str]) -> None:
                self.send_response(code)
                for key, value in {**headers, "Content-Length": "0"}.items():
                    self.send_header(key, value)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def serve_hub_file(self, repository: str, filename: str, data: bytes, revision: str = "main") -> None:
        self.files[f"/{repository}/resolve/{revision}/{filename}"] = data

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
