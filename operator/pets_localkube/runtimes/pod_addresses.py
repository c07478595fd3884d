"""Addresses for simulated pods: each its own, from a pod CIDR, as kwok gives its fake pods.

A simulated pod has no network, so its address is never reached; it only has to look like a real
node's pod's. A real pod of this kubelet runs on the host and reports the loopback address, which
Kubernetes' endpoint controllers refuse (`may not be in the loopback range`): with thousands of
simulated pods behind headless Services that refusal, retried with an Event each time, made
kube-apiserver's load a local artefact rather than what a cluster of real nodes would see.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Callable, Collection

# kind's pod subnet; nothing routes to it from here.
SIMULATED_POD_CIDR = "10.244.0.0/16"


class PodAddresses:
    """Hands out the network's host addresses in turn; after the last one it starts again at the
    first, skipping those `in_use` (asked only then: until the first wrap every address is new)."""

    def __init__(self, cidr: str = SIMULATED_POD_CIDR):
        network = ipaddress.ip_network(cidr)
        if network.num_addresses < 4:
            raise ValueError(f"pod CIDR {cidr} has no room for pods")
        self._first = int(network.network_address) + 1
        self._count = network.num_addresses - 2  # neither the network's address nor its broadcast
        self._next = 0
        self._wrapped = False

    def take(self, in_use: Callable[[], Collection[str]]) -> str:
        taken = in_use() if self._wrapped else ()
        for _ in range(self._count):
            address = str(ipaddress.ip_address(self._first + self._next))
            self._next = (self._next + 1) % self._count
            self._wrapped = self._wrapped or self._next == 0
            if address not in taken:
                return address
        raise RuntimeError(f"all {self._count} simulated pod addresses are in use")
