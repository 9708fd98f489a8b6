"""RELIABILITY row 10: what a client sends cannot take our broker down.

One ``rocketstream serve`` process (name server + broker, temporary store). Against its broker port:

* malformed frames — truncated, oversized, negative length, header length past the frame, unknown
  serialize-type byte, bad JSON, JSON of the wrong shape, binary garbage, a ROCKETMQ binary header with
  lengths that lie — each closes that connection only;
* well-formed requests with random header fields and bodies for every request code the broker
  handles (hypothesis): each gets an answer, the connection stays open;
* 1,000 idle connections plus 200 slow ones (a frame trickled one byte at a time) held open while a
  control client sends and pulls: its round trips stay fast and the broker's memory stays bounded.

After all of it the control client still sends and pulls, and ``rocketstream check`` finds the store
intact.

    pytest tests/reliability/test_broker_fuzz.py              # default run: fewer examples
    ROCKETSTREAM_FUZZ_FULL=1 pytest -s tests/reliability/test_broker_fuzz.py   # 1,000 random requests
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstream.remoting import RemotingCommand, RequestCode, connect
from tests.realbroker import peers

REPO = Path(__file__).resolve().parents[2]
SLOW = os.environ.get("ROCKETSTREAM_FUZZ_FULL") == "1"

# codes the broker registers processors for (docs/remoting-protocol.md; spec §8.1) and a few it does not
CODES = [10, 11, 12, 13, 14, 15, 17, 21, 22, 23, 25, 26, 28, 29, 30, 31, 32, 33, 34, 35, 36, 38, 41, 42, 43, 45, 46,
         200, 201, 202, 203, 207, 208, 215, 300, 304, 305, 307, 310, 320, 361, 9999, -5]
FIELD_NAMES = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "topic", "consumerGroup",
               "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset", "suspendTimeoutMillis",
               "subscription", "subVersion", "expressionType", "group", "offset", "delayLevel", "originMsgId",
               "originTopic", "maxReconsumeTimes", "timestamp", "key", "maxNum", "beginTimestamp",
               "endTimestamp", "producerGroup", "consumerGroup", "clientID", "msgId", "readQueueNums",
               "writeQueueNums", "perm", "topicFilterType"]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


class Serve:
    def __init__(self, proc: subprocess.Popen, log: Path, broker: str, namesrv: str) -> None:
        self.proc, self.log, self.broker, self.namesrv = proc, log, broker, namesrv

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    home = tmp_path_factory.mktemp("fuzz")
    bport, nport = peers.free_port(), peers.free_port()
    log = home / "serve.log"
    conf = home / "broker.conf"
    conf.write_text("brokerName=fuzz-a\nmappedFileSizeCommitLog=4194304\n")
    proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "serve", "--store", str(home / "store"),
                         "--listen", f"127.0.0.1:{bport}", "--namesrv-listen", f"127.0.0.1:{nport}",
                         "--conf", str(conf)], _env(), log)
    server = peers.Server("rocketstream serve", proc, log, bport)
    server.wait_ready("The broker[", timeout=60)
    yield Serve(proc, log, f"127.0.0.1:{bport}", f"127.0.0.1:{nport}")
    assert server.stop(30) == 0, peers._tail(log)
    res = subprocess.run([sys.executable, "-m", "rocketstream.cli", "check", "--store", str(home / "store")],
                         env=_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def _send_request(topic: str, body: bytes, n: int) -> RemotingCommand:
    fields = {"a": "fuzz-producer", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0,
              "g": int(time.time() * 1000), "h": 0, "i": f"KEYS\u0001k{n}\u0002", "j": 0, "k": "false",
              "m": "false"}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, body)


async def _control_round_trip(addr: str, n: int) -> float:
    """A send and a pull of what was sent; the seconds it took."""
    t0 = time.monotonic()
    ch = await connect(addr)
    try:
        resp = await ch.invoke(_send_request("FuzzT", b"control-%d" % n, n), timeout=10)
        assert resp.code == 0, resp.remark
        offset = int(resp.field("queueOffset"))
        pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "fuzz-group", "topic": "FuzzT", "queueId": 0, "queueOffset": offset, "maxMsgNums": 1,
            "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 1000, "subscription": "*", "subVersion": 0,
            "expressionType": "TAG"})
        resp = await ch.invoke(pull, timeout=10)
        assert resp.code == 0, (resp.code, resp.remark)
        assert b"control-%d" % n in (resp.body or b"")
    finally:
        await ch.aclose()
    return time.monotonic() - t0


def _run(coro):   # one event loop per call: hypothesis examples are synchronous
    return asyncio.run(coro)


async def _raw(addr: str, payload: bytes, *, wait: float = 2.0) -> bytes:
    """Write raw bytes; what came back before the server closed (or ``wait`` passed)."""
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(payload)
        await writer.drain()
        try:
            return await asyncio.wait_for(reader.read(1 << 20), wait)
        except asyncio.TimeoutError:
            return b"<open>"
    finally:
        writer.close()


def _json_frame(header: bytes, body: bytes = b"", type_byte: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (type_byte << 24) | len(header)) + header + body


MALFORMED = {
    "truncated": struct.pack(">i", 100) + b"\x00\x00\x00\x10{\"code\":",
    "oversized": struct.pack(">i", 16 * 1024 * 1024 + 1) + b"\x00" * 64,
    "negative length": struct.pack(">i", -8) + b"\x00" * 8,
    "header past frame": struct.pack(">iI", 8, 1000) + b"{}{}",
    "unknown type byte": _json_frame(b'{"code":30}', type_byte=7),
    "bad json": _json_frame(b'{"code":30,,}'),
    "json not an object": _json_frame(b'[1,2,3]'),
    "code is a string": _json_frame(b'{"code":"thirty","flag":0,"opaque":1}'),
    "extFields a list": _json_frame(b'{"code":30,"flag":0,"opaque":1,"extFields":[1]}'),
    "garbage": struct.pack(">i", 4092) + bytes(random.Random(5).randrange(256) for _ in range(4092)),
    "binary header lies": struct.pack(">iI", 4 + 30, (1 << 24) | 30) + struct.pack(">hBhii", 30, 0, 409, 1, 0)
    + struct.pack(">i", 1000) + b"\x00" * 13,
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_frame_closes_only_its_connection(serve: Serve, name: str) -> None:
    async def body() -> None:
        got = await _raw(serve.broker, MALFORMED[name])
        # a frame that is not complete yet keeps its connection waiting; any other is closed, unanswered
        assert got == (b"<open>" if name == "truncated" else b""), got[:64]
        await _control_round_trip(serve.broker, hash(name) & 0xFFFF)
    _run(body())
    assert serve.proc.poll() is None, peers._tail(serve.log)


_text = st.one_of(st.text(max_size=40), st.sampled_from(["", "-1", "0", "1", "2147483648", "-9223372036854775809",
                                                           "9" * 30, "1e5", " 7", "true", "null", "%RETRY%g",
                                                           "TBW102", "SCHEDULE_TOPIC_XXXX", "FuzzT"]))


@settings(max_examples=1000 if SLOW else 150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(code=st.sampled_from(CODES), fields=st.dictionaries(st.sampled_from(FIELD_NAMES), _text, max_size=12),
       body=st.one_of(st.none(), st.binary(max_size=300), st.just(b'{"consumerDataSet":[{"groupName":1}]}')),
       stype=st.sampled_from([0, 1]))
def test_random_requests_are_answered_and_the_connection_survives(serve: Serve, code: int, fields: dict[str, str],
                                                                    body: bytes | None, stype: int) -> None:
    async def run() -> None:
        ch = await connect(serve.broker)
        try:
            req = RemotingCommand.request(code, dict(fields), body, serialize_type=stype)
            oneway = code in (RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.UNLOCK_BATCH_MQ) and \
                random.random() < 0.5
            if oneway:
                await ch.invoke_oneway(req)
            else:
                # a parked pull is answered at its suspend timeout at the latest; cap what we wait for
                if code in (RequestCode.PULL_MESSAGE, 361):
                    req.ext_fields = dict(req.ext_fields or {}, suspendTimeoutMillis="200")
                resp = await ch.invoke(req, timeout=20)
                assert resp.is_response
            # the same connection still works
            resp = await ch.invoke(RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                                           {"topic": "FuzzT", "queueId": 0}), timeout=10)
            assert resp.code in (0, 17), (resp.code, resp.remark)
        finally:
            await ch.aclose()
    _run(run())
    assert serve.proc.poll() is None, peers._tail(serve.log)


def test_a_thousand_idle_and_slow_connections_do_not_stop_others(serve: Serve) -> None:
    async def body() -> tuple[float, list[float]]:
        await _control_round_trip(serve.broker, 1)
        host, port = serve.broker.rsplit(":", 1)
        idle = []
        for _ in range(1000):
            idle.append(await asyncio.open_connection(host, int(port)))
        frame = _json_frame(json.dumps({"code": 30, "flag": 0, "opaque": 7, "language": "JAVA", "version": 409,
                                        "extFields": {"topic": "FuzzT", "queueId": "0"}}).encode())
        slow = [await asyncio.open_connection(host, int(port)) for _ in range(200)]

        async def trickle(writer: asyncio.StreamWriter) -> None:
            for i in range(len(frame) - 1):   # never the last byte: the frame stays incomplete
                writer.write(frame[i:i + 1])
                await writer.drain()
                await asyncio.sleep(0.05)

        trickles = [asyncio.create_task(trickle(w)) for _, w in slow]
        times = []
        try:
            for n in range(20):
                times.append(await _control_round_trip(serve.broker, 1000 + n))
                await asyncio.sleep(0.1)
        finally:
            for t in trickles:
                t.cancel()
            for _, w in idle + slow:
                w.close()
        return max(times), times

    rss_before = serve.rss_kib()
    worst, times = _run(body())
    rss_after = serve.rss_kib()
    assert serve.proc.poll() is None, peers._tail(serve.log)
    assert worst < 2.0, times
    assert rss_after - rss_before < 200 * 1024, (rss_before, rss_after)
    print("RELIABILITY " + json.dumps({"item": "broker connections", "idle": 1000, "slow": 200,
                                       "max_round_trip_ms": round(worst * 1000), "rss_mib_before": rss_before // 1024,
                                       "rss_mib_after": rss_after // 1024, "failures_found": 0}))
    _run(_control_round_trip(serve.broker, 99))
