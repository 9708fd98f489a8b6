"""Micro-batch streaming: offsets, admission control, AvailableNow, and committing to the broker table.

Lifecycle (PySpark 4.3): ``initialOffset``, ``latestOffset``, ``partitions``, ``commit`` and
``reportLatestOffset`` run in one long-lived Python process per query; ``read`` runs in executors from
the pickled reader. Offsets are :class:`~rocketstream.spark.offsets.QueueOffsets` — in Spark's hands
``{topic: {brokerName: {queueId: next offset}}}`` with keys in a fixed order, because Spark compares
checkpointed offsets as JSON strings.

Committing: ``commit(end)`` lags one batch (Spark calls it while planning the next batch, and not at
all on ``query.stop()``). When ``latestOffset(start, ...)`` runs, every batch up to ``start`` has
completed, so ``start`` is committed there too; the last call of a query (AvailableNow's final
planning, or the trigger before a stop) then leaves the broker table equal to the checkpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from rocketstream.client.offset_ranges import QueueKey, rate_limit
from rocketstream.errors import DataLossError
from rocketstream.spark import positions
from rocketstream.spark.batch import ReadTask, plan_tasks, read_task
from rocketstream.spark.broker_view import (
    BrokerView,
    QueueBounds,
    queue_bounds,
)
from rocketstream.spark.offsets import OffsetJson, QueueOffsets
from rocketstream.spark.options import RocketMQOptions
from rocketstream.spark.schema import Projection

log = logging.getLogger(__name__)
Offsets = dict[QueueKey, int]


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: RocketMQOptions, projection: Projection) -> None:
        self.options = options
        self.projection = projection
        self.brokers = positions.resolve_broker_names(options)
        self._initial: QueueOffsets | None = None
        self._target: Offsets | None = None  # AvailableNow: never read past these offsets
        self._last_trigger = time.monotonic()  # for maxTriggerDelay
        self._committed: QueueOffsets | None = None  # last offsets written to the group's offset store
        # Planning state kept between calls of one query (never pickled to executors): the brokers' views,
        # opened once (a local view rereads its queues on every call), and the bounds latestOffset saw
        # with the end it returned, which partitions(start, that end) reuses.
        self._open: dict[str, BrokerView] | None = None
        self._planned: tuple[QueueOffsets, dict[QueueKey, QueueBounds]] | None = None

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_open"] = None
        state["_planned"] = None
        return state

    @contextmanager
    def _views(self) -> Iterator[dict[str, BrokerView]]:
        """The query's broker views; closed (and reopened by the next call) when a call fails with them."""
        if self._open is None:
            with ExitStack() as stack:
                views: dict[str, BrokerView] = {}
                for location in self.brokers:
                    view = location.open()
                    stack.callback(view.close)
                    views[location.name] = view
                stack.pop_all()
            self._open = views
        try:
            yield self._open
        except BaseException:
            self._close_views()
            raise

    def _close_views(self) -> None:
        views, self._open, self._planned = self._open, None, None
        for view in (views or {}).values():
            try:
                view.close()
            except Exception:  # noqa: BLE001 - closing must not hide the error that got us here
                log.warning("closing %r failed", view, exc_info=True)

    # ---- offsets ------------------------------------------------------------------------------
    def initialOffset(self) -> OffsetJson:
        # Spark may call this twice; "latest" must not move between the calls.
        if self._initial is None:
            with self._views() as views:
                bounds = queue_bounds(views, self.options.topics)
                positions.require_queues(views, bounds, self.options.topics)
                self._initial = QueueOffsets(positions.starting_offsets(self.options, views, bounds))
        return self._initial.to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.options
        if o.min_messages_per_trigger is not None:
            return ReadMinRows(o.min_messages_per_trigger)
        if o.max_messages_per_trigger is not None:
            return ReadMaxRows(o.max_messages_per_trigger)
        if o.max_bytes_per_trigger is not None:
            return ReadMaxBytes(o.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with self._views() as views:
            self._target = {q: b.max for q, b in queue_bounds(views, self.options.topics).items()}

    def latestOffset(self, start: OffsetJson, limit: ReadLimit) -> OffsetJson:
        committed = _parse(start)
        self._commit(committed)  # every batch up to start has completed
        with self._views() as views:
            bounds = queue_bounds(views, self.options.topics)
            begin = self._checked_starts(committed, bounds)
            latest = {q: b.max for q, b in bounds.items()}
            if self._target is not None:
                latest = {q: min(m, self._target.get(q, begin[q])) for q, m in latest.items()}
            latest = {q: max(m, begin[q]) for q, m in latest.items()}
            end = self._admit(begin, latest, limit, views)
        self._planned = (QueueOffsets(end), bounds)
        if end != begin:
            self._last_trigger = time.monotonic()
        return QueueOffsets(end).to_dict()

    def _checked_starts(self, begin: Mapping[QueueKey, int], bounds: Mapping[QueueKey, QueueBounds]) -> Offsets:
        # New queues start at their min without alarm; known ones follow the data-loss rules.
        known = {q: o for q, o in begin.items() if q in bounds}
        checked = positions.check_starts(known, bounds, self.options.fail_on_data_loss)
        return {q: checked.get(q, bounds[q].min) for q in bounds}

    def _admit(self, begin: Offsets, latest: Offsets, limit: ReadLimit, views: Mapping[str, BrokerView]) -> Offsets:
        if isinstance(limit, ReadAllAvailable):
            return latest
        o = self.options
        min_rows = None
        if isinstance(limit, ReadMinRows):
            overdue = (time.monotonic() - self._last_trigger) * 1000 >= o.max_trigger_delay_ms
            min_rows = None if overdue else limit.min_rows
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else o.max_messages_per_trigger
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else o.max_bytes_per_trigger

        def sizes(q: QueueKey, a: int, b: int) -> np.ndarray:
            return views[q.broker_name].message_sizes(q.topic, q.queue_id, a, b)

        return rate_limit(begin, latest, max_messages=max_rows, max_bytes=max_bytes,
                          bytes_fn=sizes if max_bytes is not None else None, min_messages=min_rows)

    def reportLatestOffset(self) -> OffsetJson | None:
        # Spark asks right after latestOffset, for its progress report: the max offsets latestOffset saw
        # (as Spark's Kafka source reports its cached latestPartitionOffsets).
        if self._planned is not None:
            return QueueOffsets({q: b.max for q, b in self._planned[1].items()}).to_dict()
        with self._views() as views:
            bounds = queue_bounds(views, self.options.topics)
        return QueueOffsets({q: b.max for q, b in bounds.items()}).to_dict()

    # ---- batches ------------------------------------------------------------------------------
    def partitions(self, start: OffsetJson, end: OffsetJson) -> list[ReadTask]:
        begin, stop = _parse(start), _parse(end)
        if begin == stop:
            return []
        planned = self._planned
        with self._views() as views:
            if planned is not None and planned[0] == stop:
                bounds = planned[1]  # the same trigger: latestOffset just read them
            else:
                bounds = queue_bounds(views, self.options.topics)
            for q in stop:
                if q not in bounds:
                    raise DataLossError(
                        f"{q} of the planned batch no longer exists in the store",
                        topic=q.topic, broker_name=q.broker_name, queue_id=q.queue_id,
                    )
            known = {q: begin[q] for q in stop if q in begin}
            checked = positions.check_starts(known, bounds, self.options.fail_on_data_loss)
            starts = {q: checked.get(q, bounds[q].min) for q in stop}
        starts = {q: min(starts[q], stop[q]) for q in stop}  # retention may have passed the whole range
        sub = self.options.subscription
        tags = None if sub.sub_all else frozenset(sub.tags)
        return plan_tasks(self.options, self.brokers, starts, stop, self.projection, tags)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadTask):
            return iter(())
        return read_task(partition, self.projection)

    def commit(self, end: OffsetJson) -> None:
        self._commit(_parse(end))

    def _commit(self, offsets: QueueOffsets) -> None:
        # An idle stream plans a trigger every few milliseconds: rewrite the table only on change.
        if offsets != self._committed:
            with self._views() as views:
                positions.commit_offsets(self.options, views, offsets)
            self._committed = offsets

    def stop(self) -> None:
        self._close_views()


def _parse(offset: Mapping[str, object]) -> QueueOffsets:
    """An offset Spark hands back (the decoded checkpoint JSON)."""
    return QueueOffsets.from_dict(dict(offset), option="offset", allow_special=False)
