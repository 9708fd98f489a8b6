"""Pure offset planning, table-driven; each test name says the behaviour it guards."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstream.client.allocate import MessageQueue
from rocketstream.errors import AllocationError, OptionError, RocketStreamError
from rocketstream.spark.offset_ranges import (
    OffsetRange,
    QueueKey,
    offsets_from_dict,
    offsets_from_json,
    offsets_to_dict,
    offsets_to_json,
    plan_partitions,
    ranges_between,
    rate_limit,
    split_ranges,
    task_ids,
)


def q(i: int, topic: str = "t", broker: str = "broker-a") -> QueueKey:
    return QueueKey(topic, broker, i)


def r(i: int, start: int, end: int) -> OffsetRange:
    return OffsetRange(q(i), start, end)


def spans(ranges: list[OffsetRange]) -> list[tuple[int, int, int]]:
    return [(x.queue.queue_id, x.start, x.end) for x in ranges]


def test_queue_key_is_a_message_queue_so_allocation_needs_no_conversion():
    assert QueueKey is MessageQueue and q(1) == MessageQueue("t", "broker-a", 1)


# --- split_ranges -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    "name,ranges,limit,expected",
    [
        ("no limit keeps ranges", [r(0, 0, 100)], None, [(0, 0, 100)]),
        ("range at the limit is not split", [r(0, 0, 10)], 10, [(0, 0, 10)]),
        ("one over the limit gives two near-equal chunks", [r(0, 0, 11)], 10, [(0, 0, 5), (0, 5, 11)]),
        ("chunks are consecutive and near-equal, no tiny tail", [r(0, 100, 125)], 10,
         [(0, 100, 108), (0, 108, 116), (0, 116, 125)]),
        ("limit one splits every message", [r(0, 3, 6)], 1, [(0, 3, 4), (0, 4, 5), (0, 5, 6)]),
        ("input order kept across queues", [r(2, 0, 3), r(1, 0, 4)], 2, [(2, 0, 1), (2, 1, 3), (1, 0, 2), (1, 2, 4)]),
        ("empty ranges dropped", [r(0, 5, 5), r(1, 0, 1)], 10, [(1, 0, 1)]),
    ],
)
def test_split_ranges(name, ranges, limit, expected):
    assert spans(split_ranges(ranges, limit)) == expected


@given(st.integers(0, 10_000), st.integers(0, 5_000), st.integers(1, 700))
def test_split_ranges_cover_exactly_the_input_and_respect_the_limit(start, size, limit):
    parts = split_ranges([r(0, start, start + size)], limit)
    assert sum(p.size for p in parts) == size
    assert all(0 < p.size <= limit for p in parts)
    assert all(a.end == b.start for a, b in zip(parts, parts[1:], strict=False))
    if parts:
        assert parts[0].start == start and parts[-1].end == start + size


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_split_ranges_rejects_non_positive_limit(limit):
    with pytest.raises(OptionError, match="maxMessagesPerPartition"):
        split_ranges([r(0, 0, 1)], limit)


@pytest.mark.parametrize("bad", [r(0, 5, 4), r(0, -1, 3)])
def test_inverted_or_negative_range_is_refused_not_silently_dropped(bad):
    with pytest.raises(RocketStreamError, match="invalid offset range"):
        split_ranges([bad], None)


# --- plan_partitions --------------------------------------------------------------------------

def test_task_ids_sort_numerically_as_strings():
    ids = task_ids(1001)
    assert ids[0] == "task-0000" and ids[-1] == "task-1000" and sorted(ids) == ids
    assert task_ids(3) == ["task-000", "task-001", "task-002"]


@pytest.mark.parametrize(
    "name,strategy,num_tasks,limit,expected",
    [
        ("AVG gives contiguous queue blocks", "AVG", 3, None,
         [[(0, 0, 10), (1, 0, 10), (2, 0, 10)], [(3, 0, 10), (4, 0, 10), (5, 0, 10)], [(6, 0, 10), (7, 0, 10)]]),
        ("AVG_BY_CIRCLE deals queues round robin", "AVG_BY_CIRCLE", 3, None,
         [[(0, 0, 10), (3, 0, 10), (6, 0, 10)], [(1, 0, 10), (4, 0, 10), (7, 0, 10)], [(2, 0, 10), (5, 0, 10)]]),
        ("more tasks than queues drops idle tasks", "AVG", 20, None, [[(i, 0, 10)] for i in range(8)]),
        ("big ranges split inside their task", "AVG", 4, 6,
         [[(0, 0, 5), (0, 5, 10), (1, 0, 5), (1, 5, 10)], [(2, 0, 5), (2, 5, 10), (3, 0, 5), (3, 5, 10)],
          [(4, 0, 5), (4, 5, 10), (5, 0, 5), (5, 5, 10)], [(6, 0, 5), (6, 5, 10), (7, 0, 5), (7, 5, 10)]]),
    ],
)
def test_plan_partitions(name, strategy, num_tasks, limit, expected):
    ranges = [r(i, 0, 10) for i in range(8)]
    assert [spans(t) for t in plan_partitions(ranges, num_tasks, strategy, limit)] == expected


def test_plan_ignores_empty_queues_when_sharing_so_tasks_stay_balanced():
    ranges = [r(i, 5, 5) for i in range(6)] + [r(6, 0, 4), r(7, 0, 4)]
    assert [spans(t) for t in plan_partitions(ranges, 2, "AVG")] == [[(6, 0, 4)], [(7, 0, 4)]]


def test_plan_keeps_queue_offset_order_within_a_queue():
    ranges = [r(0, 20, 30), r(0, 0, 10)]
    assert [spans(t) for t in plan_partitions(ranges, 1)] == [[(0, 0, 10), (0, 20, 30)]]


def test_plan_sorts_queues_like_rocketmq_whatever_the_input_order():
    ranges = [r(i, 0, 1) for i in (3, 1, 2, 0)]
    assert [spans(t) for t in plan_partitions(ranges, 2)] == [[(0, 0, 1), (1, 0, 1)], [(2, 0, 1), (3, 0, 1)]]


def test_plan_with_nothing_to_read_is_empty():
    assert plan_partitions([r(0, 3, 3)], 4) == []


def test_plan_covers_every_message_once_with_consistent_hash():
    ranges = [OffsetRange(q(i, broker=b), 0, 7) for b in ("broker-a", "broker-b") for i in range(16)]
    plan = plan_partitions(ranges, 5, "CONSISTENT_HASH", 3)
    flat = sorted((x.queue, x.start, x.end) for t in plan for x in t)
    assert flat == sorted((x.queue, s, e) for x in ranges for s, e in ((0, 2), (2, 4), (4, 7)))


def test_plan_refuses_config_strategy_that_gives_a_queue_to_two_tasks():
    with pytest.raises(AllocationError, match="allocated twice"):
        plan_partitions([r(0, 0, 1)], 2, "CONFIG", message_queue_list=[q(0)])


def test_plan_refuses_strategy_that_leaves_queues_unread_unless_allowed():
    ranges = [OffsetRange(q(0, broker="hz@a"), 0, 5), OffsetRange(q(0, broker="sh@a"), 0, 5)]
    with pytest.raises(AllocationError, match="sh@a"):
        plan_partitions(ranges, 2, "MACHINE_ROOM", consumeridcs={"hz"})
    plan = plan_partitions(ranges, 2, "MACHINE_ROOM", consumeridcs={"hz"}, require_all=False)
    assert [[x.queue.broker_name for x in t] for t in plan] == [["hz@a"]]


@pytest.mark.parametrize("n", [0, -1])
def test_plan_rejects_non_positive_task_count(n):
    with pytest.raises(AllocationError, match="num_tasks"):
        plan_partitions([r(0, 0, 1)], n)


def test_ranges_between_needs_a_start_for_every_queue():
    assert spans(ranges_between({q(1): 2, q(0): 0}, {q(1): 5, q(0): 3})) == [(0, 0, 3), (1, 2, 5)]
    with pytest.raises(RocketStreamError, match="queueId=1"):
        ranges_between({q(0): 0}, {q(0): 1, q(1): 1})


# --- rate_limit: messages ---------------------------------------------------------------------

@pytest.mark.parametrize(
    "name,start,latest,limit,expected",
    [
        ("no limit reads everything", {0: 0, 1: 0}, {0: 10, 1: 30}, None, {0: 10, 1: 30}),
        ("limit above backlog reads everything", {0: 0, 1: 0}, {0: 10, 1: 30}, 100, {0: 10, 1: 30}),
        ("limit spread in proportion to backlog", {0: 0, 1: 0}, {0: 10, 1: 30}, 20, {0: 5, 1: 15}),
        ("offsets start where the last batch ended", {0: 100, 1: 7}, {0: 110, 1: 37}, 20, {0: 105, 1: 22}),
        ("rounding never exceeds the limit (SPARK ceil would give 3)", {0: 0, 1: 0, 2: 0}, {0: 5, 1: 5, 2: 5}, 2,
         {0: 1, 1: 1, 2: 0}),
        ("leftover goes to the largest remainder", {0: 0, 1: 0}, {0: 1, 1: 99}, 10, {0: 0, 1: 10}),
        ("queue without backlog keeps latest", {0: 0, 1: 5}, {0: 10, 1: 5}, 4, {0: 4, 1: 5}),
        ("queue behind its start returns latest like Spark", {0: 0, 1: 9}, {0: 10, 1: 5}, 4, {0: 4, 1: 5}),
    ],
)
def test_rate_limit_messages(name, start, latest, limit, expected):
    got = rate_limit({q(k): v for k, v in start.items()}, {q(k): v for k, v in latest.items()}, max_messages=limit)
    assert got == {q(k): v for k, v in expected.items()}


@given(st.dictionaries(st.integers(0, 15), st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1),
       st.integers(1, 3000))
def test_rate_limit_total_never_exceeds_limit_or_latest_and_always_progresses(queues, limit):
    start = {q(k): a for k, (a, b) in queues.items()}
    latest = {q(k): a + b for k, (a, b) in queues.items()}
    got = rate_limit(start, latest, max_messages=limit)
    assert all(start[k] <= got[k] <= latest[k] for k in latest)
    taken = sum(got[k] - start[k] for k in latest)
    backlog = sum(latest[k] - start[k] for k in latest)
    assert taken == min(limit, backlog)  # largest remainder uses the whole budget
    assert rate_limit(start, latest, max_messages=limit) == got  # deterministic


@pytest.mark.parametrize(
    "name,backlog,minimum,moves",
    [("below the minimum waits", 9, 10, False), ("at the minimum reads", 10, 10, True)],
)
def test_rate_limit_min_messages(name, backlog, minimum, moves):
    start, latest = {q(0): 0, q(1): 0}, {q(0): 4, q(1): backlog - 4}
    got = rate_limit(start, latest, min_messages=minimum)
    assert got == (latest if moves else start)


def test_rate_limit_requires_a_start_for_every_latest_queue():
    with pytest.raises(RocketStreamError, match="no start offset"):
        rate_limit({}, {q(0): 3})


@pytest.mark.parametrize("kwargs,option", [({"max_messages": 0}, "maxOffsetsPerTrigger"),
                                           ({"max_bytes": -5, "bytes_fn": lambda *a: None}, "maxBytesPerTrigger"),
                                           ({"min_messages": 1.0}, "minOffsetsPerTrigger")])
def test_rate_limit_rejects_bad_limits_naming_the_option(kwargs, option):
    with pytest.raises(OptionError, match=option):
        rate_limit({q(0): 0}, {q(0): 3}, **kwargs)


# --- rate_limit: bytes ------------------------------------------------------------------------

def sizes_fn(table: dict[int, list[int]]):
    """bytes_fn over per-queue lists of message sizes indexed by queue offset."""
    calls = []

    def fn(queue, start, end):
        calls.append((queue.queue_id, start, end))
        return np.array(table[queue.queue_id][start:end], dtype=np.int32)

    fn.calls = calls
    return fn


def run_bytes(table, max_bytes, start=None, max_messages=None):
    start = start or {k: 0 for k in table}
    got = rate_limit({q(k): v for k, v in start.items()}, {q(k): len(v) for k, v in table.items()},
                     max_messages=max_messages, max_bytes=max_bytes, bytes_fn=sizes_fn(table))
    return {k.queue_id: v for k, v in got.items()}


@pytest.mark.parametrize(
    "name,table,max_bytes,expected",
    [
        ("everything fits", {0: [10, 10], 1: [5]}, 25, {0: 2, 1: 1}),
        ("one queue cut at the last whole message", {0: [10, 10, 10]}, 25, {0: 2}),
        ("proportional to bytes backlog", {0: [10] * 10, 1: [10] * 30}, 200, {0: 5, 1: 15}),
        ("every head first so a small queue is not starved", {0: [1] * 1000, 1: [50]}, 100, {0: 50, 1: 1}),
        ("oversized head message gets a batch of its own", {0: [10, 10], 1: [500, 1]}, 100, {0: 0, 1: 1}),
        ("oversized head in first queue order wins", {0: [500], 1: [600]}, 100, {0: 1, 1: 0}),
        ("heads of all queues come before second messages", {0: [30, 30, 30], 1: [45, 45]}, 100, {0: 1, 1: 1}),
        ("boundary leftover goes to the queue furthest below its share", {0: [10] * 10, 1: [10] * 30}, 205,
         {0: 5, 1: 15}),
        ("small leftover still used when a message fits", {0: [10] * 3, 1: [10] * 3}, 45, {0: 2, 1: 2}),
    ],
)
def test_rate_limit_bytes(name, table, max_bytes, expected):
    assert run_bytes(table, max_bytes) == expected


def test_rate_limit_bytes_reads_sizes_only_up_to_the_message_limit():
    table = {0: [10] * 100}
    fn = sizes_fn(table)
    got = rate_limit({q(0): 0}, {q(0): 100}, max_messages=20, max_bytes=10_000, bytes_fn=fn)
    assert got == {q(0): 20} and fn.calls == [(0, 0, 20)]


@given(st.dictionaries(st.integers(0, 7), st.lists(st.integers(1, 300), max_size=40), min_size=1),
       st.integers(1, 2000), st.data())
def test_rate_limit_bytes_stays_under_budget_and_progresses(table, max_bytes, data):
    start = {k: data.draw(st.integers(0, len(v))) for k, v in table.items()}
    got = run_bytes(table, max_bytes, start=start)
    assert all(start[k] <= got[k] <= len(table[k]) for k in table)
    used = sum(sum(table[k][start[k]:got[k]]) for k in table)
    taken = sum(got[k] - start[k] for k in table)
    backlog = sum(len(table[k]) - start[k] for k in table)
    if backlog:
        assert taken >= 1
    oversized = [k for k in sorted(table) if start[k] < len(table[k]) and table[k][start[k]] > max_bytes]
    if oversized:  # the first queue whose next message alone is too big is read alone
        assert taken == 1 and got[oversized[0]] == start[oversized[0]] + 1
        return
    assert used <= max_bytes
    # a queue that was read is only cut where its next message would break the budget
    assert all(got[k] == len(table[k]) or used + table[k][got[k]] > max_bytes for k in table if got[k] > start[k])


def test_rate_limit_bytes_rejects_wrong_size_arrays():
    with pytest.raises(RocketStreamError, match="positive sizes"):
        rate_limit({q(0): 0}, {q(0): 3}, max_bytes=10, bytes_fn=lambda *a: np.array([1, 2]))
    with pytest.raises(RocketStreamError, match="needs bytes_fn"):
        rate_limit({q(0): 0}, {q(0): 3}, max_bytes=10)


# --- offset JSON ------------------------------------------------------------------------------

def test_offset_json_is_nested_sorted_and_compact():
    offsets = {QueueKey("b", "broker-a", 10): 5, QueueKey("b", "broker-a", 2): 7, QueueKey("a", "broker-z", 0): 1,
               QueueKey("a", "broker-b", 1): 0}
    assert offsets_to_json(offsets) == '{"a":{"broker-b":{"1":0},"broker-z":{"0":1}},"b":{"broker-a":{"2":7,"10":5}}}'


def test_offset_json_is_independent_of_dict_insertion_order():
    # Spark compares checkpointed offsets as strings: same offsets must give the same text.
    items = [(q(i), i * 3) for i in range(12)]
    assert offsets_to_json(dict(items)) == offsets_to_json(dict(reversed(items)))
    assert json.dumps(offsets_to_dict(dict(items))) == json.dumps(offsets_to_dict(dict(reversed(items))))


@given(st.dictionaries(st.builds(QueueKey, st.text(min_size=1, max_size=4), st.text(max_size=4),
                                 st.integers(0, 2**31 - 1)), st.integers(0, 2**63 - 1)))
def test_offset_json_round_trips(offsets):
    assert offsets_from_json(offsets_to_json(offsets)) == offsets
    assert offsets_from_dict(json.loads(offsets_to_json(offsets))) == offsets


def test_offset_json_accepts_earliest_and_latest_markers():
    assert offsets_from_json('{"t":{"b":{"0":-2,"1":-1}}}') == {QueueKey("t", "b", 0): -2, QueueKey("t", "b", 1): -1}
    with pytest.raises(OptionError, match="offset >= 0"):
        offsets_from_json('{"t":{"b":{"0":-1}}}', allow_special=False)


@pytest.mark.parametrize(
    "name,text,problem",
    [
        ("not json", '{"t":', "not valid JSON"),
        ("not an object", "[1]", "got a JSON list"),
        ("topic not an object", '{"t":5}', "topic 't'"),
        ("broker not an object", '{"t":{"b":[1]}}', "t/b"),
        ("queue id not a number", '{"t":{"b":{"x":1}}}', "queue id 'x'"),
        ("queue id with leading zero", '{"t":{"b":{"01":1}}}', "queue id '01'"),
        ("negative queue id", '{"t":{"b":{"-1":1}}}', "queue id '-1'"),
        ("queue id beyond int32", '{"t":{"b":{"2147483648":1}}}', "queue id"),
        ("offset a string", '{"t":{"b":{"0":"5"}}}', "offset must be"),
        ("offset a float", '{"t":{"b":{"0":5.0}}}', "offset must be"),
        ("offset a boolean", '{"t":{"b":{"0":true}}}', "offset must be"),
        ("offset below -2", '{"t":{"b":{"0":-3}}}', "offset must be"),
        ("offset beyond int64", '{"t":{"b":{"0":9223372036854775808}}}', "offset must be"),
        ("duplicate key", '{"t":{"b":{"0":1,"0":2}}}', "repeats the key '0'"),
    ],
)
def test_malformed_offset_json_names_the_option_and_the_problem(name, text, problem):
    with pytest.raises(OptionError, match="startingOffsets") as info:
        offsets_from_json(text, option="startingOffsets")
    assert problem in str(info.value)
    assert info.value.option == "startingOffsets"


def test_plan_default_is_kafka_like_split_and_packed():
    from rocketstream.spark.offset_ranges import DEFAULT_PACK_MESSAGES, DEFAULT_SPLIT_MESSAGES, plan_default

    def q(i):
        return QueueKey("T", "b", i)

    big = DEFAULT_SPLIT_MESSAGES * 2 + 1
    ranges = [OffsetRange(q(0), 0, big), OffsetRange(q(1), 5, 5 + DEFAULT_PACK_MESSAGES),
              OffsetRange(q(2), 0, 10), OffsetRange(q(3), 7, 7), OffsetRange(q(4), 0, 20)]
    plan = plan_default(reversed(ranges))
    # the big range in three near-equal chunks, the 8 Ki one alone, the small ones packed, empty dropped
    assert [[(r.queue.queue_id, r.start, r.end) for r in t] for t in plan] == [
        [(0, 0, big // 3)], [(0, big // 3, 2 * big // 3)], [(0, 2 * big // 3, big)],
        [(1, 5, 5 + DEFAULT_PACK_MESSAGES)], [(2, 0, 10), (4, 0, 20)]]
    # 1,024 queues of 10 k messages: a task per queue; of 100 messages: packed into a few tasks
    assert len(plan_default([OffsetRange(q(i), 0, 10_000) for i in range(1024)])) == 1024
    small = plan_default([OffsetRange(q(i), 0, 100) for i in range(1024)])
    assert len(small) == -(-1024 * 100 // DEFAULT_PACK_MESSAGES)
    # maxMessagesPerPartition bounds every task, split or packed
    limited = plan_default([OffsetRange(q(i), 0, 7) for i in range(10)] + [OffsetRange(q(10), 0, 100)], 15)
    assert all(sum(r.size for r in t) <= 15 for t in limited)
    assert sum(r.size for t in limited for r in t) == 170
    assert plan_default([]) == []
