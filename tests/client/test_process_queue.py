"""ProcessQueue (ProcessQueue.java 4.9.8) and the pull-side flow-control decision, without a network."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstream.client.process_queue import ProcessQueue
from rocketstream.client.pull_service import MIB, flow_control


@dataclass
class Msg:
    queue_offset: int
    body: bytes = b"x"
    properties: dict[str, str] = field(default_factory=dict)


def msgs(*offsets: int, size: int = 1) -> list[Msg]:
    return [Msg(o, b"x" * size) for o in offsets]


def test_put_counts_sizes_and_ignores_repeated_offsets() -> None:
    pq = ProcessQueue()
    assert pq.put_messages(msgs(5, 6, 7, size=10)) is True   # first put: dispatch, consuming set
    assert pq.consuming
    assert pq.put_messages(msgs(7, 8, size=10)) is False     # already consuming; 7 is a repeat
    assert (pq.msg_count, pq.msg_size, pq.queue_offset_max) == (4, 40, 8)
    assert pq.max_span() == 3
    assert pq.first_offset() == 5


def test_remove_returns_smallest_unconsumed_offset_never_past_it() -> None:
    pq = ProcessQueue()
    pq.put_messages(msgs(10, 11, 12, 13))
    # 12 and 13 finish first: the commit offset stays at 10 (msg 10 and 11 still in flight)
    assert pq.remove_messages(msgs(12, 13)) == 10
    assert pq.remove_messages(msgs(10)) == 11
    assert pq.remove_messages(msgs(11)) == 14                # empty: queue_offset_max + 1
    assert pq.remove_messages(msgs(11)) == -1                # already empty: nothing to commit
    assert (pq.msg_count, pq.msg_size) == (0, 0)


def test_remove_of_unknown_offsets_keeps_counts() -> None:
    pq = ProcessQueue()
    pq.put_messages(msgs(1, 2))
    assert pq.remove_messages(msgs(7)) == 1
    assert pq.msg_count == 2


def test_orderly_take_commit_and_consume_again() -> None:
    pq = ProcessQueue()
    pq.put_messages(msgs(3, 1, 2, 4, size=5))                # out of order on arrival: taken in order
    taken = pq.take_messages(2)
    assert [m.queue_offset for m in taken] == [1, 2]
    assert pq.msg_count == 4                                 # still counted while consuming
    pq.make_message_to_consume_again(taken[1:])              # 2 goes back, 1 stays consuming
    assert [m.queue_offset for m in pq.take_messages(1)] == [2]
    assert pq.commit() == 3                                  # 1 and 2 done
    assert (pq.msg_count, pq.msg_size) == (2, 10)
    assert pq.commit() == -1
    taken = pq.take_messages(5)
    assert [m.queue_offset for m in taken] == [3, 4]
    pq.rollback()
    assert [m.queue_offset for m in pq.take_messages(5)] == [3, 4]
    assert pq.commit() == 5
    assert pq.take_messages(1) == [] and not pq.consuming    # nothing left: the consume request ends


def test_msg_acc_cnt_from_max_offset_property() -> None:
    pq = ProcessQueue()
    pq.put_messages([Msg(7, properties={"MAX_OFFSET": "20"})])
    assert pq.msg_acc_cnt == 13


def test_lock_and_pull_expiry() -> None:
    pq = ProcessQueue(lock_max_live_time_s=0.05, pull_max_idle_time_s=0.05)
    pq.mark_locked(True)
    assert pq.locked and not pq.is_lock_expired()
    time.sleep(0.08)
    assert pq.is_lock_expired() and pq.is_pull_expired()
    pq.mark_locked(True)
    assert not pq.is_lock_expired()


@pytest.mark.parametrize("orderly", [False, True])
def test_flow_control_thresholds(orderly: bool) -> None:
    kw = dict(pull_threshold_for_queue=1000, pull_threshold_size_for_queue_mib=100, consume_concurrently_max_span=2000,
              orderly=orderly)
    pq = ProcessQueue()
    pq.put_messages(msgs(*range(1000)))
    assert flow_control(pq, **kw) is None                    # exactly at the threshold: still pulls
    pq.put_messages(msgs(1000))
    assert flow_control(pq, **kw) == "count"
    big = ProcessQueue()
    big.put_messages([Msg(0, b"x" * (101 * MIB))])
    assert flow_control(big, **kw) == "size"
    span = ProcessQueue()
    span.put_messages(msgs(0, 2001))
    assert flow_control(span, **kw) == (None if orderly else "span")   # span only limits concurrent consumption


@settings(max_examples=100, deadline=None)
@given(waiting=st.lists(st.integers(0, 40), max_size=8, unique=True), first=st.integers(41, 60),
       count=st.integers(1, 12), body=st.integers(0, 3), orderly=st.booleans())
def test_flow_control_of_an_incoming_batch_is_that_of_the_batch_put(waiting: list[int], first: int, count: int,
                                                                     body: int, orderly: bool) -> None:
    """``flow_control(..., incoming=...)`` (the push consumer's check before a pull sent ahead) counting a batch
    not queued yet decides as the plain check does once the batch is in the ProcessQueue."""
    kw = dict(pull_threshold_for_queue=10, pull_threshold_size_for_queue_mib=0, consume_concurrently_max_span=15,
              orderly=orderly)
    size = body * MIB // 4   # 0, 1/4, 1/2, 3/4 MiB a message: crosses the 0 MiB threshold at a whole MiB
    pq = ProcessQueue()
    pq.put_messages(msgs(*sorted(waiting), size=size))
    batch = msgs(*range(first, first + count), size=size)
    verdict = flow_control(pq, **kw, incoming=(count, count * size, first, first + count - 1))
    pq.put_messages(batch)
    assert verdict == flow_control(pq, **kw)


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 60), max_size=12)), max_size=30))
def test_batched_put_and_remove_keep_the_model_state(ops: list[tuple[bool, list[int]]]) -> None:
    """put_messages / remove_messages (fast paths for increasing batches and runs) against a plain model:
    the waiting offsets, count, size, and the offset to commit."""
    pq = ProcessQueue()
    model: dict[int, int] = {}   # offset -> body length
    last_put = 0
    for put, offsets in ops:
        batch = [Msg(o, body=b"x" * (o % 7)) for o in offsets]
        if put:
            pq.put_messages(batch)
            for o in offsets:
                if o not in model:
                    model[o] = o % 7
                    last_put = o
        else:
            expected = -1 if not model else None
            for o in offsets:
                model.pop(o, None)
            got = pq.remove_messages(batch)
            if expected is None:
                expected = min(model) if model else last_put + 1
            assert got == expected
        assert sorted(pq.msg_tree) == sorted(model) == pq._offsets
        assert pq.msg_count == len(model) and pq.msg_size == sum(model.values())
        assert pq.queue_offset_max == last_put
        assert pq.max_span() == (max(model) - min(model) if model else 0)
