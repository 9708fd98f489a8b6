"""Spark tasks, shared by batch and streaming reads: planning offset ranges into :class:`ReadTask`s on the
driver, and reading a task's ranges as Arrow batches in executors.

``read()`` runs in executor workers from a pickled reader, so every task carries what it needs in its
:class:`ReadTask` (broker locations, ranges, columns, tag set) and opens its broker views itself.
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from rocketstream.codec import java_hash
from rocketstream.errors import OptionError
from rocketstream.spark.broker_view import BrokerLocation, BrokerView, open_views, view_of
from rocketstream.spark.offset_ranges import (
    DEFAULT_LOCAL_OPEN_COST_BYTES,
    DEFAULT_MAX_PARTITION_BYTES,
    DEFAULT_OPEN_COST_BYTES,
    OffsetRange,
    QueueKey,
    plan_by_bytes,
    plan_default,
    plan_partitions,
)
from rocketstream.spark.options import RocketMQOptions
from rocketstream.spark.schema import Projection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadTask(InputPartition):
    """One Spark task: ranges ``(brokerName, topic, queueId, start, end)`` read in order."""

    brokers: tuple[BrokerLocation, ...]  # where each broker of the ranges is (opened on the executor)
    ranges: tuple[tuple[str, str, int, int, int], ...]
    columns: tuple[str, ...]
    tags: frozenset[str] | None  # None: every message
    store_time_us: tuple[int, int] | None = None  # exact [low, high] filter on storeTimestamp (µs)
    fail_on_data_loss: bool = True  # retention passing a range after planning: fail, or skip what is gone
    check_crc: bool = False  # verify BODYCRC of every row (CorruptStoreError naming file and offset)


def read_task(task: ReadTask, projection: Projection) -> Iterator[pa.RecordBatch]:
    """Executor side: the task's rows as Arrow batches in Spark's schema. Each broker's ranges go to its
    view at once (``read_ranges``: a network view pulls several of them at a time), brokers in the order
    the task first names them; a range below the queue's min follows failOnDataLoss (at planning time
    and while reading)."""
    columns = list(task.columns)
    need_time = task.store_time_us is not None and "storeTimestamp" not in columns
    read_columns = columns + (["storeTimestamp"] if need_time else [])
    by_broker: dict[str, list[tuple[str, int, int, int]]] = {}
    for broker, topic, qid, start, end in task.ranges:
        by_broker.setdefault(broker, []).append((topic, qid, start, end))
    with open_views(b for b in task.brokers if b.name in by_broker) as views:
        for broker, ranges in by_broker.items():
            for batch in views[broker].read_ranges(ranges, columns=read_columns, tags=task.tags,
                                                   check_crc=task.check_crc,
                                                   fail_on_data_loss=task.fail_on_data_loss):
                if task.store_time_us is not None:
                    batch = _filter_time(batch, *task.store_time_us)
                    if need_time:
                        batch = batch.select(columns)
                if batch.num_rows:
                    yield projection.relabel(batch)
    freeze_worker_heap()


# True once this process moved its heap to the permanent generation (freeze_worker_heap)
_heap_frozen = False


def freeze_worker_heap() -> None:
    """In a PySpark daemon worker, once per process: collect, then move every object left to the permanent
    generation (``gc.freeze``). A reused worker runs a full ``gc.collect()`` after each task (pyspark/daemon.py
    ``manager``), which walks every tracked object: with pyspark, pyarrow and our modules loaded 22–30 ms of
    CPU a task (33–39 ms once something imports pandas), 0.0 ms once frozen. What is left after a
    worker's first task is modules, classes and caches that live as long as the process, so later collections
    need not walk them again; objects created later are collected as usual, and freed by reference counting
    as before. A process that is not a PySpark daemon worker (the driver, tests) is left alone."""
    global _heap_frozen
    if _heap_frozen:
        return
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if getattr(spec, "name", None) != "pyspark.daemon":
        return
    _heap_frozen = True
    gc.collect()
    gc.freeze()


def _filter_time(batch: pa.RecordBatch, low_us: int, high_us: int) -> pa.RecordBatch:
    us = batch.column("storeTimestamp").cast(pa.int64())
    return batch.filter(pc.and_(pc.greater_equal(us, low_us), pc.less_equal(us, high_us)))


def plan_tasks(
    options: RocketMQOptions,
    brokers: tuple[BrokerLocation, ...],
    starts: Mapping[QueueKey, int],
    ends: Mapping[QueueKey, int],
    projection: Projection,
    tags: frozenset[str] | None,
    store_time_us: tuple[int, int] | None = None,
    views: Mapping[str, BrokerView] | None = None,
) -> list[ReadTask]:
    """The tasks of a batch.

    With ``views`` (the planner's open broker views) ranges are packed into tasks by their stored bytes as
    Spark packs files (:func:`plan_by_bytes`: ``maxPartitionBytes``, ``openCostInBytes``, a range above the
    target split); the bytes are the consume queue's unit sizes in local mode (under a tag filter, those of
    the units whose tagsCode may match) and count × a sampled average size in network mode
    (:func:`ranges_bytes`). Without views, or when a broker cannot tell sizes: message counts
    (:func:`plan_default`).

    Default (no ``numPartitions``): every range with messages, in queue order; no task above
    ``maxMessagesPerPartition`` messages when given. With ``numPartitions``: that many tasks share the
    queues as a consumer group of that many members would with ``allocateStrategy`` (ranges split by
    ``maxMessagesPerPartition``), and a member's share bigger than ``maxPartitionBytes`` is cut into more
    tasks — never mixing two members' queues. CONFIG and MACHINE_ROOM choose the queues read either way."""
    args: dict[str, Any] = dict(options.strategy_args)  # each strategy's own keyword arguments
    strategy = options.allocate_strategy
    queues = [q for q in ends if ends[q] > starts[q]]
    if strategy == "CONFIG":
        # The configured queues are the only ones this group reads (the Java strategy returns its list to
        # every consumer), so one task plans them and maxMessagesPerPartition splits the work.
        wanted = set(args.pop("config_queues"))
        queues = [q for q in queues if (q.broker_name, q.queue_id) in wanted or ("", q.queue_id) in wanted]
        args["message_queue_list"] = sorted(queues)
        num_tasks = 1
        if options.num_partitions is None:
            return _tasks(options, brokers, _default_plan(options, starts, ends, queues, tags, views), projection,
                          tags, store_time_us)
    else:
        if strategy == "MACHINE_ROOM":
            rooms = args["consumeridcs"]
            queues = [q for q in queues if q.broker_name.count("@") == 1 and q.broker_name.split("@")[0] in rooms]
        if options.num_partitions is None:
            return _tasks(options, brokers, _default_plan(options, starts, ends, queues, tags, views), projection,
                          tags, store_time_us)
        num_tasks = options.num_partitions
        if strategy.startswith("MACHINE_ROOM_NEARBY"):
            rooms_all = sorted({_room(q) for q in queues}) or ["default"]
            args.setdefault("inner", strategy.partition("-")[2] or "AVG")
            strategy = "MACHINE_ROOM_NEARBY"
            args["machine_room_of_queue"] = _room
            args["machine_room_of_cid"] = _TaskRoom(tuple(rooms_all))
    ranges = [OffsetRange(q, starts[q], ends[q]) for q in sorted(queues)]
    plan = plan_partitions(ranges, num_tasks, strategy, options.max_messages_per_partition, **args)
    sizes = None if views is None else ranges_bytes(views, [r for task in plan for r in task], tags)
    if sizes is not None:
        at, packed = 0, []
        for member in plan:   # the members are the floor; a member's share above the target is cut further
            packed += plan_by_bytes(member, sizes[at:at + len(member)],
                                    max_partition_bytes=_max_partition_bytes(options), open_cost=_open_cost(options))
            at += len(member)
        plan = packed
    return _tasks(options, brokers, plan, projection, tags, store_time_us)


def _max_partition_bytes(options: RocketMQOptions) -> int:
    return options.max_partition_bytes or DEFAULT_MAX_PARTITION_BYTES


def _open_cost(options: RocketMQOptions) -> int:
    if options.open_cost_in_bytes is not None:
        return options.open_cost_in_bytes
    return DEFAULT_OPEN_COST_BYTES if options.network else DEFAULT_LOCAL_OPEN_COST_BYTES


def _default_plan(options: RocketMQOptions, starts: Mapping[QueueKey, int], ends: Mapping[QueueKey, int],
                  queues: Iterable[QueueKey], tags: frozenset[str] | None,
                  views: Mapping[str, BrokerView] | None) -> list[list[OffsetRange]]:
    ranges = [OffsetRange(q, starts[q], ends[q]) for q in queues]
    sizes = None if views is None else ranges_bytes(views, ranges, tags)
    if sizes is None:
        return plan_default(ranges, options.max_messages_per_partition)
    return plan_by_bytes(ranges, sizes, max_partition_bytes=_max_partition_bytes(options),
                         open_cost=_open_cost(options), min_partitions=options.num_partitions or 1,
                         max_messages_per_partition=options.max_messages_per_partition)


# Units whose sizes a network view is asked for, per broker and topic, to estimate an average message size
SIZE_SAMPLE_UNITS = 64


def ranges_bytes(views: Mapping[str, BrokerView], ranges: Sequence[OffsetRange],
                 tags: frozenset[str] | None) -> list[int] | None:
    """Stored bytes of each range, for :func:`plan_by_bytes`. A view with ``range_bytes`` (local mode) sums
    the consume queue's unit sizes (with ``tags``, of the units whose tagsCode may match); another (network
    mode) is asked the sizes of the first :data:`SIZE_SAMPLE_UNITS` messages of the broker's longest range of
    each topic (QUERY_CONSUME_QUEUE) and each range counts its messages × their average. None when a broker
    does not answer that request (planning then goes by message counts; logged)."""
    codes = None if not tags else np.array(sorted(java_hash(t) for t in tags), dtype=np.int64)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(ranges):
        groups.setdefault((r.queue.broker_name, r.queue.topic), []).append(i)
    out = [0] * len(ranges)
    for (broker, topic), idx in groups.items():
        view = view_of(views, broker)
        range_bytes = getattr(view, "range_bytes", None)
        if range_bytes is not None:
            found = range_bytes(topic, [(ranges[i].queue.queue_id, ranges[i].start, ranges[i].end) for i in idx],
                                codes)
            for i, b in zip(idx, found, strict=True):
                out[i] = int(b)
            continue
        longest = ranges[max(idx, key=lambda i: ranges[i].size)]
        try:
            sample = view.message_sizes(topic, longest.queue.queue_id, longest.start,
                                        min(longest.end, longest.start + SIZE_SAMPLE_UNITS))
        except OptionError as exc:
            log.warning("broker %s gives no message sizes (%s): tasks planned by message counts", broker, exc)
            return None
        average = float(np.mean(sample)) if len(sample) else 0.0
        for i in idx:
            out[i] = int(ranges[i].size * average)
    return out


def _tasks(options: RocketMQOptions, brokers: tuple[BrokerLocation, ...], plan: list[list[OffsetRange]],
           projection: Projection, tags: frozenset[str] | None,
           store_time_us: tuple[int, int] | None) -> list[ReadTask]:
    return [
        ReadTask(
            brokers=brokers,
            ranges=tuple((r.queue.broker_name, r.queue.topic, r.queue.queue_id, r.start, r.end) for r in task),
            columns=projection.columns,
            tags=tags,
            store_time_us=store_time_us,
            fail_on_data_loss=options.fail_on_data_loss,
            check_crc=options.check_crc,
        )
        for task in plan
    ]


def _room(q: QueueKey) -> str:
    # RocketMQ's machine-room brokers are named "<room>@<broker>"; a plain name is its own room.
    return q.broker_name.split("@")[0]


@dataclass(frozen=True)
class _TaskRoom:
    """Spark tasks have no machine room: task i is placed in room i mod R (rooms in name order)."""

    rooms: tuple[str, ...]

    def __call__(self, cid: str) -> str:
        return self.rooms[int(cid.rsplit("-", 1)[1]) % len(self.rooms)]


__all__ = ["ReadTask", "plan_tasks", "ranges_bytes", "read_task"]
