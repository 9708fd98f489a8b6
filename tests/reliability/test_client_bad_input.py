"""RELIABILITY (client): bad input — consumer side and cross-cutting cases (the producer's own argument checks
are tests/client/test_producer*.py, capi's).

* invalid group names for PushConsumer / LitePullConsumer, invalid topics in subscribe/assign: a typed error
  (RocketStreamError, and ValueError for arguments) naming the argument or its value, raised before anything
  is sent;
* an oversized batch (over 4 MiB, maxMessageSize) is refused client-side with a typed error;
* an unreachable name server (a closed port): Producer.send fails with a typed error naming the address within
  its timeout; PushConsumer/LitePullConsumer start, poll and shutdown return within their timeouts;
* a peer that answers garbage (random bytes on every connection; or a server that accepts and never answers),
  as the name server and — behind a fake name server whose route points at it — as the broker: typed errors
  naming that address, nothing hangs past its timeout, shutdown returns promptly.

    pytest tests/reliability/test_client_bad_input.py
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Iterator

import pytest

from rocketstream.errors import RocketStreamError
from rocketstream.remoting import RemotingCommand, RemotingServer, RequestCode
from tests.client.interop_peers import client_api
from tests.realbroker import peers

SLACK_S = 3.0            # beyond an operation's own timeout
OP_BOUND_S = 3.0 * 3 + SLACK_S   # start/shutdown of a consumer: a few 3 s requests, generous


class Fakes:
    """Servers on a private event loop thread: ``garbage`` (random bytes), ``silent`` (never answers),
    ``namesrv_to(addr)`` (a name server whose every route names ``addr`` as broker-a's master)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.servers: list = []
        self.garbage = self.run(self._garbage())
        self.silent = self.run(self._silent())

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    async def _garbage(self) -> str:
        rng = random.Random(7)

        async def handle(reader, writer):
            try:
                writer.write(rng.randbytes(64))
                while True:
                    data = await reader.read(4096)
                    if not data:
                        break
                    writer.write(rng.randbytes(len(data) + 16))
                    await writer.drain()
            except OSError:
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.servers.append(server)
        return f"127.0.0.1:{server.sockets[0].getsockname()[1]}"

    async def _silent(self) -> str:
        async def handle(reader, writer):
            try:
                while await reader.read(4096):
                    pass
            except OSError:
                pass

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.servers.append(server)
        return f"127.0.0.1:{server.sockets[0].getsockname()[1]}"

    def namesrv_to(self, broker_addr: str, *, garbage_route: bool = False) -> str:
        async def start() -> str:
            server = RemotingServer("127.0.0.1", 0, name="fake-namesrv")

            def route(channel, request: RemotingCommand):
                if garbage_route:
                    return request.response(0, body=b"\x00{not json at all" + random.randbytes(40))
                body = {"brokerDatas": [{"brokerAddrs": {"0": broker_addr}, "brokerName": "fake-a",
                                         "cluster": "FakeCluster"}],
                        "queueDatas": [{"brokerName": "fake-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                                        "writeQueueNums": 4}], "filterServerTable": {}}
                return request.response(0, body=json.dumps(body).encode())

            server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, route)
            server.default_processor = lambda ch, req: None if req.is_oneway else req.response(0)
            await server.start()
            self.servers.append(server)
            return server.address
        return self.run(start())

    def close(self) -> None:
        async def stop():
            for s in self.servers:
                if isinstance(s, RemotingServer):
                    await s.stop()
                else:
                    s.close()
        self.run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def fakes() -> Iterator[Fakes]:
    f = Fakes()
    try:
        yield f
    finally:
        f.close()


def closed_addr() -> str:
    return f"127.0.0.1:{peers.free_port()}"


def timed(fn, bound: float, what: str):
    """(result or exception, seconds); fails when ``fn`` takes longer than ``bound``."""
    t0 = time.monotonic()
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:   # noqa: BLE001 - handed to the caller
            box["error"] = exc

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(bound + 30)
    secs = time.monotonic() - t0
    assert not th.is_alive(), f"{what}: still blocked after {secs:.0f} s (bound {bound:.0f} s)"
    assert secs <= bound, f"{what}: took {secs:.1f} s (bound {bound:.1f} s)"
    return box.get("error", box.get("value")), secs


def assert_names(exc: BaseException, *needles: str) -> None:
    assert isinstance(exc, RocketStreamError), f"expected a typed RocketStreamError, got {type(exc).__name__}: {exc}"
    text = str(exc) + " " + " ".join(str(v) for v in vars(exc).values())
    assert any(n in text for n in needles), f"{type(exc).__name__}: {exc!s} names none of {needles}"


# --- invalid names ---------------------------------------------------------------------------------------------
BAD_GROUPS = ["", "bad group!", "g" * 256, "bad/group"]
BAD_TOPICS = ["", "bad topic!", "t" * 128, "bad/topic"]


@pytest.mark.parametrize("group", BAD_GROUPS)
@pytest.mark.parametrize("kind", ["PushConsumer", "LitePullConsumer"])
def test_invalid_group_names_are_refused(kind: str, group: str) -> None:
    api = client_api()
    cls = getattr(api, kind)

    def make():
        c = cls(group, namesrv=closed_addr())
        c.subscribe("GoodTopic", "*")
        c.start()
        c.shutdown()

    exc, _ = timed(make, SLACK_S, f"{kind}({group!r})")
    assert isinstance(exc, BaseException), f"{kind} accepted the group name {group!r}"
    assert isinstance(exc, ValueError), f"{type(exc).__name__} is not a ValueError"
    assert_names(exc, "group", "Group", repr(group)[:40], group[:40] or "blank")


@pytest.mark.parametrize("topic", BAD_TOPICS)
@pytest.mark.parametrize("kind", ["PushConsumer", "LitePullConsumer"])
def test_invalid_topics_are_refused_by_subscribe(kind: str, topic: str) -> None:
    api = client_api()
    c = getattr(api, kind)("GoodGroup", namesrv=closed_addr())
    exc, _ = timed(lambda: c.subscribe(topic, "*"), SLACK_S, f"{kind}.subscribe({topic!r})")
    assert isinstance(exc, BaseException), f"{kind}.subscribe accepted the topic {topic!r}"
    assert isinstance(exc, ValueError), f"{type(exc).__name__} is not a ValueError"
    assert_names(exc, "topic", "Topic", topic[:40] or "blank")


def test_oversized_batch_is_refused_client_side() -> None:
    api = client_api("producer")
    p = api.Producer("BadInputProducer", namesrv=closed_addr())
    p.start()
    try:
        msgs = [api.Message("GoodTopic", b"x" * (1 << 20)) for _ in range(5)]   # 5 MiB > maxMessageSize 4 MiB
        exc, _ = timed(lambda: p.send_batch("GoodTopic", msgs), SLACK_S, "send_batch of 5 MiB")
        assert_names(exc, "body", "size", "4194304", "maxMessageSize")
    finally:
        p.shutdown()


# --- the client instance and its requests (cross-cutting: every consumer and producer uses them) --------------
def _instance(namesrv: str, name: str):
    from rocketstream.client.instance import MQClientInstance
    return MQClientInstance.get(namesrv, f"badinput-{name}-{time.monotonic_ns()}").start()


@pytest.mark.parametrize("peer", ["closed", "garbage", "silent", "garbage-route"])
def test_route_lookup_from_a_bad_name_server(fakes: Fakes, peer: str) -> None:
    addr = {"closed": closed_addr(), "garbage": fakes.garbage, "silent": fakes.silent,
            "garbage-route": fakes.namesrv_to("127.0.0.1:1", garbage_route=True)}[peer]
    inst = _instance(addr, peer)
    try:
        exc, secs = timed(lambda: inst.run(inst.api.get_route("GoodTopic", timeout=1.0), 10.0), 1.0 + SLACK_S,
                          f"get_route from a {peer} name server")
        assert isinstance(exc, BaseException), f"get_route from a {peer} name server returned {exc!r}"
        assert_names(exc, addr)
        print(f"{peer} name server: {type(exc).__name__} after {secs:.1f} s: {exc}")
    finally:
        timed(inst.shutdown, 10.0 + SLACK_S, "MQClientInstance.shutdown")


@pytest.mark.parametrize("peer", ["closed", "garbage", "silent"])
def test_broker_requests_to_a_bad_broker(fakes: Fakes, peer: str) -> None:
    """pull / query_offset / consumer_ids / heartbeat against a closed, garbage or silent broker address: typed
    errors naming the address, each within its timeout (the four are sent at once)."""
    broker = {"closed": closed_addr(), "garbage": fakes.garbage, "silent": fakes.silent}[peer]
    inst = _instance(closed_addr(), f"broker-{peer}")
    api = inst.api
    calls = {
        "pull": lambda: api.pull(broker, group="G", topic="T", queue_id=0, offset=0, max_nums=32, sys_flag=0,
                                 commit_offset=0, suspend_ms=0, subscription="*", sub_version=0, timeout=2.0),
        "query_offset": lambda: api.query_offset(broker, "G", "T", 0, timeout=2.0),
        "consumer_ids": lambda: api.consumer_ids(broker, "G", timeout=2.0),
        "heartbeat": lambda: api.heartbeat(broker, {"clientID": inst.client_id, "producerDataSet": [],
                                                    "consumerDataSet": []}, timeout=2.0),
    }
    async def each() -> list:
        # all four at once (a silent broker makes each wait out its own 2 s timeout; they need not add up)
        return await asyncio.gather(*(call() for call in calls.values()), return_exceptions=True)

    try:
        results, secs = timed(lambda: inst.run(each(), 10.0), 2.0 + SLACK_S, f"requests to a {peer} broker")
        assert isinstance(results, list), f"requests to a {peer} broker {broker}: {results!r}"
        for name, exc in zip(calls, results, strict=True):
            assert isinstance(exc, BaseException), f"{name} to a {peer} broker {broker} returned {exc!r}"
            assert_names(exc, broker)
            print(f"{peer} broker, {name}: {type(exc).__name__} (all within {secs:.1f} s): {exc}")
    finally:
        timed(inst.shutdown, 10.0 + SLACK_S, "MQClientInstance.shutdown")


# --- unreachable / garbage peers -------------------------------------------------------------------------------
SEND_TIMEOUT_S = 3.0     # Producer.send_msg_timeout (sendMsgTimeout 3000 ms): a budget for the whole send
SHUTDOWN_BOUND_S = 3 * 3.0 + SLACK_S   # unregister: 3 s per registered group and broker, as the Java client


def _producer_send(api, namesrv: str, peer: str, addr: str) -> None:
    """Send once: a typed error naming ``addr`` within the send timeout; then shutdown within its bound."""
    p = api.Producer("BadInputProducer2", namesrv=namesrv, send_msg_timeout=SEND_TIMEOUT_S)
    p.start()
    try:
        exc, secs = timed(lambda: p.send("GoodTopic", b"hello"), SEND_TIMEOUT_S + 1.0 + SLACK_S,
                          f"send ({peer} {addr})")
        assert isinstance(exc, BaseException), f"send ({peer} {addr}) returned {exc}"
        assert_names(exc, addr)
        print(f"{peer}: {type(exc).__name__} after {secs:.1f} s: {exc}")
    finally:
        _, secs = timed(p.shutdown, SHUTDOWN_BOUND_S, f"Producer.shutdown ({peer} {addr})")
        print(f"{peer}: shutdown took {secs:.1f} s")


@pytest.mark.parametrize("peer", ["closed", "garbage", "silent"])
def test_producer_with_a_bad_name_server_fails_typed_and_in_time(fakes: Fakes, peer: str) -> None:
    api = client_api("producer")
    addr = {"closed": closed_addr(), "garbage": fakes.garbage, "silent": fakes.silent}[peer]
    _producer_send(api, addr, f"{peer} name server", addr)


@pytest.mark.parametrize("peer", ["garbage", "silent", "closed"])
def test_producer_with_a_bad_broker_fails_typed_and_in_time(fakes: Fakes, peer: str) -> None:
    api = client_api("producer")
    broker = {"closed": closed_addr(), "garbage": fakes.garbage, "silent": fakes.silent}[peer]
    _producer_send(api, fakes.namesrv_to(broker), f"{peer} broker", broker)


# silent-broker waits out the consumers' timeouts (18 s): slow run; the producer's silent case stays in the default
@pytest.mark.parametrize("peer", ["closed-namesrv", "garbage-namesrv", "garbage-broker",
                                  pytest.param("silent-broker", marks=pytest.mark.slow)])
def test_consumers_with_bad_peers_never_hang(fakes: Fakes, peer: str) -> None:
    """start, poll and shutdown each return within their own timeout; nothing is delivered. The two consumers
    (client instances of their own) meet the bad peer at the same time: against a silent broker each waits
    out a few request timeouts, which need not add up."""
    api = client_api()
    ns = {"closed-namesrv": closed_addr(), "garbage-namesrv": fakes.garbage,
          "garbage-broker": fakes.namesrv_to(fakes.garbage), "silent-broker": fakes.namesrv_to(fakes.silent)}[peer]

    def lite_pull() -> None:
        lite = api.LitePullConsumer("BadInputLite", namesrv=ns, instance_name="BadInputLite")
        lite.subscribe("GoodTopic", "*")
        res, _ = timed(lite.start, OP_BOUND_S, f"LitePullConsumer.start ({peer})")
        if isinstance(res, BaseException):
            assert_names(res, ns)
        else:
            got, secs = timed(lambda: lite.poll(2.0), 2.0 + SLACK_S, f"LitePullConsumer.poll(2.0) ({peer})")
            assert got == [] or isinstance(got, BaseException), f"{peer}: poll returned {got!r}"
        timed(lite.shutdown, OP_BOUND_S, f"LitePullConsumer.shutdown ({peer})")

    def push() -> None:
        calls: list = []
        push = api.PushConsumer("BadInputPush", namesrv=ns, instance_name="BadInputPush")
        push.subscribe("GoodTopic", "*")
        push.register_message_listener_concurrently(lambda msgs, ctx=None: calls.append(msgs))
        res, _ = timed(push.start, OP_BOUND_S, f"PushConsumer.start ({peer})")
        if isinstance(res, BaseException):
            assert_names(res, ns)
        else:
            time.sleep(3)   # its pulls and rebalances meet the bad peer
        timed(push.shutdown, OP_BOUND_S, f"PushConsumer.shutdown ({peer})")
        assert not calls, f"{peer}: the listener was called with {calls!r}"

    results: dict[str, BaseException | None] = {}

    def run(name: str, fn) -> None:
        try:
            fn()
            results[name] = None
        except BaseException as exc:   # noqa: BLE001 - re-raised below, in the test's thread
            results[name] = exc

    threads = [threading.Thread(target=run, args=(n, f), daemon=True) for n, f in (("lite", lite_pull),
                                                                                   ("push", push))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(4 * OP_BOUND_S + 60)   # each step inside has its own bound (timed)
    assert set(results) == {"lite", "push"}, f"{peer}: a consumer check is still running after its bounds"
    for exc in results.values():
        if exc is not None:
            raise exc
