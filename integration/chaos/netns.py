"""A network namespace for a broker, and cuts of its link (``python -m integration.chaos netns up|down``).

``up`` creates namespace NS with a veth pair: the host end (``<NS>-h``, 198.51.100.1/24) and the
namespace end (``<NS>-n``, 198.51.100.2/24). A broker started inside (``ip netns exec NS ...``,
``brokerIP1=198.51.100.2``, name server ``198.51.100.1:<port>``) is reached by every client of the
host through that link only. Both ends get permanent neighbour entries, so a cut is silent (packets
vanish; no ARP failure turns it into a quick "no route to host"), and the host gets an
``unreachable`` route for 198.51.100.0/24 behind the link's own, so no packet for the namespace
ever leaves through another interface. Addresses are TEST-NET-2 (198.51.100.0/24) only.

A cut sets the namespace end down (``ip -n NS link set <NS>-n down``): the host end loses its
carrier and drops what it is asked to send. It is verified: while cut, a TCP connect to the
broker times out, and the host end's drop counter grows (traffic was attempted and lost); after
the restore a connect succeeds again.
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

NET = ipaddress.ip_network("198.51.100.0/24")
HOST_ADDR = "198.51.100.1"
NS_ADDR = "198.51.100.2"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _mac(ifname: str, ns: str | None = None) -> str:
    return Path(f"/sys/class/net/{ifname}/address").read_text().strip() if ns is None else \
        _ip("-n", ns, "-o", "link", "show", ifname).stdout.split("link/ether")[1].split()[0]


def up(ns: str) -> tuple[str, str]:
    """Create (or re-create) namespace ``ns`` and its link; returns (host address, namespace address)."""
    if len(ns) > 12 or not ns.replace("-", "").isalnum():
        raise ValueError(f"namespace name {ns!r}: up to 12 letters, digits or dashes (interface names derive from it)")
    down(ns)
    host_if, ns_if = f"{ns}-h", f"{ns}-n"
    _ip("netns", "add", ns)
    _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
    _ip("link", "set", ns_if, "netns", ns)
    _ip("addr", "add", f"{HOST_ADDR}/24", "dev", host_if)
    _ip("link", "set", host_if, "up")
    _ip("-n", ns, "addr", "add", f"{NS_ADDR}/24", "dev", ns_if)
    _ip("-n", ns, "link", "set", ns_if, "up")
    _ip("-n", ns, "link", "set", "lo", "up")
    # silent cuts: no ARP on either side
    _ip("neigh", "replace", NS_ADDR, "lladdr", _mac(ns_if, ns), "dev", host_if, "nud", "permanent")
    _ip("-n", ns, "neigh", "replace", HOST_ADDR, "lladdr", _mac(host_if), "dev", ns_if, "nud", "permanent")
    # whatever happens to the link, traffic for TEST-NET-2 never takes the default route
    _ip("route", "replace", "unreachable", str(NET), "metric", "4000")
    return HOST_ADDR, NS_ADDR


def down(ns: str) -> None:
    """Remove namespace ``ns`` (its processes keep running, unreachable) and the host's routes for it."""
    _ip("netns", "del", ns, check=False)
    _ip("link", "del", f"{ns}-h", check=False)
    _ip("route", "del", "unreachable", str(NET), "metric", "4000", check=False)


def _connects(addr: str, timeout: float) -> bool:
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class NetLink:
    """The link of a broker in namespace ``ns``, cut and restored by the schedule."""

    ns: str
    broker_addr: str  # host:port of the broker inside, as clients reach it

    @property
    def host_if(self) -> str:
        return f"{self.ns}-h"

    @property
    def ns_if(self) -> str:
        return f"{self.ns}-n"

    def _dropped(self) -> int:
        stats = Path(f"/sys/class/net/{self.host_if}/statistics")
        return sum(int((stats / name).read_text()) for name in ("tx_dropped", "tx_carrier_errors"))

    def is_cut(self) -> bool:
        return "state DOWN" in _ip("-n", self.ns, "-o", "link", "show", self.ns_if).stdout

    def cut(self) -> dict[str, object]:
        """Set the namespace end down; verified by a connect that times out."""
        before = self._dropped()
        _ip("-n", self.ns, "link", "set", self.ns_if, "down")
        blocked = not _connects(self.broker_addr, 1.5)
        return {"cut_verified": blocked and self.is_cut(), "dropped_before": before}

    def restore(self, cut_info: dict[str, object]) -> dict[str, object]:
        """Bring the link back; reports the packets dropped while it was down and that it works again."""
        dropped = self._dropped() - int(cut_info.get("dropped_before", 0))  # type: ignore[call-overload]
        _ip("-n", self.ns, "link", "set", self.ns_if, "up")
        deadline = time.monotonic() + 30
        while not _connects(self.broker_addr, 1.0):
            if time.monotonic() > deadline:
                return {"dropped_while_cut": dropped, "restored": False}
            time.sleep(0.2)
        return {"dropped_while_cut": dropped, "restored": True}
