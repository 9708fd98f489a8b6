"""LitePullConsumer scenarios against both brokers (``mq_broker``: ours and the real 4.9.8)."""

from __future__ import annotations

import time

import pytest

from rocketstream.client.admin import consumer_progress
from rocketstream.client.allocate import MessageQueue
from rocketstream.client.instance import MQClientInstance
from rocketstream.client.lite_pull import LitePullConsumer
from rocketstream.errors import MQClientError, OptionError
from tests.client.scenario_util import produce, unique


def poll_until(consumer: LitePullConsumer, n: int, timeout: float = 30.0) -> list:
    got: list = []
    end = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < end:
        got += consumer.poll(0.5)
    return got


def progress(namesrv: str, group: str) -> dict[MessageQueue, tuple[int, int]]:
    inst = MQClientInstance.get(namesrv, unique("progress"))
    inst.start()
    try:
        rows = inst.run(consumer_progress(inst, group), 20.0)
    finally:
        inst.shutdown(force=True)
    return {r.queue: (r.broker_offset, r.consumer_offset) for r in rows}


def test_subscribe_poll_commit_is_visible_in_the_brokers_offsets(mq_broker) -> None:
    ns = mq_broker.namesrv_addr
    topic, group = unique("LiteT"), unique("lite_g")
    bodies = [f"m{i}".encode() for i in range(40)]
    produce(ns, topic, bodies)
    c = LitePullConsumer(group, namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(topic, "*")
    c.start()
    try:
        got = poll_until(c, 40)
        assert sorted(m.body for m in got) == sorted(bodies)
        assert all(m.topic == topic and m.broker_name for m in got)
        c.commit()
        table = progress(ns, group)
        mine = {mq: v for mq, v in table.items() if mq.topic == topic}
        assert sum(b for b, _ in mine.values()) == 40
        assert all(broker == consumer for broker, consumer in mine.values()), mine
        for mq, (broker_off, _) in mine.items():
            assert c.committed(mq) == broker_off
    finally:
        c.shutdown()
    # a new member of the group continues after the commit: only new messages arrive
    produce(ns, topic, [b"after-1", b"after-2"])
    c2 = LitePullConsumer(group, namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c2.subscribe(topic, "*")
    c2.start()
    try:
        got = drain(c2, 2, timeout=20)
        assert sorted(m.body for m in got) == [b"after-1", b"after-2"]
    finally:
        c2.shutdown()


def test_tag_filter_is_exact_on_the_client(mq_broker) -> None:
    ns = mq_broker.namesrv_addr
    topic = unique("LiteTag")
    produce(ns, topic, [f"m{i}".encode() for i in range(30)], tags=["TagA", "TagB", None])
    c = LitePullConsumer(unique("lite_tag"), namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(topic, "TagA || TagC")
    c.start()
    try:
        got = drain(c, 10)
        assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(0, 30, 3))
        assert {m.tags for m in got} == {"TagA"}
    finally:
        c.shutdown()


def test_assign_seek_pause_resume(mq_broker) -> None:
    ns = mq_broker.namesrv_addr
    topic = unique("LiteAssign")
    results = produce(ns, topic, [f"m{i}".encode() for i in range(24)])
    q = results[0].queue
    in_q = sorted(r.queue_offset for r in results if r.queue == q)
    c = LitePullConsumer(unique("lite_assign"), namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    c.assign([q])
    c.start()
    try:
        got = poll_until(c, len(in_q))
        assert {m.queue_id for m in got} == {q.queue_id}
        assert [m.queue_offset for m in got] == in_q
        c.seek(q, 1)
        again = poll_until(c, len(in_q) - 1)
        assert [m.queue_offset for m in again] == in_q[1:]
        c.seek_to_begin(q)
        assert poll_until(c, 1)[0].queue_offset == 0
        poll_until(c, len(in_q) - 1, timeout=5)
        with pytest.raises(OptionError, match="offset"):
            c.seek(q, 10_000)
        c.pause([q])
        produce(ns, topic, [b"while-paused"], sharding=None)
        c.seek_to_end(q)
        time.sleep(1.5)
        c.resume([q])
        c.seek_to_begin(q)
        assert poll_until(c, 1)[0].queue_offset == 0
    finally:
        c.shutdown()


def drain(consumer: LitePullConsumer, n: int, timeout: float = 30.0) -> list:
    """At least ``n`` messages, then whatever else arrives within half a second."""
    got = poll_until(consumer, n, timeout)
    while True:
        more = consumer.poll(0.5)
        if not more:
            return got
        got += more


def test_consume_from_timestamp_and_offset_for_timestamp(mq_broker) -> None:
    """A new group with CONSUME_FROM_TIMESTAMP starts where the broker says: on a young queue (min offset 0,
    offset 0 in memory) QUERY_CONSUMER_OFFSET answers 0 on 4.9.8 and on ours, so the group starts at 0
    (RebalancePushImpl only searches by time when the broker answers 22). ``offset_for_timestamp`` +
    ``seek`` reads from the timestamp."""
    ns = mq_broker.namesrv_addr
    topic = unique("LiteTs")
    old = produce(ns, topic, [f"old{i}".encode() for i in range(8)])
    time.sleep(1.5)
    ts = int(time.time() * 1000)
    time.sleep(0.2)
    new = produce(ns, topic, [f"new{i}".encode() for i in range(8)])
    c = LitePullConsumer(unique("lite_ts"), namesrv=ns, consume_from_where="CONSUME_FROM_TIMESTAMP",
                         consume_timestamp=ts)
    c.subscribe(topic, "*")
    c.start()
    try:
        got = drain(c, 16)
        assert len(got) == 16                              # young queues: from 0, old ones included
        for q in sorted({r.queue for r in new}):
            first_new = min(r.queue_offset for r in new if r.queue == q)
            assert c.offset_for_timestamp(q, ts) == first_new
            c.seek(q, c.offset_for_timestamp(q, ts))
        again = drain(c, 8)
        assert sorted(m.body for m in again) == sorted(f"new{i}".encode() for i in range(8))
        assert len(old) == 8
    finally:
        c.shutdown()


def test_bad_options_are_typed_errors() -> None:
    with pytest.raises(OptionError, match="group"):
        LitePullConsumer("bad group!", namesrv="127.0.0.1:1")
    with pytest.raises(OptionError, match="message_model"):
        LitePullConsumer("g", namesrv="127.0.0.1:1", message_model="FANOUT")
    c = LitePullConsumer("g", namesrv="127.0.0.1:1")
    with pytest.raises(OptionError, match="expression"):
        c.subscribe("T", "||")
    c.subscribe("T", "*")
    with pytest.raises(MQClientError, match="mixed"):
        c.assign([MessageQueue("T", "b", 0)])
    with pytest.raises(MQClientError, match="not running"):
        c.poll(0.1)


def test_unreachable_name_server_fails_start_within_its_timeout() -> None:
    c = LitePullConsumer(unique("g"), namesrv="127.0.0.1:1")
    c.subscribe("T", "*")
    t0 = time.monotonic()
    with pytest.raises(MQClientError, match="127.0.0.1:1"):
        c.start()
    assert time.monotonic() - t0 < 30


def test_pull_ahead_counts_the_answer_in_hand_against_the_thresholds() -> None:
    """The next pull is sent before an answer is decoded only when the thresholds, counting that answer's
    messages, still allow it (the check PullTaskImpl.run makes before each pull)."""
    from rocketstream.client.common import MessageExt
    from rocketstream.client.process_queue import ProcessQueue
    from rocketstream.codec import HostAddress

    c = LitePullConsumer(unique("ahead"), namesrv="127.0.0.1:1", pull_threshold_for_queue=100,
                         pull_threshold_size_for_queue=1, consume_max_span=500, pull_threshold_for_all=1000)
    pq = ProcessQueue()
    host = HostAddress("127.0.0.1", 1)
    pq.put_messages([MessageExt("T", b"x" * 1000, {}, 0, 0, off, 0, 0, 0, host, 0, host, 0, 0, 0, 0)
                     for off in range(10, 90)])
    assert not c._held_back(pq)                                  # 80 cached: pull
    assert not c._held_back(pq, 20, 20 * 1100, 109)              # 100 with the answer: pull
    assert c._held_back(pq, 21, 21 * 1100, 110)                  # 101: pullThresholdForQueue
    assert not c._held_back(pq, 5, (1 << 20) - 1000, 94)         # 1 MiB (whole MiB, as Java compares)
    assert c._held_back(pq, 5, 2 << 20, 94)                      # 2 MiB > 1: pullThresholdSizeForQueue
    assert c._held_back(pq, 5, 5000, 511)                        # span 511 - 10 > 500: consumeMaxSpan
    c._cached_messages = 996
    assert c._held_back(pq, 5, 5000, 94)                         # 1001 cached: pullThresholdForAll
    assert not c._held_back(pq, 4, 5000, 93)
