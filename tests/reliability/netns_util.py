"""A second "host" on this machine for the network fault campaigns: a Linux network namespace with its
own address, joined to the test's (root) namespace by a veth pair.

    with NetHost.create() as host:          # needs root and iproute2 (``require_netns`` skips otherwise)
        proc = peers._spawn(host.argv([python, "-m", "rocketstream.cli", "broker", "--listen",
                                       f"{host.addr}:{port}", ...]), env, log)
        host.cut()       # the namespace's end of the link goes down: packets to and from it are dropped
        host.restore()   # the link comes back; connections made before the cut may be dead by then

The root end keeps its address and its connected route while the other end is down (the route is only
marked ``linkdown``), so a packet to ``host.addr`` goes into the veth and is dropped — to the processes on
either side the cut looks like a silent network, not a refused connection: every request must end by its
own timeout. ``host.peer_addr`` is the root namespace's address on the link (a name server listening there
is reachable from inside the namespace).

Clean-up (``close``, also on error in ``with``) kills whatever still runs in the namespace, deletes the veth
pair and the namespace. Every namespace is named ``rsfaults-<pid>-<n>`` so runs never share one.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

_COUNTER = itertools.count()


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no iproute2, or the kernel refuses)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
    return res


def netns_unavailable_reason() -> str | None:
    """Why the netns campaigns cannot run here, or None when they can."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2 not installed): the network-namespace campaigns need it"
    if os.geteuid() != 0:
        return "not root: `ip netns add` and veth links need CAP_NET_ADMIN"
    name = f"rsfaults-probe-{os.getpid()}"
    res = _ip("netns", "add", name, check=False)
    if res.returncode != 0:
        return f"`ip netns add` refused: {res.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


def require_netns() -> None:
    """pytest.skip with the reason when network namespaces are unavailable."""
    import pytest

    reason = netns_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def sweep_stale() -> list[str]:
    """Delete namespaces left by test processes that died before their clean-up (``rsfaults-<pid>-<n>`` whose
    pid is gone); deleting a namespace destroys its veth end and so the pair. The names deleted."""
    gone = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "rsfaults" or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
            continue   # its test process still runs
        except ProcessLookupError:
            pass
        _ip("netns", "del", name, check=False)
        gone.append(name)
    return gone


def _used_addresses() -> set[str]:
    out = _ip("-o", "-4", "addr", "show").stdout
    return {tok.split("/")[0] for line in out.splitlines() for tok in line.split() if "/" in tok}


@dataclass
class NetHost:
    ns: str
    root_if: str      # the veth end in the root namespace
    host_if: str      # the veth end inside the namespace
    peer_addr: str    # the root namespace's address on the link
    addr: str         # the namespace's address (what its servers bind and advertise)
    cuts: int = 0

    @classmethod
    def create(cls) -> NetHost:
        sweep_stale()
        n = next(_COUNTER)
        tag = f"{os.getpid() % 100000}x{n}"
        ns = f"rsfaults-{os.getpid()}-{n}"
        used = _used_addresses()
        for _ in range(200):   # a /30 in 10.200.0.0/13 nobody on this machine uses
            base = f"10.{random.randint(200, 207)}.{random.randint(0, 255)}.{random.randrange(0, 256, 4)}"
            a, b, c, d = base.split(".")
            peer, addr = f"{a}.{b}.{c}.{int(d) + 1}", f"{a}.{b}.{c}.{int(d) + 2}"
            if peer not in used and addr not in used:
                break
        else:
            raise RuntimeError("no free /30 in 10.200.0.0/13")
        host = cls(ns, f"rsf{tag}r", f"rsf{tag}n", peer, addr)
        try:
            _ip("netns", "add", ns)
            _ip("link", "add", host.root_if, "type", "veth", "peer", "name", host.host_if)
            _ip("link", "set", host.host_if, "netns", ns)
            _ip("addr", "add", f"{peer}/30", "dev", host.root_if)
            _ip("link", "set", host.root_if, "up")
            host.exec_ip("addr", "add", f"{addr}/30", "dev", host.host_if)
            host.exec_ip("link", "set", host.host_if, "up")
            host.exec_ip("link", "set", "lo", "up")
        except BaseException:
            host.close()
            raise
        return host

    def exec_ip(self, *args: str) -> None:
        _ip("netns", "exec", self.ns, "ip", *args)

    def argv(self, command: list[str]) -> list[str]:
        """``command`` run inside the namespace (``ip netns exec`` execs it: the pid is the command's)."""
        return ["ip", "netns", "exec", self.ns, *command]

    def cut(self) -> float:
        """Take the namespace's end of the link down; the monotonic time of the cut."""
        self.exec_ip("link", "set", self.host_if, "down")
        self.cuts += 1
        return time.monotonic()

    def restore(self) -> float:
        self.exec_ip("link", "set", self.host_if, "up")
        return time.monotonic()

    def pids(self) -> list[int]:
        res = _ip("netns", "pids", self.ns, check=False)
        return [int(p) for p in res.stdout.split()] if res.returncode == 0 else []

    def close(self) -> None:
        """Kill what still runs in the namespace (only processes this test started live there), delete the
        link and the namespace. Safe to call twice."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        _ip("link", "del", self.root_if, check=False)
        _ip("netns", "del", self.ns, check=False)

    def __enter__(self) -> NetHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
