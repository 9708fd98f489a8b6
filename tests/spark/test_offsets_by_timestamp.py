"""``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` (issue 22): a store timestamp per queue in the JSON
shape of startingOffsets (``{"topic": {"brokerName": {"queueId": epoch ms}}}``); each named queue starts (ends,
exclusive) at its first message stored at or after the time, queues left out start at earliest (end at latest);
``startingOffsetsByTimestampStrategy`` says what a start does where no message is at or after its time: ``latest``
(the default: what ``startingTimestamp`` always did) or ``error`` (an OptionError naming the option and queue).
Local mode through the store's own search; network mode through SEARCH_OFFSET_BY_TIMESTAMP on our broker and the
real 4.9.8 one.
"""

from __future__ import annotations

import json
import time

import pytest

from rocketstream.errors import OptionError
from rocketstream.spark.batch import RocketMQBatchReader
from rocketstream.spark.options import parse_options
from rocketstream.spark.schema import projection_for
from spark_stores import TOPIC
from tests.client.scenario_util import produce, unique

BROKER = "broker-a"


def timed_store(root, n: int = 12, queues: int = 3) -> dict[tuple[int, int], int]:
    """``n`` messages round robin over ``queues`` queues of a topic that has one more, empty queue; every
    message stored in a later millisecond than the one before. Their store timestamps by (queue, offset)."""
    from rocketstream.store import Message, MessageStore

    stamps: dict[tuple[int, int], int] = {}
    with MessageStore.open(root, create=True) as store:
        store.create_topic(TOPIC, queues + 1)
        last = 0
        for i in range(n):
            while int(time.time() * 1000) <= last:   # the next millisecond (well under one)
                pass
            result = store.put_message(Message(topic=TOPIC, body=b"m%d" % i), queue_id=i % queues)
            stamps[(i % queues, result.queue_offset)] = last = result.store_timestamp
    return stamps


def plan(root, streaming: bool = False, **options: str) -> dict[int, tuple[int, int]]:
    """queueId -> (start, end) of the batch the options plan (queues with nothing to read left out)."""
    parsed = parse_options({"path": str(root), "topic": TOPIC, **options}, streaming=streaming)
    tasks = RocketMQBatchReader(parsed, projection_for(None)).partitions()
    return {q: (s, e) for task in tasks for _b, _t, q, s, e in task.ranges}


def per_queue(times: dict[int, int]) -> str:
    return json.dumps({TOPIC: {BROKER: {str(q): t for q, t in times.items()}}})


def test_local_start_and_end_per_queue(tmp_path):
    root = tmp_path / BROKER
    ts = timed_store(root)
    # queue 0 at its offset 2 exactly; queue 1 between its offsets 0 and 1; queue 2 left out: earliest
    start = per_queue({0: ts[(0, 2)], 1: ts[(1, 0)] + 1})
    assert plan(root, startingOffsetsByTimestamp=start) == {0: (2, 4), 1: (1, 4), 2: (0, 4)}
    end = per_queue({2: ts[(2, 3)], 0: ts[(0, 1)]})   # exclusive: the message at the time is not read
    assert plan(root, endingOffsetsByTimestamp=end) == {0: (0, 1), 1: (0, 4), 2: (0, 3)}
    both = plan(root, startingOffsetsByTimestamp=start, endingOffsetsByTimestamp=per_queue({1: ts[(1, 2)]}))
    assert both == {0: (2, 4), 1: (1, 2), 2: (0, 4)}
    # startingTimestamp goes before startingOffsetsByTimestamp (Spark's Kafka source's order)
    assert plan(root, startingTimestamp=str(ts[(1, 3)]), startingOffsetsByTimestamp=start) == {1: (3, 4), 2: (3, 4)}


def test_local_no_message_after_the_time_latest_or_error(tmp_path):
    root = tmp_path / BROKER
    ts = timed_store(root)
    after = max(ts.values()) + 1000
    start = per_queue({0: after, 1: ts[(1, 0)]})
    assert plan(root, startingOffsetsByTimestamp=start) == {1: (0, 4), 2: (0, 4)}   # queue 0 at latest (4)
    assert plan(root, startingOffsetsByTimestamp=start, startingOffsetsByTimestampStrategy="LATEST") == \
        {1: (0, 4), 2: (0, 4)}
    with pytest.raises(OptionError, match=rf"topic '{TOPIC}' on broker '{BROKER}' queue 0 .* at or after {after}") \
            as err:
        plan(root, startingOffsetsByTimestamp=start, startingOffsetsByTimestampStrategy="error")
    assert err.value.option == "startingOffsetsByTimestamp"
    with pytest.raises(OptionError, match="queue 0") as err:   # startingTimestamp follows the strategy too
        plan(root, startingTimestamp=str(after), startingOffsetsByTimestampStrategy="error")
    assert err.value.option == "startingTimestamp"
    # the empty queue 3 has nothing to miss: a time before every message passes with strategy error
    assert plan(root, startingTimestamp=str(min(ts.values())), startingOffsetsByTimestampStrategy="error") == \
        {0: (0, 4), 1: (0, 4), 2: (0, 4)}


def test_option_errors(tmp_path):
    root = tmp_path / BROKER
    timed_store(root, n=3)
    cases = [
        ({"startingOffsetsByTimestamp": "{"}, "startingOffsetsByTimestamp", "not valid JSON"),
        ({"startingOffsetsByTimestamp": '{"T": {"b": {"0": -1}}}'}, "startingOffsetsByTimestamp", "offset >= 0"),
        ({"startingOffsetsByTimestamp": "{}"}, "startingOffsetsByTimestamp", "names no queue"),
        ({"endingOffsetsByTimestamp": '{"T": [1]}'}, "endingOffsetsByTimestamp", "brokers"),
        ({"startingOffsetsByTimestampStrategy": "error"}, "startingOffsetsByTimestampStrategy", "only applies"),
        ({"startingTimestamp": "1", "startingOffsetsByTimestampStrategy": "skip"},
         "startingOffsetsByTimestampStrategy", "latest or error"),
    ]
    for options, option, message in cases:
        with pytest.raises(OptionError, match=message) as err:
            plan(root, **options)
        assert err.value.option == option, options
    with pytest.raises(OptionError, match="batch queries only") as err:
        plan(root, streaming=True, endingOffsetsByTimestamp=per_queue({0: 1}))
    assert err.value.option == "endingOffsetsByTimestamp"
    with pytest.raises(OptionError, match=f"{TOPIC}/{BROKER}/7|queues that do not exist") as err:
        plan(root, startingOffsetsByTimestamp=per_queue({7: 1}))
    assert err.value.option == "startingOffsetsByTimestamp"


def test_network_start_and_end_per_queue(spark, mq_broker):
    ns, broker = mq_broker.namesrv_addr, mq_broker.broker_name
    topic = unique("ByTs")
    produce(ns, topic, [b"a%d" % i for i in range(16)])

    df = spark.read.format("rocketmq").option("nameServer", ns).option("topic", topic).load()
    every = sorted((r.queueId, r.queueOffset, int(r.storeTimestamp.timestamp() * 1000))
                   for r in df.select("queueId", "queueOffset", "storeTimestamp").collect())
    assert len(every) == 16
    by_queue: dict[int, list[tuple[int, int]]] = {}
    for q, o, t in every:
        by_queue.setdefault(q, []).append((o, t))
    queues = sorted(by_queue)
    named = queues[:-1]   # the last queue is left out: read from earliest / to latest
    # each named queue's time: that of its last message (the first message at or after it is read or ends)
    times = {q: by_queue[q][-1][1] for q in named}
    first_at = {q: next(o for o, t in by_queue[q] if t >= times[q]) for q in named}
    doc = json.dumps({topic: {broker: {str(q): t for q, t in times.items()}}})

    def ranges(**options: str) -> dict[int, tuple[int, int]]:
        parsed = parse_options({"nameServer": ns, "topic": topic, **options}, streaming=False)
        tasks = RocketMQBatchReader(parsed, projection_for(None)).partitions()
        return {q: (s, e) for task in tasks for _b, _t, q, s, e in task.ranges}

    ends = {q: by_queue[q][-1][0] + 1 for q in queues}
    assert ranges(startingOffsetsByTimestamp=doc) == {q: (first_at.get(q, 0), ends[q]) for q in queues}
    assert ranges(endingOffsetsByTimestamp=doc) == {q: (0, first_at.get(q, ends[q])) for q in queues
                                                    if first_at.get(q, ends[q]) > 0}
    late = json.dumps({topic: {broker: {str(named[0]): max(t for *_, t in every) + 60_000}}})
    assert named[0] not in ranges(startingOffsetsByTimestamp=late)   # latest: nothing of it to read
    with pytest.raises(OptionError, match=f"queue {named[0]} is stored at or after") as err:
        ranges(startingOffsetsByTimestamp=late, startingOffsetsByTimestampStrategy="error")
    assert err.value.option == "startingOffsetsByTimestamp"
