"""Session fixtures for the interop tests: OUR name server (``rocketstream namesrv`` as a subprocess),
a real Java 4.9.8 name server as the oracle, and a real 4.9.8 broker registered with BOTH (its
``namesrvAddr`` lists the two), all on free 127.0.0.1 ports under one temp directory. Started once,
killed at the end (and by tests/realbroker/peers.py's atexit/PDEATHSIG guards if pytest dies)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.realbroker import peers

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Ours:
    proc: subprocess.Popen
    log: Path
    port: int

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


def start_ours(home: Path, *extra: str) -> Ours:
    port = peers.free_port()
    log = home / f"rocketstream-namesrv-{port}.log"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "namesrv", "--listen", f"127.0.0.1:{port}",
                         *extra], env, log)
    ours = Ours(proc, log, port)
    peers.Server("rocketstream namesrv", proc, log, port).wait_ready("boot success", timeout=60)
    return ours


def stop_ours(ours: Ours, timeout: float = 20) -> int:
    """SIGTERM and wait; the exit status (0 after a clean stop)."""
    if ours.proc.poll() is None:
        ours.proc.send_signal(signal.SIGTERM)
        try:
            ours.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            ours.proc.kill()
            ours.proc.wait()
            raise
    peers._forget(ours.proc)
    return ours.proc.returncode


def start_broker(home: Path, namesrv_addr: str, name: str, cluster: str = "DefaultCluster",
                 extra_conf: dict[str, str] | None = None) -> peers.Server:
    """A Java master broker registering with every address in ``namesrv_addr`` ("a;b"), ready."""
    server = peers.start_broker(home, namesrv_addr, extra_conf=extra_conf, name=name, cluster=cluster)
    server.wait_ready("boot success")
    return server


@dataclass
class Interop:
    home: Path
    ours: Ours
    java_namesrv: peers.Server
    broker: peers.Server

    @property
    def java_addr(self) -> str:
        return f"127.0.0.1:{self.java_namesrv.port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker.port}"


@pytest.fixture(scope="session")
def interop(tmp_path_factory) -> Interop:
    try:
        peers.find_dist()
        peers.find_java()
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))
    home = tmp_path_factory.mktemp("namesrv-interop")
    ours = java = broker = None
    try:
        ours = start_ours(home)
        java = peers.start_namesrv(home)
        java.wait_ready("boot success")
        broker = start_broker(home, f"127.0.0.1:{java.port};{ours.addr}", "broker-a")
        yield Interop(home, ours, java, broker)
    finally:
        for server in (broker, java):
            if server is not None:
                server.kill()
        if ours is not None:
            stop_ours(ours)


def invoke(addr: str, code: int, fields: dict | None = None, body: bytes | None = None, *, version: int | None = None,
           timeout: float = 5.0):
    """One request over a fresh connection (sync helper for tests)."""
    from rocketstream.remoting import RemotingCommand, connect

    async def go():
        ch = await connect(addr)
        try:
            req = RemotingCommand.request(code, fields, body)
            if version is not None:
                req.version = version
            return await ch.invoke(req, timeout)
        finally:
            await ch.aclose()
    return asyncio.run(go())


def wait_until(predicate, timeout: float = 30.0, what: str = "condition"):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
