"""Spark tasks, shared by batch and streaming reads: planning offset ranges into :class:`ReadTask`s on the
driver, and reading a task's ranges as Arrow batches in executors.

``read()`` runs in executor workers from a pickled reader, so every task carries what it needs in its
:class:`ReadTask` (broker locations, ranges, columns, tag set) and opens its broker views itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from rocketstream.spark.broker_view import BrokerLocation, open_views
from rocketstream.spark.offset_ranges import OffsetRange, QueueKey, plan_default, plan_partitions
from rocketstream.spark.options import RocketMQOptions
from rocketstream.spark.schema import Projection


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
) -> list[ReadTask]:
    """The tasks of a batch.

    Default (no ``numPartitions``): Kafka-like (:func:`plan_default`): a task per queue range with messages,
    big ranges split, small ones packed, no task above ``maxMessagesPerPartition`` messages when given.
    With ``numPartitions``: that many tasks share the queues as a consumer group of that many members
    would with ``allocateStrategy``, ranges split by ``maxMessagesPerPartition``. CONFIG and MACHINE_ROOM
    choose the queues read either way."""
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
            return _tasks(options, brokers, _default_plan(options, starts, ends, queues), projection, tags,
                          store_time_us)
    else:
        if strategy == "MACHINE_ROOM":
            rooms = args["consumeridcs"]
            queues = [q for q in queues if q.broker_name.count("@") == 1 and q.broker_name.split("@")[0] in rooms]
        if options.num_partitions is None:
            return _tasks(options, brokers, _default_plan(options, starts, ends, queues), projection, tags,
                          store_time_us)
        num_tasks = options.num_partitions
        if strategy.startswith("MACHINE_ROOM_NEARBY"):
            rooms_all = sorted({_room(q) for q in queues}) or ["default"]
            args.setdefault("inner", strategy.partition("-")[2] or "AVG")
            strategy = "MACHINE_ROOM_NEARBY"
            args["machine_room_of_queue"] = _room
            args["machine_room_of_cid"] = _TaskRoom(tuple(rooms_all))
    ranges = [OffsetRange(q, starts[q], ends[q]) for q in sorted(queues)]
    plan = plan_partitions(ranges, num_tasks, strategy, options.max_messages_per_partition, **args)
    return _tasks(options, brokers, plan, projection, tags, store_time_us)


def _default_plan(options: RocketMQOptions, starts: Mapping[QueueKey, int], ends: Mapping[QueueKey, int],
                  queues: Iterable[QueueKey]) -> list[list[OffsetRange]]:
    return plan_default([OffsetRange(q, starts[q], ends[q]) for q in queues], options.max_messages_per_partition)


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


__all__ = ["ReadTask", "plan_tasks", "read_task"]
