"""Batch reads: start and end offsets from the options, narrowed by pushed filters, planned into tasks.

Planning (``partitions()``) runs in Spark's planner worker; ``read()`` runs in executor workers from a
pickled reader. Tasks and their reading are shared with streaming (:mod:`rocketstream.spark.tasks`).

Filter pushdown needs ``spark.sql.python.filterPushdown.enabled=true`` (Spark's default is false). PySpark
4.3 plans a Python source read in one of two planner processes, and neither hands the source the session
conf (``DataSource`` gets only its options, ``reader()`` only the schema):

* ``pyspark.sql.worker.data_source_pushdown_filters`` — run only while that conf is true and the query has
  filters; it calls ``reader()``, then ``pushFilters()``, then ``partitions()``;
* ``pyspark.sql.worker.plan_data_source_read`` — every other read; it never calls ``pushFilters()``, and while
  the conf is false it fails the query (DATA_SOURCE_PUSHDOWN_DISABLED) if the reader overrides it.

So a reader gets ``pushFilters`` exactly when it will be asked to push filters: :func:`batch_reader` returns
:class:`RocketMQPushdownReader` in the pushdown planner and :class:`RocketMQBatchReader` everywhere else
(:func:`filter_pushdown_planner` tells which process this is from its imported modules).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from rocketstream.spark import positions
from rocketstream.spark.broker_view import BrokerView, open_views, queue_bounds
from rocketstream.spark.brokers import query_topics_and_brokers
from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.spark.options import RocketMQOptions
from rocketstream.spark.schema import Projection
from rocketstream.spark.tasks import ReadTask, plan_tasks, read_task

_INT64_MAX = (1 << 63) - 1


@dataclass
class PushedFilters:
    """Filters accepted from Spark, applied exactly (Spark never re-checks accepted filters)."""

    tags: frozenset[str] | None = None
    topics: frozenset[str] | None = None
    brokers: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    queue_id_range: tuple[int, int] = (0, _INT64_MAX)  # inclusive queueId bounds
    offset_range: tuple[int, int] = (0, _INT64_MAX)  # inclusive queueOffset bounds
    time_range_us: tuple[int, int] | None = None  # inclusive storeTimestamp bounds (µs since epoch)

    def accept(self, f: Filter) -> bool:
        """Record ``f`` if it can be applied exactly; False leaves it to Spark."""
        attribute: tuple[str, ...] = getattr(f, "attribute", ())  # every filter but Not has one column path
        column = attribute[0] if len(attribute) == 1 else None
        if column in ("tags", "topic", "brokerName", "queueId"):
            values = _equal_values(f, int if column == "queueId" else str)
            if values is None:
                return self._accept_queue_id_range(f) if column == "queueId" else False
            attr = {"tags": "tags", "topic": "topics", "brokerName": "brokers", "queueId": "queue_ids"}[column]
            old = getattr(self, attr)
            setattr(self, attr, values if old is None else old & values)
            return True
        if column == "queueOffset":
            bounds = _int_bounds(f)
            if bounds is None:
                return False
            self.offset_range = (max(self.offset_range[0], bounds[0]), min(self.offset_range[1], bounds[1]))
            return True
        if column == "storeTimestamp":
            bounds = _time_bounds(f)
            if bounds is None:
                return False
            old = self.time_range_us or (-_INT64_MAX, _INT64_MAX)
            self.time_range_us = (max(old[0], bounds[0]), min(old[1], bounds[1]))
            return True
        return False

    def _accept_queue_id_range(self, f: Filter) -> bool:
        bounds = _int_bounds(f)
        if bounds is None:
            return False
        self.queue_id_range = (max(self.queue_id_range[0], bounds[0]), min(self.queue_id_range[1], bounds[1]))
        return True

    def keeps_queue(self, q: QueueKey) -> bool:
        low, high = self.queue_id_range
        return ((self.topics is None or q.topic in self.topics)
                and (self.brokers is None or q.broker_name in self.brokers)
                and (self.queue_ids is None or q.queue_id in self.queue_ids)
                and low <= q.queue_id <= high)


def _equal_values(f: Filter, kind: type) -> frozenset[object] | None:
    if isinstance(f, EqualTo):
        values: Sequence[object] = (f.value,)
    elif isinstance(f, In):
        values = tuple(f.value)
    else:
        return None
    if not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
        return None
    return frozenset(values)


def _int_bounds(f: Filter) -> tuple[int, int] | None:
    value = getattr(f, "value", None)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return _comparison_bounds(f, value)


def _time_bounds(f: Filter) -> tuple[int, int] | None:
    value = getattr(f, "value", None)
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        # Spark sends filter literals as variants: TIMESTAMP arrives UTC-aware, TIMESTAMP_NTZ naive "as UTC".
        value = value.replace(tzinfo=timezone.utc)
    delta = value.astimezone(timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)
    us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return _comparison_bounds(f, us)


def _comparison_bounds(f: Filter, value: int) -> tuple[int, int] | None:
    """Inclusive [low, high] of an integer comparison filter; None for other filter kinds."""
    if isinstance(f, EqualTo):
        return value, value
    if isinstance(f, GreaterThan):
        return value + 1, _INT64_MAX
    if isinstance(f, GreaterThanOrEqual):
        return value, _INT64_MAX
    if isinstance(f, LessThan):
        return -_INT64_MAX, value - 1
    if isinstance(f, LessThanOrEqual):
        return -_INT64_MAX, value
    return None


class RocketMQBatchReader(DataSourceReader):
    """Batch reader without filter pushdown (what Spark may use while pushdown is disabled)."""

    def __init__(self, options: RocketMQOptions, projection: Projection) -> None:
        self.options = options
        self.projection = projection
        self.pushed = PushedFilters()

    def partitions(self) -> list[ReadTask]:
        o, pushed = self.options, self.pushed
        topics, brokers = query_topics_and_brokers(o)
        tags = _tag_set(o, pushed)
        if tags is not None and not tags:
            return []
        with open_views(brokers) as views:
            bounds = queue_bounds(views, topics)
            positions.require_queues(views, bounds, topics)
            starts = positions.starting_offsets(o, views, bounds)
            ends = positions.ending_offsets(o, views, bounds)
            for q in bounds:
                if ends[q] < starts[q]:
                    ends[q] = starts[q]  # nothing to read (an end before the start, e.g. by timestamp)
            keep = [q for q in bounds if pushed.keeps_queue(q)]
            starts = {q: max(starts[q], pushed.offset_range[0]) for q in keep}
            ends = {q: max(starts[q], min(ends[q], pushed.offset_range[1] + 1)) for q in keep}
            if pushed.time_range_us is not None:
                _narrow_by_time(views, pushed.time_range_us, starts, ends)
        return plan_tasks(o, brokers, starts, ends, self.projection, tags, pushed.time_range_us)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadTask):
            return iter(())  # Spark plans one InputPartition(None) when partitions() is empty
        return read_task(partition, self.projection)


def _narrow_by_time(views: Mapping[str, BrokerView], time_range_us: tuple[int, int], starts: dict[QueueKey, int],
                    ends: dict[QueueKey, int]) -> None:
    """Shrink ranges to the messages stored within the bounds (store timestamps are non-decreasing within
    a queue: one writer stamps records in append order); rows are still filtered exactly in read()."""
    low_us, high_us = time_range_us
    first_ms = -(-low_us // 1000)  # first whole millisecond >= low
    after_ms = high_us // 1000 + 1  # first whole millisecond > high
    for q in starts:
        if ends[q] <= starts[q]:
            continue
        if first_ms > 0:
            starts[q] = min(ends[q], max(starts[q], positions.search_lower(views, q, first_ms)))
        if 0 < after_ms < _INT64_MAX // 1000:
            ends[q] = max(starts[q], min(ends[q], positions.search_lower(views, q, after_ms)))


class RocketMQPushdownReader(RocketMQBatchReader):
    """Batch reader that takes tag, topic, brokerName, queueId, queueOffset and storeTimestamp filters."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            if not self.pushed.accept(f):
                yield f


def _tag_set(options: RocketMQOptions, pushed: PushedFilters) -> frozenset[str] | None:
    sub = options.subscription
    tags = None if sub.sub_all else frozenset(sub.tags)
    if pushed.tags is not None:
        tags = pushed.tags if tags is None else tags & pushed.tags
    return tags


_PUSHDOWN_PLANNER = "pyspark.sql.worker.data_source_pushdown_filters"


def filter_pushdown_planner() -> bool:
    """Whether this process is PySpark's filter-pushdown planner (see module doc): Spark runs it only while
    ``spark.sql.python.filterPushdown.enabled`` is true, as a daemon-forked worker (module imported) or,
    without the daemon, as ``python -m`` (the module is ``__main__``)."""
    if _PUSHDOWN_PLANNER in sys.modules:
        return True
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(main_spec, "name", None) == _PUSHDOWN_PLANNER


def batch_reader(options: RocketMQOptions, projection: Projection) -> RocketMQBatchReader:
    """The reader for ``DataSource.reader``: with ``pushFilters`` only where Spark will call it."""
    cls = RocketMQPushdownReader if filter_pushdown_planner() else RocketMQBatchReader
    return cls(options, projection)


__all__ = ["RocketMQBatchReader", "RocketMQPushdownReader", "batch_reader", "filter_pushdown_planner"]
