"""PushConsumer scenarios against both brokers (``mq_broker``: ours and the real 4.9.8, both with
messageDelayLevel "1s 2s 3s 1s ..."): retry and DLQ, orderly consumption with two members and a handoff,
broadcasting, and consume-from-where rules."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from rocketstream.client.allocate import MessageQueue
from rocketstream.client.consume_service import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus
from rocketstream.client.lite_pull import LitePullConsumer
from rocketstream.client.offset_store import LocalOffsetStore
from rocketstream.client.producer import Producer
from rocketstream.client.push_consumer import PushConsumer
from rocketstream.errors import MQClientError, OptionError
from tests.client.scenario_util import produce, unique, wait_for

FAST = dict(rebalance_interval_s=1.0, lock_interval_s=1.0, unlock_delay_s=0.2, pull_delay_on_exception_s=0.5,
            await_termination_s=5.0)


def test_concurrent_reconsume_later_goes_to_retry_then_dlq(mq_broker) -> None:
    ns = mq_broker.namesrv_addr
    topic, group = unique("PushRetry"), unique("push_retry")
    produce(ns, topic, [b"ok-0", b"bad-1", b"ok-2", b"raise-3", b"ok-4"])
    deliveries: dict[bytes, list[int]] = defaultdict(list)
    topics_seen: set[str] = set()
    lock = threading.Lock()

    def listener(msgs: list[Any], ctx: Any) -> Any:
        m = msgs[0]
        with lock:
            deliveries[m.body].append(m.reconsume_times)
            topics_seen.add(m.topic)
        ctx.delay_level_when_next_consume = 1      # 1 s
        if m.body.startswith(b"bad"):
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        if m.body.startswith(b"raise") and m.reconsume_times == 0:
            raise RuntimeError("listener failure: retried, the consumer keeps going")
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", max_reconsume_times=2, **FAST)
    c.subscribe(topic, "*")
    c.register_message_listener_concurrently(listener)
    c.start()
    try:
        wait_for(lambda: len(deliveries[b"bad-1"]) >= 3 and len(deliveries[b"raise-3"]) >= 2, 40, "retries")
        time.sleep(2.5)   # no fourth delivery: the third failure went to the DLQ
        assert deliveries[b"bad-1"] == [0, 1, 2]
        assert deliveries[b"raise-3"] == [0, 1]
        assert all(deliveries[b] == [0] for b in (b"ok-0", b"ok-2", b"ok-4"))
        assert topics_seen == {topic}              # retried messages show their original topic
    finally:
        c.shutdown()
    dlq = MessageQueue(f"%DLQ%{group}", "broker-a", 0)
    reader = LitePullConsumer(unique("dlq_reader"), namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    reader.assign([dlq])
    reader.start()
    try:
        got: list[Any] = []
        end = time.monotonic() + 20
        while not got and time.monotonic() < end:
            got += reader.poll(0.5)
        assert [m.body for m in got] == [b"bad-1"]
        assert got[0].properties.get("RETRY_TOPIC") == topic
    finally:
        reader.shutdown()


def test_orderly_two_members_never_share_a_queue_and_keep_queue_order(mq_broker) -> None:
    ns = mq_broker.namesrv_addr
    topic, group = unique("PushOrder"), unique("push_order")
    keys = [f"k{i}" for i in range(8)]
    n_first = 160
    produce(ns, topic, [f"{keys[i % 8]}:{i // 8}".encode() for i in range(n_first)], sharding=lambda i: keys[i % 8])
    calls: list[tuple[str, int, int, float, float, str, int]] = []   # who, queue, offset, start, end, key, seq
    lock = threading.Lock()

    def listener_for(who: str) -> Any:
        def listener(msgs: list[Any], ctx: Any) -> Any:
            start = time.monotonic()
            time.sleep(0.005)
            end = time.monotonic()
            with lock:
                for m in msgs:
                    key, seq = m.body.decode().split(":")
                    calls.append((who, m.queue_id, m.queue_offset, start, end, key, int(seq)))
            return ConsumeOrderlyStatus.SUCCESS
        return listener

    def member(name: str) -> PushConsumer:
        c = PushConsumer(group, namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", instance_name=name,
                         **FAST)
        c.subscribe(topic, "*")
        c.register_message_listener_orderly(listener_for(name))
        return c.start()

    a = member(unique("A"))
    b: PushConsumer | None = None
    try:
        wait_for(lambda: len(calls) >= 20, 30, "A consuming")
        b = member(unique("B"))
        wait_for(lambda: len({(k, s) for _, _, _, _, _, k, s in calls}) >= n_first, 60, "every message consumed")
        wait_for(lambda: len({w for w, *_ in calls}) == 2, 20, "both members consuming")
        b.shutdown()
        b = None
        later = [f"{keys[i % 8]}:{1000 + i // 8}".encode() for i in range(40)]
        produce(ns, topic, later, sharding=lambda i: keys[i % 8])
        wait_for(lambda: len({(k, s) for _, _, _, _, _, k, s in calls if s >= 1000}) >= 40, 60,
                 "A takes over every queue after B left")
    finally:
        if b is not None:
            b.shutdown()
        a.shutdown()
    with lock:
        snapshot = list(calls)
    # no queue consumed by both members at the same time
    by_queue: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for who, q, _, start, end, *_ in snapshot:
        by_queue[q].append((start, end, who))
    for q, spans in by_queue.items():
        spans.sort()
        for (_, e1, w1), (s2, _, w2) in zip(spans, spans[1:], strict=False):
            assert not (w1 != w2 and s2 < e1), f"queue {q}: {w1} and {w2} consumed at the same time"
    # per member and queue: offsets strictly increasing (queue order), and per key the sequence in order
    per: dict[tuple[str, int], list[int]] = defaultdict(list)
    for who, q, off, *_ in snapshot:
        per[(who, q)].append(off)
    for k, offs in per.items():
        assert offs == sorted(offs) and len(set(offs)) == len(offs), (k, offs[:20])
    seqs: dict[tuple[str, str], list[int]] = defaultdict(list)
    for who, _, _, _, _, key, seq in snapshot:
        seqs[(who, key)].append(seq)
    for k, s in seqs.items():
        assert s == sorted(s), (k, s[:20])


def test_broadcasting_every_member_gets_everything_and_offsets_are_local(mq_broker, tmp_path: Path) -> None:
    ns = mq_broker.namesrv_addr
    topic, group = unique("PushBcast"), unique("push_bcast")
    bodies = [f"b{i}".encode() for i in range(20)]
    produce(ns, topic, bodies)
    got: dict[str, list[bytes]] = defaultdict(list)
    lock = threading.Lock()
    members = []
    for name in (unique("X"), unique("Y")):
        def listener(msgs: list[Any], ctx: Any, name: str = name) -> Any:
            with lock:
                got[name] += [m.body for m in msgs]
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        c = PushConsumer(group, namesrv=ns, message_model="BROADCASTING",
                         consume_from_where="CONSUME_FROM_FIRST_OFFSET", instance_name=name,
                         offset_store_dir=tmp_path, **FAST)
        c.subscribe(topic, "*")
        c.register_message_listener_concurrently(listener)
        members.append(c.start())
    try:
        wait_for(lambda: all(len(got[c.config.instance_name]) >= 20 for c in members), 30, "both members get all")
        for c in members:
            assert sorted(got[c.config.instance_name]) == sorted(bodies)
    finally:
        for c in members:
            c.shutdown()
    files = sorted(tmp_path.glob(f"*/{group}/offsets.json"))
    assert len(files) == 2
    for f in files:
        table = LocalOffsetStore(tmp_path, f.parent.parent.name, group).read()
        assert sum(off for mq, off in table.items() if mq.topic == topic) == 20


def test_new_group_consume_from_last_on_young_queues_starts_at_zero_and_reads_new_messages(mq_broker) -> None:
    """4.9.8 answers QUERY_CONSUMER_OFFSET with 0 for a young queue, so even CONSUME_FROM_LAST_OFFSET starts at
    0 (spec §5.8); the group then receives what is produced while it runs."""
    ns = mq_broker.namesrv_addr
    topic, group = unique("PushLast"), unique("push_last")
    produce(ns, topic, [b"early"])
    got: list[bytes] = []
    c = PushConsumer(group, namesrv=ns, **FAST)
    c.subscribe(topic, "*")
    c.register_message_listener_concurrently(lambda msgs, ctx: got.extend(m.body for m in msgs)
                                             or ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    c.start()
    try:
        produce(ns, topic, [b"late"])
        wait_for(lambda: sorted(got) == [b"early", b"late"], 30, "both messages")
    finally:
        c.shutdown()


def test_push_consumer_bad_input() -> None:
    with pytest.raises(OptionError, match="pull_threshold_for_queue"):
        PushConsumer("g", namesrv="127.0.0.1:1", pull_threshold_for_queue=0)
    with pytest.raises(OptionError, match="consume_from_where"):
        PushConsumer("g", namesrv="127.0.0.1:1", consume_from_where="CONSUME_FROM_NOWHERE")
    with pytest.raises(OptionError, match="allocate_strategy"):
        PushConsumer("g", namesrv="127.0.0.1:1", allocate_strategy="RANDOM")
    c = PushConsumer("g", namesrv="127.0.0.1:1")
    c.subscribe("T", "*")
    with pytest.raises(MQClientError, match="listener"):
        c.start()
    with pytest.raises(OptionError, match="listener"):
        c.register_message_listener_concurrently("not callable")  # type: ignore[arg-type]


def test_orderly_message_over_max_reconsume_times_goes_to_the_dlq(mq_broker) -> None:
    """Orderly: SUSPEND_CURRENT_QUEUE_A_MOMENT retries locally; at max_reconsume_times the message is sent to
    %RETRY% with that many reconsume times, which the broker stores in %DLQ%; the queue then moves on."""
    ns = mq_broker.namesrv_addr
    topic, group = unique("PushOrderDlq"), unique("push_odlq")
    produce(ns, topic, [b"poison", b"after"], sharding=lambda i: "same-key")
    calls: list[tuple[bytes, int]] = []

    def listener(msgs: list[Any], ctx: Any) -> Any:
        m = msgs[0]
        calls.append((m.body, m.reconsume_times))
        if m.body == b"poison":
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    c = PushConsumer(group, namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", max_reconsume_times=2,
                     suspend_current_queue_time_millis=100, **FAST)
    c.subscribe(topic, "*")
    c.register_message_listener_orderly(listener)
    c.start()
    try:
        wait_for(lambda: (b"after", 0) in calls, 30, "the queue to move past the poison message")
        assert calls[:4] == [(b"poison", 0), (b"poison", 1), (b"poison", 2), (b"after", 0)]
    finally:
        c.shutdown()
    reader = LitePullConsumer(unique("dlq_reader"), namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    reader.assign([MessageQueue(f"%DLQ%{group}", "broker-a", 0)])
    end = time.monotonic() + 20
    got: list[Any] = []
    while time.monotonic() < end:   # the DLQ topic appears once the broker stored the message there
        try:
            reader.start()
            break
        except MQClientError:
            time.sleep(0.5)
            reader = LitePullConsumer(unique("dlq_reader"), namesrv=ns,
                                      consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            reader.assign([MessageQueue(f"%DLQ%{group}", "broker-a", 0)])
    try:
        while not got and time.monotonic() < end:
            got += reader.poll(0.5)
        assert [m.body for m in got] == [b"poison"]
    finally:
        reader.shutdown()


def test_flow_control_holds_against_the_broker(mq_broker) -> None:
    """A slow listener: no ProcessQueue ever holds more than pull_threshold_for_queue + pull_batch_size."""
    ns = mq_broker.namesrv_addr
    topic, group = unique("PushFlow"), unique("push_flow")
    with Producer(unique("pg"), namesrv=ns) as p:
        for i in range(0, 600, 50):
            p.send_batch(topic, [f"f{j}".encode() for j in range(i, i + 50)])
    consumed: list[int] = []

    def slow(msgs: list[Any], ctx: Any) -> Any:
        time.sleep(0.002)
        consumed.append(len(msgs))
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", pull_threshold_for_queue=40,
                     pull_batch_size=16, consume_thread_min=1, consume_thread_max=1, **FAST)
    c.subscribe(topic, "*")
    c.register_message_listener_concurrently(slow)
    c.start()
    try:
        wait_for(lambda: sum(consumed) >= 600, 60, "all 600 messages")
        pqs = [pq for mq, pq in c.rebalance.process_queue_table.items() if mq.topic == topic]
        assert pqs and max(pq.max_count_seen for pq in pqs) <= 40 + 16
        assert max(pq.max_count_seen for pq in pqs) > 40      # it was reached
        assert c.flow_control_times > 0
    finally:
        c.shutdown()


def test_shutdown_after_the_broker_died_finishes_without_raising(tmp_path: Path) -> None:
    """Our broker (its own instance) killed under a running push and lite-pull consumer: shutdown logs the
    failed network steps and returns within its timeouts."""
    from tests.broker import java_fixtures

    target = java_fixtures.start_ours(tmp_path / "broker")
    try:
        ns = target.namesrv_addr
        topic = unique("Dying")
        produce(ns, topic, [b"a", b"b"])
        got: list[bytes] = []
        push = PushConsumer(unique("dying_push"), namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                            instance_name=unique("P"), **FAST)
        push.subscribe(topic, "*")
        push.register_message_listener_concurrently(lambda msgs, ctx: got.extend(m.body for m in msgs)
                                                    or ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
        push.start()
        lite = LitePullConsumer(unique("dying_lite"), namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                                instance_name=unique("L"))
        lite.subscribe(topic, "*")
        lite.start()
        wait_for(lambda: len(got) == 2, 20, "push consumption")
        assert lite.poll(5)
    finally:
        java_fixtures.stop(target, clean=False)
    t0 = time.monotonic()
    push.shutdown()
    lite.shutdown()
    assert time.monotonic() - t0 < 60
