"""Session fixtures for the broker tests: OUR ``rocketstream serve`` (name server + broker in one process)
as a subprocess on free 127.0.0.1 ports over a temporary store, started once per session and stopped with
SIGTERM at the end (tests/realbroker/peers.py's atexit/PDEATHSIG guards kill it if pytest dies).

Other helpers' tests reuse ``served``: ``namesrv_addr``, ``broker_addr``, ``store`` (the store root),
``log`` (the process's stderr/stdout). ``start_serve``/``stop_serve`` start more instances (own store,
own ports) for tests that need a broker of their own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.realbroker import peers

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    proc: subprocess.Popen
    log: Path
    store: Path
    namesrv_port: int
    broker_port: int
    home: Path

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_serve(home: Path, *extra: str, conf: dict[str, str] | None = None, store: Path | None = None,
                timeout: float = 60) -> Served:
    """``python -m rocketstream.cli serve`` on free ports, ready ("boot success" of the broker)."""
    home.mkdir(parents=True, exist_ok=True)
    ns_port = peers.free_port()
    broker_port = peers.free_port((0, 1))
    store = store or home / f"store-{broker_port}"
    log = home / f"rocketstream-serve-{broker_port}.log"
    argv = [sys.executable, "-m", "rocketstream.cli", "serve", "--store", str(store),
            "--listen", f"127.0.0.1:{broker_port}", "--namesrv-listen", f"127.0.0.1:{ns_port}"]
    if conf:
        conf_path = home / f"broker-{broker_port}.conf"
        conf_path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        argv += ["--conf", str(conf_path)]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("ROCKETSTREAM_CONF", None)
    proc = peers._spawn([*argv, *extra], env, log)
    served = Served(proc, log, store, ns_port, broker_port, home)
    peers.Server("rocketstream serve", proc, log, broker_port).wait_ready("] boot success", timeout=timeout)
    return served


def stop_serve(served: Served, timeout: float = 30) -> int:
    """SIGTERM and wait; the exit status (0 after a clean stop)."""
    if served.proc.poll() is None:
        served.proc.send_signal(signal.SIGTERM)
        try:
            served.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            served.proc.kill()
            served.proc.wait()
            raise
    peers._forget(served.proc)
    return served.proc.returncode


@pytest.fixture(scope="session")
def served(tmp_path_factory) -> Served:
    """One ``rocketstream serve`` for the whole session (temporary store, free ports)."""
    home = tmp_path_factory.mktemp("broker-serve")
    s = start_serve(home)
    try:
        yield s
    finally:
        stop_serve(s)


@pytest.fixture(scope="session")
def java_dist() -> Path:
    """The RocketMQ 4.9.8 distribution (skips when Java or the distribution is missing)."""
    try:
        peers.find_java()
        return peers.find_dist()
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))
