"""Allocation strategies (AllocateMessageQueue*): worked examples, Java-computed vectors, and
Java-exactness properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstream.client._java import java_split, utf16_key
from rocketstream.client.allocate import (
    STRATEGIES,
    MessageQueue,
    allocate,
    allocate_all,
    md5_hash,
    sort_inputs,
)
from rocketstream.errors import AllocationError


def queues(n: int, topic: str = "TopicTest", broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def ids(mqs: list[MessageQueue]) -> list[int]:
    return [mq.queue_id for mq in mqs]


def cids(c: int) -> list[str]:
    return [f"cid-{k}" for k in range(c)]


# --- MessageQueue ------------------------------------------------------------------------------

def test_str_is_java_tostring_used_by_consistent_hash():
    want = "MessageQueue [topic=TopicTest, brokerName=broker-a, queueId=0]"
    assert str(MessageQueue("TopicTest", "broker-a", 0)) == want


def test_order_is_topic_then_broker_then_queue_id_numerically():
    mqs = [MessageQueue("b", "x", 0), MessageQueue("a", "y", 10), MessageQueue("a", "y", 9), MessageQueue("a", "x", 99)]
    assert sorted(mqs) == [MessageQueue("a", "x", 99), MessageQueue("a", "y", 9), MessageQueue("a", "y", 10),
                           MessageQueue("b", "x", 0)]


def test_order_uses_utf16_code_units_not_code_points():
    # U+FF21 (BMP, code unit 0xFF21) sorts AFTER U+1F600 in Python but BEFORE it in Java (surrogate 0xD83D).
    bmp, astral = MessageQueue("\uff21", "b", 0), MessageQueue("\U0001F600", "b", 0)
    assert "\uff21" < "\U0001F600"
    assert astral < bmp and sorted([bmp, astral]) == [astral, bmp]


def test_equality_and_hash_use_all_three_fields():
    assert MessageQueue("t", "b", 1) == MessageQueue("t", "b", 1)
    assert len({MessageQueue("t", "b", 1), MessageQueue("t", "b", 1), MessageQueue("t", "b", 2)}) == 2


def test_sort_inputs_dedupes_queues_keeps_duplicate_cids_and_uses_java_string_order():
    mqs, cs = sort_inputs([MessageQueue("t", "b", 2), MessageQueue("t", "b", 1), MessageQueue("t", "b", 2)],
                          ["\uff21", "\U0001F600", "a", "a"])
    assert ids(mqs) == [1, 2]
    assert cs == ["a", "a", "\U0001F600", "\uff21"]


# --- AVG / AVG_BY_CIRCLE (AllocateMessageQueueAveragely, AllocateMessageQueueAveragelyByCircle) ---

@pytest.mark.parametrize(
    "strategy,n,c,expected",
    [
        ("AVG", 8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
        ("AVG", 5, 3, [[0, 1], [2, 3], [4]]),
        ("AVG", 2, 3, [[0], [1], []]),
        ("AVG", 3, 3, [[0], [1], [2]]),
        ("AVG", 1, 1, [[0]]),
        ("AVG_BY_CIRCLE", 8, 3, [[0, 3, 6], [1, 4, 7], [2, 5]]),
        ("AVG_BY_CIRCLE", 2, 3, [[0], [1], []]),
    ],
)
def test_spec_worked_examples(strategy, n, c, expected):
    got = allocate_all(strategy, queues(n), cids(c))
    assert [ids(got[cid]) for cid in cids(c)] == expected


def test_allocate_uses_inputs_in_given_order_like_java():
    # RocketMQ sorts before calling the strategy; the strategy itself does not.
    mqs = list(reversed(queues(4)))
    assert ids(allocate("AVG", "b", mqs, ["b", "a"])) == [3, 2]


def test_duplicate_cid_takes_its_first_index_like_list_indexOf():
    assert ids(allocate("AVG", "a", queues(4), ["a", "a"])) == [0, 1]


def java_avg_reference(i: int, n: int, c: int) -> list[int]:
    # The 4.9.8 loop, statement by statement: (startIndex + k) % N for k < range.
    mod = n % c
    average = 1 if n <= c else (n // c + 1 if (mod > 0 and i < mod) else n // c)
    start = i * average if (mod > 0 and i < mod) else i * average + mod
    rng = min(average, n - start)
    return [(start + k) % n for k in range(rng)]


@given(st.integers(1, 60), st.integers(1, 20))
def test_avg_equals_java_4_9_8_loop(n, c):
    got = allocate_all("AVG", queues(n), cids(c))
    for i, cid in enumerate(sorted(cids(c))):
        assert ids(got[cid]) == java_avg_reference(i, n, c)


@pytest.mark.parametrize("strategy", ["AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH"])
@given(n=st.integers(1, 40), c=st.integers(1, 12))
def test_every_queue_allocated_exactly_once(strategy, n, c):
    got = allocate_all(strategy, queues(n), cids(c))
    flat = [mq for part in got.values() for mq in part]
    assert sorted(flat) == queues(n)


@pytest.mark.parametrize("strategy", ["AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH"])
@given(n=st.integers(1, 30), c=st.integers(1, 8), seed=st.randoms())
def test_result_independent_of_input_order_after_sort_inputs(strategy, n, c, seed):
    mqs, cs = queues(n), cids(c)
    shuffled_mqs, shuffled_cs = list(mqs), list(cs)
    seed.shuffle(shuffled_mqs)
    seed.shuffle(shuffled_cs)
    assert allocate_all(strategy, shuffled_mqs, shuffled_cs) == allocate_all(strategy, mqs, cs)


@given(n=st.integers(1, 40), c=st.integers(1, 12))
def test_avg_block_sizes_differ_by_at_most_one_and_are_contiguous(n, c):
    got = allocate_all("AVG", queues(n), cids(c))
    sizes = [len(v) for v in got.values()]
    assert max(sizes) - min(sizes) <= 1
    for part in got.values():
        assert ids(part) == list(range(ids(part)[0], ids(part)[0] + len(part))) if part else True


# --- common checks (AbstractAllocateMessageQueueStrategy.check) ----------------------------------

@pytest.mark.parametrize("strategy", ["AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH", "MACHINE_ROOM"])
@pytest.mark.parametrize(
    "cid,mqs,cs,message",
    [("", queues(2), ["a"], "currentCID"), ("a", [], ["a"], "mqAll"), ("a", queues(2), [], "cidAll")],
)
def test_empty_inputs_raise_allocation_error(strategy, cid, mqs, cs, message):
    args = {"consumeridcs": {"r"}} if strategy == "MACHINE_ROOM" else {}
    with pytest.raises(AllocationError, match=message):
        allocate(strategy, cid, mqs, cs, **args)


@pytest.mark.parametrize("strategy", ["AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH"])
def test_cid_not_in_group_gets_empty_allocation(strategy):
    assert allocate(strategy, "stranger", queues(4), ["a", "b"]) == []


def test_unknown_strategy_lists_valid_names():
    with pytest.raises(AllocationError, match="AVG_BY_CIRCLE"):
        allocate("ROUND_ROBIN", "a", queues(1), ["a"])


def test_misspelt_strategy_argument_is_allocation_error():
    with pytest.raises(AllocationError, match="virtual_node_count"):
        allocate("CONSISTENT_HASH", "a", queues(1), ["a"], virtual_node_count=3)
    with pytest.raises(AllocationError):
        allocate("AVG", "a", queues(1), ["a"], consumeridcs={"x"})


def test_strategy_names_are_the_java_getName_values():
    assert STRATEGIES == ("AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH", "CONFIG", "MACHINE_ROOM", "MACHINE_ROOM_NEARBY")


# --- CONSISTENT_HASH (AllocateMessageQueueConsistentHash) ---------------------------------------

def test_md5_ring_hash_vectors():
    assert md5_hash("127.0.0.1@12345#1-0") == 3189930829
    assert md5_hash(str(MessageQueue("TopicTest", "broker-a", 0))) == 1987926524


def reference_ring_owner(mq: MessageQueue, cs: list[str], vnodes: int, hash_fn=md5_hash) -> str | None:
    ring: dict[int, str] = {}
    for cid in cs:
        have = list(ring.values()).count(cid)
        for r in range(have, have + vnodes):
            ring[hash_fn(f"{cid}-{r}")] = cid
    if not ring:
        return None
    h = hash_fn(str(mq))
    at_or_after = [k for k in ring if k >= h]
    return ring[min(at_or_after) if at_or_after else min(ring)]


@given(n=st.integers(1, 20), c=st.integers(1, 6), vnodes=st.integers(0, 12))
def test_consistent_hash_matches_linear_scan_reference(n, c, vnodes):
    mqs, cs = queues(n), cids(c)
    got = allocate_all("CONSISTENT_HASH", mqs, cs, virtual_node_cnt=vnodes)
    for cid in cs:
        assert got[cid] == [mq for mq in mqs if reference_ring_owner(mq, cs, vnodes) == cid]


def test_consistent_hash_wraps_to_smallest_ring_key():
    # ring keys 10 ("a-0") and 20 ("b-0"); queue hash 30 is past every key -> owner of 10.
    table = {"a-0": 10, "b-0": 20, str(MessageQueue("t", "b", 0)): 30, str(MessageQueue("t", "b", 1)): 20}
    got = allocate_all("CONSISTENT_HASH", queues(2, "t", "b"), ["a", "b"], virtual_node_cnt=1,
                       hash_function=table.__getitem__)
    assert ids(got["a"]) == [0] and ids(got["b"]) == [1]


def test_consistent_hash_collision_later_insert_wins():
    table = {"a-0": 5, "b-0": 5, str(MessageQueue("t", "b", 0)): 1}
    got = allocate_all("CONSISTENT_HASH", queues(1, "t", "b"), ["a", "b"], virtual_node_cnt=1,
                       hash_function=table.__getitem__)
    assert got == {"a": [], "b": [MessageQueue("t", "b", 0)]}


def test_consistent_hash_zero_virtual_nodes_gives_nobody_anything_and_negative_is_rejected():
    assert allocate("CONSISTENT_HASH", "a", queues(3), ["a"], virtual_node_cnt=0) == []
    with pytest.raises(AllocationError, match="virtualNodeCnt"):
        allocate("CONSISTENT_HASH", "a", queues(3), ["a"], virtual_node_cnt=-1)


def test_consistent_hash_adding_a_consumer_moves_queues_only_to_it():
    mqs = queues(64)
    before = allocate_all("CONSISTENT_HASH", mqs, cids(4))
    after = allocate_all("CONSISTENT_HASH", mqs, cids(5))
    for cid in cids(4):
        assert set(after[cid]) <= set(before[cid])


# --- CONFIG, MACHINE_ROOM, MACHINE_ROOM_NEARBY (AllocateMessageQueueByConfig, ...ByMachineRoom, ...) -

def test_config_returns_its_list_unchanged_and_ignores_inputs():
    mine = [MessageQueue("x", "y", 7), MessageQueue("a", "b", 1)]
    assert allocate("CONFIG", "", [], [], message_queue_list=mine) == mine


def test_java_split_drops_trailing_empty_strings():
    assert java_split("room1@broker", "@") == ["room1", "broker"]
    assert java_split("room1@broker@", "@") == ["room1", "broker"]
    assert java_split("@broker", "@") == ["", "broker"]
    assert java_split("broker", "@") == ["broker"]
    assert java_split("@", "@") == [] and java_split("", "@") == [""]


def test_machine_room_keeps_two_part_broker_names_of_listed_rooms():
    mqs = sorted(
        [MessageQueue("t", b, q) for b in ("r1@a", "r2@b", "plain", "r1@x@y", "r1@c@") for q in range(2)]
    )
    got = allocate_all("MACHINE_ROOM", mqs, ["c0"], consumeridcs={"r1"})
    # "r1@c@" splits to two parts in Java (trailing empty dropped); "r1@x@y" has three.
    assert got["c0"] == [MessageQueue("t", "r1@a", 0), MessageQueue("t", "r1@a", 1),
                         MessageQueue("t", "r1@c@", 0), MessageQueue("t", "r1@c@", 1)]


@pytest.mark.parametrize("m,c,expected", [(7, 3, [[0, 1, 6], [2, 3], [4, 5]]), (2, 3, [[0], [1], []]),
                                          (6, 3, [[0, 1], [2, 3], [4, 5]])])
def test_machine_room_blocks_then_remainder_from_the_tail(m, c, expected):
    mqs = queues(m, "t", "r1@a")
    got = allocate_all("MACHINE_ROOM", mqs, cids(c), consumeridcs=["r1"])
    assert [ids(got[cid]) for cid in cids(c)] == expected


def room_of(name: str) -> str:
    return name.split("@")[0]


NEARBY = dict(inner="AVG", machine_room_of_queue=lambda mq: room_of(mq.broker_name), machine_room_of_cid=room_of)


def test_nearby_shares_own_room_locally_and_roomless_queues_with_everybody():
    mqs = sorted([MessageQueue("t", f"{room}@b", q) for room in ("hz", "sh", "bj") for q in range(4)])
    cs = ["hz@c1", "hz@c2", "sh@c1"]
    got = allocate_all("MACHINE_ROOM_NEARBY", mqs, cs, **NEARBY)
    assert got["hz@c1"] == [MessageQueue("t", "hz@b", 0), MessageQueue("t", "hz@b", 1),
                            MessageQueue("t", "bj@b", 0), MessageQueue("t", "bj@b", 1)]
    assert got["hz@c2"] == [MessageQueue("t", "hz@b", 2), MessageQueue("t", "hz@b", 3), MessageQueue("t", "bj@b", 2)]
    assert got["sh@c1"] == [MessageQueue("t", "sh@b", q) for q in range(4)] + [MessageQueue("t", "bj@b", 3)]
    flat = [mq for part in got.values() for mq in part]
    assert sorted(flat) == mqs


def test_nearby_java_name_form_selects_inner_strategy():
    mqs = queues(4, "t", "hz@b")
    by_name = allocate("MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE", "hz@1", mqs, ["hz@1", "hz@2"],
                       machine_room_of_queue=NEARBY["machine_room_of_queue"], machine_room_of_cid=room_of)
    assert ids(by_name) == [0, 2]


def test_nearby_empty_machine_room_raises():
    with pytest.raises(AllocationError, match="Machine room is null for consumer id"):
        allocate("MACHINE_ROOM_NEARBY", "c", queues(2, "t", "hz@b"), ["c"],
                 inner="AVG", machine_room_of_queue=lambda mq: "hz", machine_room_of_cid=lambda cid: "")
    with pytest.raises(AllocationError, match="Machine room is null for mq"):
        allocate("MACHINE_ROOM_NEARBY", "c", queues(2, "t", "hz@b"), ["c"],
                 inner="AVG", machine_room_of_queue=lambda mq: None, machine_room_of_cid=lambda cid: "hz")


def test_nearby_rejects_unknown_inner():
    with pytest.raises(AllocationError, match="inner"):
        allocate("MACHINE_ROOM_NEARBY", "c", queues(1), ["c"], **{**NEARBY, "inner": "NOPE"})


def test_utf16_key_orders_like_java_compareTo():
    words = ["b", "a", "ab", "", "\uffff", "\U00010000"]
    assert sorted(words, key=utf16_key) == ["", "a", "ab", "b", "\U00010000", "\uffff"]
