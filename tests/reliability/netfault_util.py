"""Servers for the network fault campaigns (test_net_faults_*.py): our name server in the test's
namespace, and our broker or the real 4.9.8 broker on a second "host" (a network namespace, netns_util)
or on 127.0.0.1 — each restartable on the same store and port, and killable with SIGKILL.

The name server listens on the root namespace's address of the veth link (``NetHost.peer_addr``), so the
broker inside the namespace registers through the link and clients in the root namespace reach both.
A broker advertises the address it binds (ours: ``--listen``; 4.9.8: ``bind=`` of tests/realbroker/peers.py
``broker_command``, written as brokerIP1/brokerIP2), i.e. the namespace's own address.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.realbroker import peers

REPO = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def free_port(span: tuple[int, ...] = (0,)) -> int:
    """A port P with P+d free on 127.0.0.1 for every d in ``span`` (inside a fresh namespace every port is free;
    a name server on the link's root address shares the root namespace's ports, so it takes one free here)."""
    return peers.free_port(span)


@dataclass
class NameServer:
    addr: str
    log: Path
    proc: subprocess.Popen | None = None

    def start(self) -> NameServer:
        port = self.addr.rsplit(":", 1)[1]
        self.proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "namesrv", "--listen", self.addr],
                                 env(), self.log)
        peers.Server("rocketstream namesrv", self.proc, self.log, int(port)).wait_ready("boot success", 90)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        if self.proc is not None:
            peers._forget(self.proc)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        if self.proc is not None:
            peers._forget(self.proc)


@dataclass
class Broker:
    """One broker (``kind`` "ours" or "java") on ``host:port`` and ``store``, started through ``wrap`` (e.g.
    ``NetHost.argv`` to run it inside a namespace). ``start`` may be called again after ``kill``/``stop``."""
    kind: str
    name: str
    host: str
    port: int
    namesrv: str
    store: Path
    home: Path
    wrap: object = None          # callable(list[str]) -> list[str], or None
    conf_extra: str = ""
    starts: int = 0
    server: peers.Server | None = None
    boot_s: list[float] = field(default_factory=list)

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def _argv(self, argv: list[str]) -> list[str]:
        return self.wrap(argv) if callable(self.wrap) else argv

    def start(self, timeout: float = 180) -> Broker:
        log = self.home / f"broker-{self.starts}.log"
        self.home.mkdir(parents=True, exist_ok=True)
        if self.kind == "ours":
            conf = self.home / "broker.conf"
            conf.write_text(f"brokerName={self.name}\nflushDiskType=SYNC_FLUSH\nmappedFileSizeCommitLog=4194304\n"
                            f"autoCreateSubscriptionGroup=true\n{self.conf_extra}")
            argv = [sys.executable, "-m", "rocketstream.cli", "broker", "--store", str(self.store), "--listen",
                    self.addr, "--namesrv", self.namesrv, "--conf", str(conf)]
            proc = peers._spawn(self._argv(argv), env(), log)
        else:
            argv = peers.broker_command(self.home / "java-home", self.port, self.namesrv, name=self.name,
                                        store=self.store, extra_conf=self.conf_extra,
                                        commitlog_file_size=4 * 1024 * 1024, cq_file_size=600000, bind=self.host)
            proc = peers._spawn(self._argv(argv), peers.server_env(peers.find_dist()), log)
        self.starts += 1
        self.server = peers.Server(f"{self.kind} broker {self.name}@{self.addr}", proc, log, self.port)
        self.boot_s.append(self.server.wait_ready("boot success", timeout))
        return self

    def kill(self) -> None:
        if self.server is not None:
            self.server.kill()

    def stop(self) -> None:
        """Clean stop (SIGTERM): the broker persists its offset table."""
        if self.server is not None and self.server.proc.poll() is None:
            self.server.stop(90)


def broker_view(namesrv: str, addr: str, topic: str, group: str, queues: int) -> tuple[dict[int, int], dict[int, int]]:
    """The queues' max offsets and ``group``'s committed offsets (-1: none), asked of the live broker."""
    from rocketstream.client.api import MQClientAPI

    async def ask():
        api = MQClientAPI(namesrv)
        try:
            maxes = [await api.max_offset(addr, topic, q) for q in range(queues)]
            committed = [await api.query_offset(addr, group, topic, q) for q in range(queues)]
            return dict(enumerate(maxes)), {q: -1 if o is None else o for q, o in enumerate(committed)}
        finally:
            await api.close()

    return asyncio.run(ask())


def wait_route(namesrv: str, topic: str, timeout: float = 60) -> None:
    """Wait until the name server has a route for ``topic`` (the broker registered it)."""
    import time

    from rocketstream.client.api import MQClientAPI
    from rocketstream.errors import RocketStreamError

    async def ask() -> bool:
        api = MQClientAPI(namesrv)
        try:
            route = await api.get_route(topic, 5)
            return bool(route and route.queue_datas)
        except RocketStreamError:
            return False
        finally:
            await api.close()

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if asyncio.run(ask()):
            return
        time.sleep(0.2)
    raise AssertionError(f"no route for {topic} on {namesrv} after {timeout} s")
