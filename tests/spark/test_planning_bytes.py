"""Tasks packed by bytes as Spark packs files (issue 21): the pure maths (plan_by_bytes), the consume queue's
sizes that feed it (store.read.range_bytes), and plan_tasks over a store with the planner's views."""

from __future__ import annotations

import numpy as np
import pytest

from rocketstream.codec import java_hash
from rocketstream.errors import OptionError
from rocketstream.spark.broker_view import open_views
from rocketstream.spark.local_view import LocalBroker
from rocketstream.spark.offset_ranges import (
    DEFAULT_LOCAL_OPEN_COST_BYTES,
    DEFAULT_MAX_PARTITION_BYTES,
    DEFAULT_OPEN_COST_BYTES,
    OffsetRange,
    QueueKey,
    plan_by_bytes,
)
from rocketstream.spark.options import parse_options
from rocketstream.spark.schema import projection_for
from rocketstream.spark.tasks import plan_tasks, ranges_bytes

MIB = 1 << 20


def q(i: int) -> QueueKey:
    return QueueKey("T", "b", i)


def shape(plan):
    return [[(r.queue.queue_id, r.start, r.end) for r in task] for task in plan]


def test_a_400_mib_read_gets_a_few_tasks_and_10_gib_enough_for_a_cluster():
    # 100 k x 4 KiB over 8 queues: 50 MiB a queue, two queues a task (Spark's 128 MiB target)
    eight = [OffsetRange(q(i), 0, 12_500) for i in range(8)]
    assert shape(plan_by_bytes(eight, [50 * MIB] * 8)) == [[(0, 0, 12_500), (1, 0, 12_500)],
                                                           [(2, 0, 12_500), (3, 0, 12_500)],
                                                           [(4, 0, 12_500), (5, 0, 12_500)],
                                                           [(6, 0, 12_500), (7, 0, 12_500)]]
    # 10 GiB over 8 queues: every queue cut into ceil(1.25 GiB / 128 MiB) = 10 near-equal chunks, 80 tasks
    big = plan_by_bytes([OffsetRange(q(i), 0, 5_000_000) for i in range(8)], [1280 * MIB] * 8)
    assert len(big) == 80 and all(len(t) == 1 for t in big)
    assert shape(big)[:2] == [[(0, 0, 500_000)], [(0, 500_000, 1_000_000)]]
    assert sum(r.size for t in big for r in t) == 40_000_000
    # 1,024 queues of one small message: the open cost packs 512 ranges a task, not a task per queue
    tiny = plan_by_bytes([OffsetRange(q(i), 0, 1) for i in range(1024)], [300] * 1024)
    assert [len(t) for t in tiny] == [512, 512]
    # a tag scan's bytes are the matching messages': a 1 % scan of 400 MiB is one task
    assert len(plan_by_bytes(eight, [MIB // 2] * 8)) == 1


def test_min_partitions_is_a_floor_and_the_message_limit_a_ceiling():
    eight = [OffsetRange(q(i), 0, 1000) for i in range(8)]
    assert len(plan_by_bytes(eight, [MIB] * 8)) == 1
    assert len(plan_by_bytes(eight, [MIB] * 8, min_partitions=4)) == 4
    # one queue only: the floor splits it (Spark's bytesPerCore), into near-equal consecutive chunks
    assert shape(plan_by_bytes(eight[:1], [8 * MIB], min_partitions=3)) == [[(0, 0, 333)], [(0, 333, 666)],
                                                                            [(0, 666, 1000)]]
    limited = plan_by_bytes(eight, [MIB] * 8, max_messages_per_partition=1500)
    assert all(sum(r.size for r in t) <= 1500 for t in limited) and len(limited) == 8
    assert sum(r.size for t in limited for r in t) == 8000
    # explicit target and open cost; empty ranges dropped; queue order kept whatever the input order
    ranges = [OffsetRange(q(2), 0, 10), OffsetRange(q(0), 5, 5), OffsetRange(q(1), 0, 10)]
    assert shape(plan_by_bytes(ranges, [600, 0, 500], max_partition_bytes=1000, open_cost=0)) == [
        [(1, 0, 10)], [(2, 0, 10)]]
    assert shape(plan_by_bytes(ranges, [400, 0, 500], max_partition_bytes=1000, open_cost=0)) == [
        [(1, 0, 10), (2, 0, 10)]]
    assert shape(plan_by_bytes(ranges, [400, 0, 500], max_partition_bytes=1000, open_cost=200)) == [
        [(1, 0, 10)], [(2, 0, 10)]]
    assert plan_by_bytes([], []) == []
    assert DEFAULT_MAX_PARTITION_BYTES == 128 * MIB and DEFAULT_OPEN_COST_BYTES == 256 << 10
    assert DEFAULT_LOCAL_OPEN_COST_BYTES == 64 << 10


def test_a_thousand_one_message_queues_are_one_local_task_and_two_network_ones(tmp_path):
    """Issue 21: a local task opens no queue for a range (about 25 µs of CPU each), so the local read's open cost
    is 64 KiB and 1,024 one-message ranges are one task; a network range costs pulls (256 KiB: two tasks)."""
    from rocketstream.spark.tasks import _open_cost

    local = parse_options({"path": str(tmp_path), "topic": "T"}, streaming=False)
    network = parse_options({"nameServer": "127.0.0.1:9876", "topic": "T"}, streaming=False)
    given = parse_options({"path": str(tmp_path), "topic": "T", "openCostInBytes": "1000"}, streaming=False)
    assert (_open_cost(local), _open_cost(network), _open_cost(given)) == (64 << 10, 256 << 10, 1000)
    ranges = [OffsetRange(q(i), 0, 1) for i in range(1024)]
    assert len(plan_by_bytes(ranges, [250] * 1024, open_cost=_open_cost(local))) == 1
    assert len(plan_by_bytes(ranges, [250] * 1024, open_cost=_open_cost(network))) == 2


def test_bad_planning_values_are_option_errors():
    r = [OffsetRange(q(0), 0, 1)]
    for kwargs, name in (({"max_partition_bytes": 0}, "maxPartitionBytes"), ({"open_cost": -1}, "openCostInBytes"),
                         ({"min_partitions": 0}, "minPartitions"), ({"max_messages_per_partition": 0},
                                                                    "maxMessagesPerPartition")):
        with pytest.raises(OptionError, match=name):
            plan_by_bytes(r, [1], **kwargs)
    with pytest.raises(ValueError):
        plan_by_bytes(r, [1, 2])
    with pytest.raises(OptionError, match="maxPartitionBytes"):
        parse_options({"path": "/x", "topic": "T", "maxPartitionBytes": "0"}, streaming=False)
    opts = parse_options({"path": "/x", "topic": "T", "maxPartitionBytes": "1000", "openCostInBytes": "0"},
                         streaming=False)
    assert (opts.max_partition_bytes, opts.open_cost_in_bytes) == (1000, 0)


def _store(root, per_queue, body_sizes, tags_every=0):
    from rocketstream.store import MessageStore

    with MessageStore.open(root, create=True) as store:
        store.create_topic("T", len(body_sizes))
        for qid, size in enumerate(body_sizes):
            store.put_batch("T", qid, [b"x" * size] * per_queue,
                            tags=["Rare" if tags_every and i % tags_every == 0 else "Common" for i in range(per_queue)])
    with MessageStore.open(root, read_only=True) as store:
        return {qid: store.read_cq_units("T", qid, 0, per_queue) for qid in range(len(body_sizes))}


def test_range_bytes_are_the_consume_queue_sizes_exact_or_sampled(tmp_path):
    from rocketstream.store import MessageStore
    from rocketstream.store.read.range_bytes import queue_range_bytes

    units = _store(tmp_path / "s", 400, [100, 3000], tags_every=10)
    with MessageStore.open(tmp_path / "s", read_only=True) as store:
        cq0, cq1 = store.queues_for_read("T", [0, 1])
        assert cq0 is not None and cq1 is not None
        sizes0 = units[0]["size"].astype(np.int64)
        assert queue_range_bytes(cq0, 0, 400) == int(sizes0.sum())
        assert queue_range_bytes(cq0, 17, 250) == int(sizes0[17:250].sum())
        assert queue_range_bytes(cq0, 390, 10_000) == int(sizes0[390:].sum())   # clamped to the max
        assert queue_range_bytes(cq0, 5, 5) == 0
        assert queue_range_bytes(cq0, 17, 20) == int(sizes0[17:20].sum())   # a few units: summed one by one
        assert queue_range_bytes(cq0, 396, 10_000) == int(sizes0[396:].sum())
        rare = np.array([java_hash("Rare")], dtype=np.int64)
        assert queue_range_bytes(cq1, 0, 5, rare) == int(units[1]["size"].astype(np.int64)[0])
        assert queue_range_bytes(cq1, 0, 400, rare) == int(units[1]["size"].astype(np.int64)[::10].sum())
        # sampled: every 4th unit of 400, scaled; exact to the byte here (sizes are even within a queue)
        assert queue_range_bytes(cq0, 0, 400, exact_units=100) == int(sizes0[::4].sum()) * 4
        assert abs(queue_range_bytes(cq1, 0, 400, exact_units=100) - int(units[1]["size"].sum())) < 400 * 4


def test_plan_tasks_with_views_packs_by_bytes_and_keeps_allocation_strategies(tmp_path):
    root = tmp_path / "s"
    _store(root, 200, [2000] * 6 + [10] * 2, tags_every=100)
    broker = LocalBroker("broker-a", str(root))
    keys = [QueueKey("T", "broker-a", i) for i in range(8)]
    starts, ends = dict.fromkeys(keys, 0), dict.fromkeys(keys, 200)

    def plan(tags=None, **extra):
        opts = parse_options({"path": str(root), "topic": "T", **extra}, streaming=False)
        with open_views([broker]) as views:
            tasks = plan_tasks(opts, (broker,), starts, ends, projection_for(None), tags, views=views)
        return [[r[2:] for r in t.ranges] for t in tasks]

    with open_views([broker]) as views:
        found = ranges_bytes(views, [OffsetRange(k, 0, 200) for k in keys], None)
        rare = ranges_bytes(views, [OffsetRange(k, 0, 200) for k in keys], frozenset({"Rare"}))
    assert found[0] > 200 * 2000 and found[7] < 200 * 200 and rare[0] * 50 < found[0]
    # ~2.6 MiB in all: one task; with a 1 MiB target two big queues (~430 KB each) a task, the small ones
    # packed with the last big pair
    assert plan() == [[(i, 0, 200) for i in range(8)]]
    by_mib = plan(maxPartitionBytes=str(1 << 20), openCostInBytes="0")
    assert by_mib == [[(0, 0, 200), (1, 0, 200)], [(2, 0, 200), (3, 0, 200)], [(i, 0, 200) for i in range(4, 8)]]
    assert plan(tags=frozenset({"Rare"}), maxPartitionBytes=str(1 << 20), openCostInBytes="0") == [
        [(i, 0, 200) for i in range(8)]]   # the tag scan's bytes are the matching units'
    assert len(plan(minPartitions="3")) == 3
    # numPartitions with a strategy: the strategy decides which queues go together, bytes may cut more
    circle = plan(numPartitions="2", allocateStrategy="AVG_BY_CIRCLE")
    assert [[r[0] for r in t] for t in circle] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    cut = plan(numPartitions="2", allocateStrategy="AVG_BY_CIRCLE", maxPartitionBytes=str(1 << 20),
               openCostInBytes="0")
    assert len(cut) > 2 and all({r[0] % 2 for r in t} in ({0}, {1}) for t in cut)
    assert sorted(r for t in cut for r in t) == [(i, 0, 200) for i in range(8)]


def test_a_task_of_many_small_ranges_is_read_in_one_batch_opening_no_queue(tmp_path, monkeypatch):
    """Issue 21: the local read's work is per task, not per range — one batch for 20 one-message ranges (rows
    in range order, each with its queue), and no queue loaded, listed or refreshed: each range's units are read
    where they are (it was a load and a refresh of every queue, then a load of every queue). A range whose
    units are not all there (past the queue's end here) opens that queue alone, whose max then clamps it."""
    from rocketstream.store import MessageStore
    from rocketstream.store.files.consume_queue import ConsumeQueue

    root = tmp_path / "s"
    with MessageStore.open(root, create=True) as store:
        store.create_topic("T", 20)
        for qid in range(20):
            store.put_batch("T", qid, [b"m%d" % qid] * 2, tags="A")
    loaded: list[int] = []   # every queue load (listing, mapping, end scan)
    real = ConsumeQueue.load
    monkeypatch.setattr(ConsumeQueue, "load", lambda self, *a: loaded.append(self.queue_id) or real(self, *a))
    view = LocalBroker("broker-a", str(root)).open()
    try:
        order = [7, 3, 19, 0] + [q for q in range(20) if q not in (7, 3, 19, 0)]
        batches = list(view.read_ranges([("T", q, 1, 2) for q in order], columns=["queueId", "queueOffset", "body"],
                                        tags=None, check_crc=False))
        assert len(batches) == 1
        assert batches[0].to_pylist() == [{"queueId": q, "queueOffset": 1, "body": b"m%d" % q} for q in order]
        assert loaded == []
        past_end = list(view.read_ranges([("T", 4, 0, 2), ("T", 5, 1, 9)], columns=["queueId", "queueOffset"],
                                         tags=None, check_crc=False))
    finally:
        view.close()
    assert [row for b in past_end for row in b.to_pylist()] == [
        {"queueId": 4, "queueOffset": 0}, {"queueId": 4, "queueOffset": 1}, {"queueId": 5, "queueOffset": 1}]
    assert loaded == [5]
