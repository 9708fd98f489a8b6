"""Peers for the Python-client interop scenarios, benchmark and reliability campaigns.

* the brokers: tests/conftest.py's ``mq_broker`` (``ours`` and ``java``, once per session each).
* ``interop_classes``: tests/java/ClientInterop.java compiled into a temporary directory.
* :class:`JavaPeer`: one ClientInterop run in the background, its JSON lines read from a file as they come.
* ``create_topic`` / ``consumer_ids`` / ``query_offset``: direct remoting requests (UPDATE_AND_CREATE_TOPIC,
  GET_CONSUMER_LIST_BY_GROUP, QUERY_CONSUMER_OFFSET) so the scenarios do not depend on the client under test
  for their setup and their checks.
* ``client_api()``: the client's public classes (skips while the client modules are not there yet).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocketstream.remoting import RemotingCommand, RequestCode, connect
from tests.broker.java_fixtures import BrokerTarget
from tests.realbroker import peers

REPO = Path(__file__).resolve().parents[2]
INTEROP_SRC = REPO / "tests" / "java" / "ClientInterop.java"


# --- the brokers -------------------------------------------------------------------------------------------
def require_java() -> None:
    try:
        peers.find_dist()
        peers.find_java()
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))


def compile_java(outdir: Path, src: Path = INTEROP_SRC) -> Path:
    require_java()
    return peers.compile_java(outdir, src)


@pytest.fixture(scope="session")
def interop_classes(tmp_path_factory) -> Path:
    return compile_java(tmp_path_factory.mktemp("interop-classes"))


# --- direct remoting requests ---------------------------------------------------------------------------------
async def _invoke(addr: str, code: int, fields: dict | None, timeout: float = 5.0) -> RemotingCommand:
    ch = await connect(addr)
    try:
        return await ch.invoke(RemotingCommand.request(code, fields), timeout)
    finally:
        ch.close()


def create_topic(target: BrokerTarget, topic: str, queues: int = 4, *, order: bool = False,
                 wait_route: float = 15.0) -> None:
    """UPDATE_AND_CREATE_TOPIC on the broker, then wait until the name server routes it."""
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
              "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": order}
    resp = asyncio.run(_invoke(target.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, fields))
    assert resp.code == 0, f"UPDATE_AND_CREATE_TOPIC {topic} on {target.kind}: {resp.code} {resp.remark}"
    deadline = time.monotonic() + wait_route
    while time.monotonic() < deadline:
        r = asyncio.run(_invoke(target.namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        if r.code == 0 and r.body and f'"readQueueNums":{queues}' in r.body.decode("utf-8", "replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic}: no route with {queues} queues from {target.namesrv_addr} after {wait_route} s")


def consumer_ids(broker_addr: str, group: str) -> list[str]:
    resp = asyncio.run(_invoke(broker_addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}))
    if resp.code != 0 or not resp.body:
        return []
    return list(json.loads(resp.body)["consumerIdList"])


def query_offset(broker_addr: str, group: str, topic: str, queue_id: int) -> int | None:
    resp = asyncio.run(_invoke(broker_addr, RequestCode.QUERY_CONSUMER_OFFSET,
                               {"consumerGroup": group, "topic": topic, "queueId": queue_id}))
    if resp.code != 0:
        return None
    return resp.int_field("offset")


# --- the Java peer ------------------------------------------------------------------------------------------
@dataclass
class JavaPeer:
    """``ClientInterop MODE ...`` running in the background; stdout (JSON lines) goes to ``out``."""
    proc: subprocess.Popen
    out: Path
    what: str

    @classmethod
    def start(cls, classes: Path, target: BrokerTarget, mode: str, *args: str, name: str) -> JavaPeer:
        java, _ = peers.find_java()
        home = target.home / "interop-client"
        out = target.home / f"{name}.jsonl"
        argv = [str(java), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dfile.encoding=UTF-8",
                f"-Duser.home={home}", f"-Drocketmq.client.logRoot={home}/logs",
                "-cp", f"{classes}:{peers.find_dist()}/lib/*", "ClientInterop", mode, target.namesrv_addr, *args]
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "wb") as fh:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    preexec_fn=peers._die_with_parent)
        peers._LIVE.append(proc)
        return cls(proc, out, f"ClientInterop {mode} {' '.join(args[:2])}")

    def lines(self) -> list[dict]:
        out = []
        for line in self.out.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass   # a line being written
        return out

    def messages(self) -> list[dict]:
        return [x for x in self.lines() if "msg" in x]

    def result(self) -> dict | None:
        res = [x for x in self.lines() if "result" in x]
        return res[-1] if res else None

    def wait(self, timeout: float) -> dict:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.what}: still running after {timeout:.0f} s:\n{self.tail()}") from None
        peers._forget(self.proc)
        res = self.result()
        assert res is not None, f"{self.what}: exit {self.proc.returncode} without a result:\n{self.tail()}"
        return res

    def wait_for(self, pred, timeout: float, what: str) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = self.lines()
            if pred(lines):
                return lines
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.what} exited ({self.proc.returncode}) before {what}:\n{self.tail()}")
            time.sleep(0.1)
        raise AssertionError(f"{self.what}: no {what} after {timeout:.0f} s:\n{self.tail()}")

    def stop(self, timeout: float = 30) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        peers._forget(self.proc)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        peers._forget(self.proc)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.out.read_text(errors="replace").splitlines()[-n:])


# --- the client under test ------------------------------------------------------------------------------------
MODULES = {"producer": "rocketstream.client.producer", "push": "rocketstream.client.push_consumer",
           "lite": "rocketstream.client.lite_pull"}


def client_api(*need: str) -> SimpleNamespace:
    """The client's public names (Producer, LitePullConsumer, PushConsumer, statuses, Message...) from the modules
    ``need`` names ("producer", "push", "lite"; default all); skips the calling test while one of them is not
    written yet."""
    ns = SimpleNamespace()
    mods = []
    for key in need or tuple(MODULES):
        try:
            mods.append(importlib.import_module(MODULES[key]))
        except ImportError as exc:
            pytest.skip(f"the Python client is not there yet: {exc}")
    for extra in ("rocketstream.client.common", "rocketstream.client.consume_service", "rocketstream.client.rebalance"):
        try:
            mods.append(importlib.import_module(extra))
        except ImportError:
            continue
    for mod in mods:
        for name in dir(mod):
            if not name.startswith("_") and not hasattr(ns, name):
                setattr(ns, name, getattr(mod, name))
    return ns


def env_with_repo() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
