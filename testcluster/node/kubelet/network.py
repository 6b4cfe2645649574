"""Pod addresses: each pod gets a loopback address of its own from the kubelet's pod subnet.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import ipaddress
import random

__all__ = ["IPAllocator", "pod_subnet_allocator"]


class IPAllocator:
    """Hands out ``first``, ``first+1``, ... (wrapping) and never an address a live pod holds."""

    def __init__(self, first: str = "127.0.0.2", last: str = "127.255.255.254"):
        self._first = int(ipaddress.IPv4Address(first))
        self._last = int(ipaddress.IPv4Address(last))
        self._next = self._first
        self._live: set[int] = set()

    def take(self) -> str:
        span = self._last - self._first + 1
        for _ in range(span):
            n = self._next
            self._next = self._first if n >= self._last else n + 1
            if n not in self._live and (n & 0xFF) not in (0, 255):
                self._live.add(n)
                return str(ipaddress.IPv4Address(n))
        raise RuntimeError("no free loopback address left for a pod")

    def release(self, ip: str | None) -> None:
        if ip:
            self._live.discard(int(ipaddress.IPv4Address(ip)))

    @property
    def live(self) -> int:
        return len(self._live)


def pod_subnet_allocator(pod_subnet: str | None) -> IPAllocator:
    """The allocator for ``pod_subnet`` (a loopback network; random /16 inside 127/8 when None)."""
    if pod_subnet is None:
        pod_subnet = f"127.{random.randint(1, 254)}.0.0/16"
    net = ipaddress.IPv4Network(pod_subnet)
    if not net.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")) or net.num_addresses < 4:
        raise ValueError(f"pod_subnet {pod_subnet!r} must be a loopback network inside 127.0.0.0/8, "
                         "e.g. 127.42.0.0/16")
    first = net.network_address + (2 if net.network_address == ipaddress.IPv4Address("127.0.0.0") else 1)
    return IPAllocator(str(first), str(net.broadcast_address - 1))
