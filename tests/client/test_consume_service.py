"""The consume services and the push consumer's pull loop with fake pull input (no broker): flow control
holds, the committed offset never passes an unconsumed message, orderly consumption is one thread per queue
in queue order, failures go back to the broker."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from rocketstream.client import consume_service, push_consumer
from rocketstream.client.allocate import MessageQueue
from rocketstream.client.common import PullResult, PullStatus
from rocketstream.client.config import PushConsumerConfig
from rocketstream.client.consume_service import (
    ConsumeConcurrentlyStatus,
    ConsumeMessageConcurrentlyService,
    ConsumeMessageOrderlyService,
    ConsumeOrderlyStatus,
    ConsumeThreadPool,
)
from rocketstream.client.offset_store import RemoteBrokerOffsetStore
from rocketstream.client.process_queue import ProcessQueue
from rocketstream.client.pull_decode import process_pull_result_fast
from rocketstream.client.pull_service import PullRequest
from rocketstream.client.push_consumer import PushConsumer
from rocketstream.client.rebalance import Subscription
from rocketstream.client.subscription import SubscriptionData
from rocketstream.codec import encode_record
from rocketstream.errors import BrokerResponseError
from rocketstream.remoting import ResponseCode

MQ = MessageQueue("T", "broker-a", 0)


@dataclass
class Msg:
    queue_offset: int
    topic: str = "T"
    queue_id: int = 0
    body: bytes = b"x"
    properties: dict[str, str] = field(default_factory=dict)
    reconsume_times: int = 0

    @property
    def msg_id(self) -> str:
        return f"id{self.queue_offset}"


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    t = threading.Thread(target=lp.run_forever, daemon=True)
    t.start()
    yield lp
    lp.call_soon_threadsafe(lp.stop)
    t.join(5)


class FakeRebalance:
    def __init__(self) -> None:
        self.locks = 0

    async def lock(self, mq: MessageQueue) -> bool:
        self.locks += 1
        return True

    async def lock_all(self) -> None:
        self.locks += 1


class FakeConsumer:
    def __init__(self, loop: asyncio.AbstractEventLoop, *, model: str = "CLUSTERING", batch: int = 1,
                 send_back_ok: bool = True, max_reconsume: int = 16) -> None:
        self.group = "g"
        self.config = PushConsumerConfig(namesrv="127.0.0.1:1", message_model=model,
                                         consume_message_batch_max_size=batch, suspend_current_queue_time_millis=10)
        self.loop = loop
        self.rebalance = FakeRebalance()
        self.offsets: list[tuple[MessageQueue, int]] = []
        self.sent_back: list[tuple[int, int]] = []
        self.retry_copies: list[tuple[int, int]] = []
        self.send_back_ok = send_back_ok
        self.max_reconsume = max_reconsume
        self.on_update: Any = None

    def effective_max_reconsume_times(self, orderly: bool) -> int:
        return self.max_reconsume

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        if self.on_update is not None:
            self.on_update(offset)
        self.offsets.append((mq, offset))

    def send_message_back(self, msg: Any, delay_level: int, broker_name: str | None) -> bool:
        self.sent_back.append((msg.queue_offset, delay_level))
        return self.send_back_ok

    def send_to_retry_topic(self, msg: Any, reconsume_times: int) -> bool:
        self.retry_copies.append((msg.queue_offset, reconsume_times))
        return True


def wait_until(cond: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def feed(service: Any, pq: ProcessQueue, offsets: range) -> list[Msg]:
    msgs = [Msg(o) for o in offsets]
    dispatch = pq.put_messages(msgs)
    service.submit_consume_request(msgs, pq, MQ, dispatch)
    return msgs


# --------------------------------------------------------------------------------------- the consume threads

def test_consume_thread_pool_runs_up_to_max_threads_at_once_and_survives_a_failing_task(
        caplog: pytest.LogCaptureFixture) -> None:
    pool = ConsumeThreadPool(3, "ConsumeMessageThread_")
    barrier = threading.Barrier(3, timeout=10)   # three tasks that need each other: three threads at once
    names: set[str] = set()
    done = threading.Event()

    def meet() -> None:
        names.add(threading.current_thread().name)
        barrier.wait()

    def fail() -> None:
        raise ValueError("a bug")

    for _ in range(3):
        pool.submit(meet)
    pool.submit(fail)
    pool.submit(done.set)   # after the failure the threads go on
    assert done.wait(10)
    assert names == {"ConsumeMessageThread_1", "ConsumeMessageThread_2", "ConsumeMessageThread_3"}
    wait_until(lambda: "ValueError: a bug" in caplog.text)   # logged with its traceback
    assert len(pool._threads) == 3
    pool.shutdown(wait=True)
    assert not any(t.is_alive() for t in pool._threads)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(done.set)


def test_consume_thread_pool_shutdown_drops_tasks_not_started() -> None:
    pool = ConsumeThreadPool(1, "T_")
    gate, started, ran = threading.Event(), threading.Event(), []
    pool.submit(lambda: (started.set(), gate.wait(10)))
    assert started.wait(10)
    pool.submit(lambda: ran.append(1))   # queued behind the running task
    threading.Timer(0.05, gate.set).start()
    pool.shutdown(wait=True)             # returns once the running task ended
    assert gate.is_set() and ran == []


# --------------------------------------------------------------------------------------- concurrently

def test_success_commits_past_the_batch(loop: asyncio.AbstractEventLoop) -> None:
    c = FakeConsumer(loop, batch=4)
    svc = ConsumeMessageConcurrentlyService(c, lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS, 4)
    pq = ProcessQueue()
    feed(svc, pq, range(0, 10))
    wait_until(lambda: pq.msg_count == 0)
    wait_until(lambda: max(o for _, o in c.offsets) == 10)
    assert c.sent_back == []
    svc.shutdown(1)


def test_a_pulled_batch_reaches_the_listener_in_pieces_of_batch_max_size(loop: asyncio.AbstractEventLoop) -> None:
    """One consume-thread task per pulled batch, but every listener call gets consume_message_batch_max_size
    messages (its own context, CONSUME_START_TIME set), in offset order; the offset commits past the batch."""
    c = FakeConsumer(loop, batch=3)
    calls: list[list[int]] = []

    def listener(msgs: list[Any], ctx: Any) -> Any:
        assert ctx.ack_index == 2**31 - 1 and all("CONSUME_START_TIME" in m.properties for m in msgs)
        calls.append([m.queue_offset for m in msgs])
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    svc = ConsumeMessageConcurrentlyService(c, listener, 4)
    pq = ProcessQueue()
    feed(svc, pq, range(0, 8))
    wait_until(lambda: pq.msg_count == 0 and (MQ, 8) in c.offsets)
    assert calls == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert svc.stats.consumed_ok == 8 and svc.max_concurrent_per_queue == 1
    svc.shutdown(1)


def test_decoded_messages_one_per_call_get_their_own_consume_start_time(loop: asyncio.AbstractEventLoop) -> None:
    """consumeMessageBatchMaxSize 1 (the default) on messages as the pull decoder makes them (properties still
    encoded, MIN/MAX_OFFSET pending and shared) and one whose properties were read before: every call sees its
    message's record properties, MIN/MAX_OFFSET and a CONSUME_START_TIME no earlier than the call's start;
    putting a property on one message changes no other; the offset commits past the batch."""
    c = FakeConsumer(loop)
    body = b"".join(encode_record(topic="T", queue_id=0, body=b"b%d" % i, properties={"K": str(i)}, queue_offset=i,
                                  physical_offset=0, sys_flag=0, born_timestamp=1, store_timestamp=2,
                                  born_host=("10.0.0.1", 1), store_host=("10.0.0.2", 2))
                    for i in range(6))
    msgs = process_pull_result_fast(PullResult(PullStatus.FOUND, 6, 0, 6, 0, body), "broker-a", None)
    assert msgs[2].properties["K"] == "2"   # decoded before consumption
    seen: list[tuple[int, dict[str, str], float]] = []

    def listener(batch: list[Any], ctx: Any) -> Any:
        (m,) = batch
        seen.append((m.queue_offset, dict(m.properties), time.time()))
        m.put_property("MINE", str(m.queue_offset))
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    svc = ConsumeMessageConcurrentlyService(c, listener, 2)
    pq = ProcessQueue()
    t0 = int(time.time() * 1000)
    svc.submit_consume_request(msgs, pq, MQ, pq.put_messages(msgs))
    wait_until(lambda: pq.msg_count == 0 and (MQ, 6) in c.offsets)
    svc.shutdown(1)
    assert [off for off, _, _ in seen] == list(range(6))
    for off, props, at in seen:
        stamp = int(props.pop("CONSUME_START_TIME"))
        assert t0 <= stamp <= at * 1000 + 1
        assert props == {"K": str(off), "MIN_OFFSET": "0", "MAX_OFFSET": "6"}
    assert [m.properties["MINE"] for m in msgs] == [str(i) for i in range(6)]


def test_a_queue_dropped_during_a_listener_call_ends_the_pulled_batch_uncommitted(
        loop: asyncio.AbstractEventLoop) -> None:
    """ConsumeRequest.run's dropped checks, for every piece of a pulled batch run in one task: the call that
    saw the queue dropped is not committed, the pieces after it never reach the listener, no offset is stored
    and the messages stay in the (dropped) ProcessQueue."""
    c = FakeConsumer(loop)
    calls: list[int] = []
    pq = ProcessQueue()

    def listener(msgs: list[Any], ctx: Any) -> Any:
        calls.append(msgs[0].queue_offset)
        if msgs[0].queue_offset == 2:
            pq.dropped = True   # a rebalance took the queue away meanwhile
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    svc = ConsumeMessageConcurrentlyService(c, listener, 1)
    feed(svc, pq, range(0, 6))
    wait_until(lambda: svc.stats.consumed_ok == 2)
    svc.shutdown(1)
    assert calls == [0, 1, 2] and c.offsets == [] and c.sent_back == []
    assert pq.msg_count == 6


def test_reconsume_later_exception_and_none_are_sent_back_with_the_context_delay(
        loop: asyncio.AbstractEventLoop) -> None:
    c = FakeConsumer(loop)

    def listener(msgs: list[Any], ctx: Any) -> Any:
        off = msgs[0].queue_offset
        ctx.delay_level_when_next_consume = 2
        if off == 0:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        if off == 1:
            raise RuntimeError("listener bug")   # logged, a retry, the consumer goes on
        if off == 2:
            return None
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    svc = ConsumeMessageConcurrentlyService(c, listener, 2)
    pq = ProcessQueue()
    feed(svc, pq, range(0, 5))
    wait_until(lambda: pq.msg_count == 0)
    assert sorted(c.sent_back) == [(0, 2), (1, 2), (2, 2)]
    assert svc.stats.listener_errors == 1 and svc.stats.consumed_ok == 2
    wait_until(lambda: (MQ, 5) in c.offsets)
    svc.shutdown(1)


def test_ack_index_sends_back_only_the_rest(loop: asyncio.AbstractEventLoop) -> None:
    c = FakeConsumer(loop, batch=4)

    def listener(msgs: list[Any], ctx: Any) -> Any:
        ctx.ack_index = 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    svc = ConsumeMessageConcurrentlyService(c, listener, 1)
    pq = ProcessQueue()
    feed(svc, pq, range(0, 4))
    wait_until(lambda: pq.msg_count == 0)
    assert [o for o, _ in c.sent_back] == [2, 3]
    svc.shutdown(1)


def test_failed_send_back_keeps_the_message_and_the_offset_behind_it(
        loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consume_service, "CONSUME_REQUEST_LATER_DELAY_S", 0.05)
    c = FakeConsumer(loop, send_back_ok=False)
    attempts: dict[int, int] = {}

    def listener(msgs: list[Any], ctx: Any) -> Any:
        off = msgs[0].queue_offset
        attempts[off] = attempts.get(off, 0) + 1
        if off == 3 and attempts[off] < 3:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    svc = ConsumeMessageConcurrentlyService(c, listener, 2)
    pq = ProcessQueue()
    msgs = feed(svc, pq, range(0, 8))
    wait_until(lambda: attempts.get(3) == 2 and len(attempts) == 8)
    assert all(o <= 3 for _, o in c.offsets)            # message 3 is not consumed: never committed past it
    wait_until(lambda: pq.msg_count == 0)
    assert attempts[3] == 3 and msgs[3].reconsume_times == 2   # consumed locally again, counted
    wait_until(lambda: (MQ, 8) in c.offsets)
    svc.shutdown(1)


def test_committed_offset_never_passes_an_unconsumed_message(loop: asyncio.AbstractEventLoop) -> None:
    c = FakeConsumer(loop, batch=3)
    done: set[int] = set()
    guard = threading.Lock()
    violations: list[tuple[int, list[int]]] = []
    rnd = random.Random(7)

    def listener(msgs: list[Any], ctx: Any) -> Any:
        time.sleep(rnd.random() * 0.01)
        with guard:
            done.update(m.queue_offset for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def on_update(offset: int) -> None:
        with guard:
            missing = [o for o in range(offset) if o not in done]
        if missing:
            violations.append((offset, missing[:5]))

    c.on_update = on_update
    svc = ConsumeMessageConcurrentlyService(c, listener, 8)
    pq = ProcessQueue()
    for start in range(0, 300, 32):
        feed(svc, pq, range(start, min(start + 32, 300)))
    wait_until(lambda: pq.msg_count == 0)
    assert not violations, violations[:3]
    wait_until(lambda: max(o for _, o in c.offsets) == 300)
    assert svc.stats.consumed_ok == 300 and svc.stats.consumed_failed == 0   # summed over the 8 threads' cells
    svc.shutdown(1)


# ------------------------------------------------------------------------------------------ orderly

def test_orderly_one_thread_per_queue_and_queue_order(loop: asyncio.AbstractEventLoop) -> None:
    c = FakeConsumer(loop, batch=2)
    seen: dict[MessageQueue, list[int]] = {}
    active: dict[MessageQueue, int] = {}
    overlap: list[MessageQueue] = []
    guard = threading.Lock()

    def listener(msgs: list[Any], ctx: Any) -> Any:
        mq = ctx.message_queue
        with guard:
            active[mq] = active.get(mq, 0) + 1
            if active[mq] > 1:
                overlap.append(mq)
        time.sleep(0.001)
        with guard:
            seen.setdefault(mq, []).extend(m.queue_offset for m in msgs)
            active[mq] -= 1
        return ConsumeOrderlyStatus.SUCCESS

    svc = ConsumeMessageOrderlyService(c, listener, 8, lock_interval_s=20)
    queues = [MessageQueue("T", "broker-a", q) for q in range(3)]
    pqs = {mq: ProcessQueue() for mq in queues}
    for pq in pqs.values():
        pq.mark_locked(True)
    for start in range(0, 120, 10):
        for mq in queues:
            msgs = [Msg(o, queue_id=mq.queue_id) for o in range(start, start + 10)]
            svc.submit_consume_request(msgs, pqs[mq], mq, pqs[mq].put_messages(msgs))
    wait_until(lambda: all(len(seen.get(mq, [])) == 120 for mq in queues))
    assert not overlap
    assert all(seen[mq] == list(range(120)) for mq in queues)
    assert svc.max_concurrent_per_queue == 1
    svc.shutdown(1)


def test_orderly_suspend_retries_in_order_then_sends_to_retry_topic_at_the_limit(
        loop: asyncio.AbstractEventLoop) -> None:
    c = FakeConsumer(loop, max_reconsume=2)
    calls: list[tuple[int, int]] = []

    def listener(msgs: list[Any], ctx: Any) -> Any:
        m = msgs[0]
        calls.append((m.queue_offset, m.reconsume_times))
        if m.queue_offset == 1:
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if m.queue_offset == 2 and len([x for x in calls if x[0] == 2]) == 1:
            raise ValueError("boom")   # an exception suspends too
        return ConsumeOrderlyStatus.SUCCESS

    svc = ConsumeMessageOrderlyService(c, listener, 2, lock_interval_s=20)
    pq = ProcessQueue()
    pq.mark_locked(True)
    feed(svc, pq, range(0, 4))
    wait_until(lambda: pq.msg_count == 0)
    offsets = [o for o, _ in calls]
    assert offsets == [0, 1, 1, 1, 2, 2, 3]               # 1 retried until the limit, nothing overtakes it
    assert [r for o, r in calls if o == 1] == [0, 1, 2]
    assert c.retry_copies == [(1, 2)]                      # at max_reconsume_times: to %RETRY% (then DLQ)
    wait_until(lambda: (MQ, 4) in c.offsets)
    svc.shutdown(1)


def test_orderly_does_not_consume_an_unlocked_queue(loop: asyncio.AbstractEventLoop) -> None:
    c = FakeConsumer(loop)
    calls: list[int] = []
    svc = ConsumeMessageOrderlyService(c, lambda msgs, ctx: calls.append(1) or ConsumeOrderlyStatus.SUCCESS, 2,
                                       lock_interval_s=20)
    pq = ProcessQueue()   # not locked
    feed(svc, pq, range(0, 3))
    time.sleep(0.3)
    assert calls == [] and c.rebalance.locks >= 1         # it asked the broker for the lock instead
    svc.shutdown(1)


# ------------------------------------------------------------------------ push pull loop, fake input

class FakeAPI:
    def __init__(self, available: int) -> None:
        self.available = available
        self.pulls = 0

    async def pull(self, addr: str, *, offset: int, max_nums: int, **kw: Any) -> PullResult:
        self.pulls += 1
        if offset >= self.available:
            await asyncio.sleep(0.01)
            return PullResult(PullStatus.NO_NEW_MSG, offset, 0, self.available)
        n = min(max_nums, self.available - offset)
        return PullResult(PullStatus.FOUND, offset + n, 0, self.available, body=offset.to_bytes(8, "big") + bytes([n]))


class FakeInstance:
    def __init__(self, loop: asyncio.AbstractEventLoop, api: FakeAPI) -> None:
        self.loop = loop
        self.api = api
        self.client_id = "127.0.0.1@test"
        self.running = True

    def find_broker_for_subscribe(self, name: str, bid: int = 0) -> tuple[str, bool]:
        return ("127.0.0.1:1", False)


def fake_decode(result: PullResult, broker_name: str, tags: Any, *, addr: str | None = None) -> list[Msg]:
    assert result.body is not None
    start, n = int.from_bytes(result.body[:8], "big"), result.body[8]
    return [Msg(o, body=b"y" * 100) for o in range(start, start + n)]


def _pull_loop_consumer(loop: asyncio.AbstractEventLoop, api: Any, *, orderly: bool = False,
                        **config: Any) -> PushConsumer:
    c = PushConsumer("g", namesrv="127.0.0.1:1", **config)
    c.instance = FakeInstance(loop, api)   # type: ignore[assignment]
    c.orderly = orderly
    c.offset_store = RemoteBrokerOffsetStore("g", None)   # type: ignore[arg-type]
    c.rebalance.subscription_inner["T"] = Subscription("T", SubscriptionData.parse("*"))
    c._state = "RUNNING"
    return c


def _listen(c: PushConsumer, listener: Any, threads: int) -> None:
    """``c``'s consume service for ``listener`` (orderly when ``c`` is)."""
    if c.orderly:
        c.consume_service = ConsumeMessageOrderlyService(c, listener, threads, lock_interval_s=20)  # type: ignore[arg-type]
    else:
        c.consume_service = ConsumeMessageConcurrentlyService(c, listener, threads)  # type: ignore[arg-type]


@pytest.mark.parametrize("orderly", [False, True])
def test_flow_control_holds_with_a_sleeping_listener(loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch,
                                                     orderly: bool) -> None:
    """The ProcessQueue never holds more than pull_threshold_for_queue + pull_batch_size messages."""
    monkeypatch.setattr(push_consumer, "process_pull_result", fake_decode)
    threshold, batch = 100, 32
    c = _pull_loop_consumer(loop, FakeAPI(available=100_000), orderly=orderly, pull_threshold_for_queue=threshold,
                            pull_batch_size=batch, consume_thread_min=4, consume_thread_max=4)

    def sleepy(msgs: list[Any], ctx: Any) -> Any:
        time.sleep(0.01)
        return ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    _listen(c, sleepy, 4)
    pq = ProcessQueue()
    pq.mark_locked(True)
    req = PullRequest("g", MQ, pq, 0, locked_first=True)

    async def go() -> None:
        c.pull_service.start()
        c.pull_service.execute_pull_request_immediately(req)
    asyncio.run_coroutine_threadsafe(go(), loop).result(5)
    time.sleep(1.5)
    asyncio.run_coroutine_threadsafe(c.pull_service.stop(), loop).result(5)
    assert c.consume_service is not None
    c.consume_service.shutdown(0)
    assert pq.max_count_seen > threshold                  # it did fill up ...
    assert pq.max_count_seen <= threshold + batch         # ... and never past the threshold plus one pull
    assert c.flow_control_times > 0


class FailingAPI:
    def __init__(self, code: int) -> None:
        self.code = code

    async def pull(self, addr: str, **kw: Any) -> PullResult:
        raise BrokerResponseError(self.code, "refused", addr=addr, request_code=11)


@pytest.mark.parametrize(("code", "delay", "logged"), [
    (ResponseCode.FLOW_CONTROL, push_consumer.PULL_TIME_DELAY_WHEN_BROKER_FLOW_CONTROL_S, False),
    (ResponseCode.SUBSCRIPTION_NOT_EXIST, 0.5, False),   # healed by the next heartbeat: not worth a warning
    (ResponseCode.SUBSCRIPTION_NOT_LATEST, 0.5, False),
    (ResponseCode.SYSTEM_BUSY, 0.5, True)])
def test_a_refused_pull_is_retried_after_the_delay_its_code_asks_for(
        loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture, code: int, delay: float,
        logged: bool) -> None:
    """``pullMessage``'s onException: FLOW_CONTROL re-pulls after 20 ms, any other code after
    pull_delay_on_exception_s."""
    c = _pull_loop_consumer(loop, FailingAPI(code), pull_delay_on_exception_s=0.5)
    later: list[float] = []
    c.pull_service.execute_pull_request_later = lambda pr, delay_s: later.append(delay_s)  # type: ignore[method-assign]
    req = PullRequest("g", MQ, ProcessQueue(), 0)
    with caplog.at_level("WARNING", logger="rocketstream.client"):
        asyncio.run_coroutine_threadsafe(c.pull_message(req), loop).result(5)
    assert later == [delay]
    assert any("pull of" in r.getMessage() for r in caplog.records) is logged


class RecordingAPI(FakeAPI):
    """FakeAPI that logs each pull as ("pull", offset) when it is sent; a pull past ``available`` waits
    ``hold_s`` (the broker's long polling) before NO_NEW_MSG."""

    def __init__(self, available: int, events: list[tuple[str, int]], hold_s: float = 0.01) -> None:
        super().__init__(available)
        self.events = events
        self.hold_s = hold_s

    async def pull(self, addr: str, *, offset: int, max_nums: int, **kw: Any) -> PullResult:
        self.events.append(("pull", offset))
        if offset >= self.available:
            await asyncio.sleep(self.hold_s)
            return PullResult(PullStatus.NO_NEW_MSG, offset, 0, self.available)
        return await super().pull(addr, offset=offset, max_nums=max_nums, **kw)


def _run_pull_loop(loop: asyncio.AbstractEventLoop, c: PushConsumer, req: PullRequest, until: Any,
                   before_shutdown: Any = None) -> None:
    async def go() -> None:
        c.pull_service.start()
        c.pull_service.execute_pull_request_immediately(req)
    asyncio.run_coroutine_threadsafe(go(), loop).result(5)
    try:
        wait_until(until)
        asyncio.run_coroutine_threadsafe(c.pull_service.stop(), loop).result(5)
    finally:
        if before_shutdown is not None:
            before_shutdown()
    assert c.consume_service is not None
    c.consume_service.shutdown(1)


@pytest.mark.parametrize("orderly", [False, True])
def test_concurrent_consumption_sends_the_next_pull_before_a_found_batch_is_decoded(
        loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch, orderly: bool) -> None:
    """A found batch's next pull goes out before the batch is decoded, and its answer is the next batch (each
    offset pulled once); orderly consumption pulls after the decode, as pullMessage does."""
    events: list[tuple[str, int]] = []

    def decode(result: PullResult, broker_name: str, tags: Any, *, addr: str | None = None) -> list[Msg]:
        msgs = fake_decode(result, broker_name, tags)
        events.append(("decode", msgs[0].queue_offset))
        return msgs

    monkeypatch.setattr(push_consumer, "process_pull_result", decode)
    api = RecordingAPI(available=96, events=events)
    c = _pull_loop_consumer(loop, api, orderly=orderly, pull_batch_size=32)
    consumed: list[int] = []

    def listener(msgs: list[Any], ctx: Any) -> Any:
        consumed.extend(m.queue_offset for m in msgs)
        return ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    _listen(c, listener, 2)
    pq = ProcessQueue()
    pq.mark_locked(True)
    _run_pull_loop(loop, c, PullRequest("g", MQ, pq, 0, locked_first=True), lambda: len(consumed) == 96)
    pulls = [off for kind, off in events if kind == "pull"]
    assert pulls[:4] == [0, 32, 64, 96]                # each offset once: an answer pulled ahead is used
    first_batch = events[:events.index(("decode", 0)) + 1]
    if orderly:
        assert first_batch == [("pull", 0), ("decode", 0)]
    else:
        assert first_batch == [("pull", 0), ("pull", 32), ("decode", 0)]
    assert sorted(consumed) == list(range(96))


def test_a_pull_sent_ahead_is_cancelled_when_the_exact_flow_control_holds_the_queue(
        loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose decoded bodies are larger than its pull body (compressed records) can take the queue
    past pull_threshold_size_for_queue though its upper bound did not: the pull sent ahead is cancelled at
    the exact check after the put, its answer unused, and the queue waits as pullMessage makes it wait."""
    def big(result: PullResult, broker_name: str, tags: Any, *, addr: str | None = None) -> list[Msg]:
        return [Msg(m.queue_offset, body=bytes(48 * 1024)) for m in fake_decode(result, broker_name, tags)]

    monkeypatch.setattr(push_consumer, "process_pull_result", big)
    events: list[tuple[str, int]] = []
    api = RecordingAPI(available=10_000, events=events)
    c = _pull_loop_consumer(loop, api, pull_batch_size=32, pull_threshold_size_for_queue=1)
    dropped: list[tuple[int, asyncio.Task[Any]]] = []
    real_drop = push_consumer._drop_ahead

    def drop(ahead: Any) -> None:
        if ahead is not None:
            dropped.append((ahead.offset, ahead.task))
        real_drop(ahead)

    monkeypatch.setattr(push_consumer, "_drop_ahead", drop)
    release = threading.Event()

    def blocked(msgs: list[Any], ctx: Any) -> Any:
        release.wait(10)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c.consume_service = ConsumeMessageConcurrentlyService(c, blocked, 2)  # type: ignore[arg-type]
    pq = ProcessQueue()
    _run_pull_loop(loop, c, PullRequest("g", MQ, pq, 0), lambda: c.flow_control_times > 0, release.set)
    # 1.5 MiB after the first batch (1 MiB counted: not over 1), 3 MiB after the second: over, so the pull of
    # 64, sent ahead while the second batch's pull body counted only bytes, is cancelled; then 50 ms waits
    assert pq.msg_size == 2 * 32 * 48 * 1024 and pq.msg_count == 64
    assert [off for off, _ in dropped] == [64] and dropped[0][1].done()   # cancelled, or answered and unused
    assert [off for kind, off in events if kind == "pull"] == [0, 32, 64]


def test_stopping_the_pull_service_cancels_a_pull_sent_ahead(loop: asyncio.AbstractEventLoop,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The pull sent ahead after the last batch waits at the broker (long polling); stop() cancels it."""
    monkeypatch.setattr(push_consumer, "process_pull_result", fake_decode)
    events: list[tuple[str, int]] = []
    api = RecordingAPI(available=32, events=events, hold_s=30)
    c = _pull_loop_consumer(loop, api, pull_batch_size=32)
    c.consume_service = ConsumeMessageConcurrentlyService(  # type: ignore[arg-type]
        c, lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS, 2)
    pq = ProcessQueue()
    _run_pull_loop(loop, c, PullRequest("g", MQ, pq, 0), lambda: ("pull", 32) in events and pq.msg_count == 0)
    assert not c.pull_service._tracked                 # cancelled and gone
    assert c.offset_store is not None and c.offset_store.offset_table[MQ] == 32
