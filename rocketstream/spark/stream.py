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
from dataclasses import dataclass

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

from rocketstream.errors import DataLossError, RocketStreamError
from rocketstream.spark import positions
from rocketstream.spark.broker_view import BrokerView, QueueBounds, bounds_arrays, queue_bounds
from rocketstream.spark.brokers import (
    broker_locations,
    brokers_can_change,
    query_topics,
    query_topics_and_brokers,
    topics_can_change,
)
from rocketstream.spark.commits import OffsetCommits
from rocketstream.spark.group_presence import GroupPresence
from rocketstream.spark.offset_ranges import QueueKey, rate_limit
from rocketstream.spark.offsets import OffsetJson, QueueIndex, QueueOffsets
from rocketstream.spark.options import RocketMQOptions
from rocketstream.spark.schema import Projection
from rocketstream.spark.tasks import ReadTask, plan_tasks, read_task

log = logging.getLogger(__name__)
Offsets = dict[QueueKey, int]
_RECENT = 4  # offsets returned to Spark that a later call may hand back (start and end of a batch, initial)


@dataclass(frozen=True)
class _Trigger:
    """What ``latestOffset(start)`` planned, in the arrays of ``index``: ``partitions(start, end)`` and
    ``reportLatestOffset`` of the same trigger reuse it instead of asking the brokers again."""

    start: QueueOffsets
    end: QueueOffsets
    index: QueueIndex
    low: np.ndarray
    high: np.ndarray
    begin: np.ndarray  # start of every queue, checked against [low, high]

    def bounds(self) -> dict[QueueKey, QueueBounds]:
        return {q: QueueBounds(lo, hi) for q, lo, hi in zip(self.index.keys, self.low.tolist(), self.high.tolist(),
                                                            strict=True)}


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: RocketMQOptions, projection: Projection) -> None:
        self.options = options
        self.projection = projection
        # the topics read (a topicPattern's change) and the brokers holding them (network mode: they change)
        self.topics, self.brokers = query_topics_and_brokers(options)
        self._brokers_move = brokers_can_change(options)  # network mode: brokers join, leave, come back
        self._topics_move = topics_can_change(options)  # topicPattern: topics are created and deleted
        self._brokers_at = time.monotonic()  # when topics and brokers were last read (routeRefreshIntervalMs)
        self._initial: QueueOffsets | None = None
        self._target: Offsets | None = None  # AvailableNow: never read past these offsets
        self._last_trigger = time.monotonic()  # for maxTriggerDelay
        self._commits = OffsetCommits()  # what was written to the group's offset store (skips repeats)
        # Planning state kept between calls of one query (never pickled to executors): the brokers' views,
        # opened once (a local view rereads its queues on every call), and the bounds latestOffset saw
        # with the end it returned, which partitions(start, that end) reuses.
        self._open: dict[str, BrokerView] | None = None
        self._planned: _Trigger | None = None
        self._index: QueueIndex | None = None  # the queues latestOffset saw last (reused while unchanged)
        self._recent: list[QueueOffsets] = []  # offsets returned to Spark lately, recognised when handed back
        self._target_array: tuple[QueueIndex, np.ndarray] | None = None
        # network mode: the query heartbeats as a consumer of its group (rocketstream.spark.group_presence)
        self._presence: GroupPresence | None = None

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_open"] = None
        state["_planned"] = None
        state["_recent"] = []
        state["_target_array"] = None
        state["_commits"] = OffsetCommits()  # executors never commit; a connection does not pickle
        state["_presence"] = None  # the driver's planner heartbeats, never an executor
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
            self._keep_presence()
            with self._views() as views:
                bounds = queue_bounds(views, self.topics)
                positions.require_queues(views, bounds, self.topics)
                self._initial = QueueOffsets(positions.starting_offsets(self.options, views, bounds))
            self._remember(self._initial)
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
            self._target = {q: b.max for q, b in queue_bounds(views, self.topics).items()}
        self._target_array = None

    def _refresh_brokers(self) -> None:
        """Queues and brokers added to or removed from the topics' routes, and topics a ``topicPattern`` newly
        matches, are seen within ``routeRefreshIntervalMs`` (default 30 s, the client's
        ``pollNameServerInterval``, as ``MQClientInstance.updateTopicRouteInfoFromNameServer`` polls): the
        topics and locations are read again, and the views reopened when the locations changed. A failed
        lookup (the name server down) keeps planning with what is known: the brokers are still where they
        were, and a broker that is gone fails its own requests with a typed error."""
        now = time.monotonic()
        if not (self._brokers_move or self._topics_move) or \
                (now - self._brokers_at) * 1000 < self.options.route_refresh_interval_ms:
            return
        self._brokers_at = now
        try:
            if self._brokers_move:
                topics = query_topics(self.options)
                found = broker_locations(self.options, topics)
            else:   # local mode with a topicPattern: the stores' topics, through the open views
                with self._views() as views:
                    topics = query_topics(self.options, views)
                found = self.brokers
        except RocketStreamError as exc:
            log.warning("reading the topics and brokers of %s again failed, planning with the %d brokers known: %s",
                        ", ".join(self.topics), len(self.brokers), exc)
            return
        self._set_topics(topics)
        if found != self.brokers:
            log.info("the brokers of %s changed: %s -> %s", ", ".join(self.topics),
                     sorted(b.name for b in self.brokers), sorted(b.name for b in found))
            self._close_views()
            self.brokers = found

    def _set_topics(self, topics: tuple[str, ...]) -> None:
        if topics != self.topics:
            log.info("topicPattern %r now matches %s (was %s)", self.options.topic_pattern and
                     self.options.topic_pattern.pattern, ", ".join(topics), ", ".join(self.topics))
            self.topics = topics

    def latestOffset(self, start: OffsetJson, limit: ReadLimit) -> OffsetJson:
        committed = self._parse(start)
        self._refresh_brokers()
        self._commit(committed)  # every batch up to start has completed
        with self._views() as views:
            index, low, high = bounds_arrays(views, self.topics, self._index)
            self._index = index
            self._vanished(committed, index, views)
            begin = self._checked_begin(committed, index, low, high)
            latest = high
            if self._target is not None:
                latest = np.minimum(latest, self._target_in(index, begin))
            latest = np.maximum(latest, begin)
            if isinstance(limit, ReadAllAvailable):
                end_values = latest
            else:
                admitted = self._admit(index.mapping(begin), index.mapping(latest), limit, views)
                end_values = index.array(admitted, default=latest)
        end = QueueOffsets.of_array(index, end_values)
        away = {q: o for q, o in committed.items() if q.broker_name not in views} if self._brokers_move else {}
        if away:
            # a broker out of the routes (stopped, or restarting) keeps its queues' offsets: its messages
            # are read from there when it is back, none twice and none lost
            end = QueueOffsets({**end, **away})
        self._planned = _Trigger(committed, end, index, low, high, begin)
        if not np.array_equal(end_values, begin):
            self._last_trigger = time.monotonic()
        self._remember(end)
        return end.to_dict()

    def _vanished(self, committed: QueueOffsets, index: QueueIndex, views: Mapping[str, BrokerView]) -> None:
        """Queues of ``committed`` that a broker still in the routes no longer serves (its topic deleted, its
        readQueueNums lowered): failOnDataLoss=true is a DataLossError naming them; false drops them from
        the offsets, logged as a warning (the queue is then absent from the progress' endOffset)."""
        if committed.array_in(index) is not None:
            return   # the same queues as planned: the usual trigger
        positions_ = index.positions()
        gone = [q for q in committed if q not in positions_ and q.broker_name in views]
        if not gone:
            return
        names = ", ".join(f"topic {q.topic!r} on broker {q.broker_name!r} queue {q.queue_id}" for q in gone)
        if self.options.fail_on_data_loss:
            first = gone[0]
            raise DataLossError(
                f"{names} no longer in the routes (queue removed or topic deleted) at offset "
                f"{committed[first]}; set failOnDataLoss=false to drop it and go on",
                topic=first.topic, broker_name=first.broker_name, queue_id=first.queue_id)
        log.warning("%s no longer in the routes (queue removed or topic deleted); dropped from the query's offsets "
                    "(failOnDataLoss=false)", names)

    def _checked_begin(self, committed: QueueOffsets, index: QueueIndex, low: np.ndarray,
                       high: np.ndarray) -> np.ndarray:
        """Start of every queue of ``index``: the committed offset, checked against [min, max] (arrays
        when every queue is known and in range, the data-loss rules of :meth:`_checked_starts` otherwise)."""
        values = committed.array_in(index)
        if values is not None and bool(((values >= low) & (values <= high)).all()):
            return values
        bounds = {q: QueueBounds(lo, hi) for q, lo, hi in zip(index.keys, low.tolist(), high.tolist(), strict=True)}
        return index.array(self._checked_starts(committed, bounds))

    def _target_in(self, index: QueueIndex, begin: np.ndarray) -> np.ndarray:
        """AvailableNow's target in ``index`` order; queues it does not know stay at ``begin``."""
        assert self._target is not None
        cached = self._target_array
        if cached is None or cached[0] != index:
            known = index.array(self._target, default=-1)
            cached = self._target_array = (index, known)
        return np.where(cached[1] >= 0, cached[1], begin)

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

        def sizes(asks: list[tuple[QueueKey, int, int]], cap: int | None) -> list[np.ndarray]:
            by_broker: dict[str, list[int]] = {}
            for i, (q, _, _) in enumerate(asks):
                by_broker.setdefault(q.broker_name, []).append(i)
            found: list[np.ndarray] = [np.zeros(0, np.int64)] * len(asks)
            for broker, rows in by_broker.items():
                ranges = [(asks[i][0].topic, asks[i][0].queue_id, asks[i][1], asks[i][2]) for i in rows]
                for i, got in zip(rows, views[broker].message_sizes_many(ranges, cap), strict=True):
                    found[i] = got
            return found

        # Sizes are read only up to max_bytes per queue (rate_limit's byte_cap: a queue's backlog counts as at
        # most the limit, so both modes cut the same batches), every queue of a broker at once (a network
        # view has their QUERY_CONSUME_QUEUE requests in flight together; a local view reads its consume queue).
        try:
            return rate_limit(begin, latest, max_messages=max_rows, max_bytes=max_bytes, min_messages=min_rows,
                              byte_cap=max_bytes, bytes_many=sizes if max_bytes is not None else None)
        except DataLossError as exc:
            # Retention removed messages between planning and sizing (network mode): failOnDataLoss=false
            # skips this trigger, and the next one starts those queues at their new min (logged there).
            if o.fail_on_data_loss:
                raise
            log.warning("no batch this trigger: %s", exc)
            return dict(begin)

    def reportLatestOffset(self) -> OffsetJson | None:
        # Spark asks right after latestOffset, for its progress report: the max offsets latestOffset saw
        # (as Spark's Kafka source reports its cached latestPartitionOffsets).
        if self._planned is not None:
            return self._planned.index.to_dict(self._planned.high)
        with self._views() as views:
            bounds = queue_bounds(views, self.topics)
        return QueueOffsets({q: b.max for q, b in bounds.items()}).to_dict()

    # ---- batches ------------------------------------------------------------------------------
    def partitions(self, start: OffsetJson, end: OffsetJson) -> list[ReadTask]:
        begin, stop = self._parse(start), self._parse(end)
        if begin == stop:
            return []
        sub = self.options.subscription
        tags = None if sub.sub_all else frozenset(sub.tags)
        planned = self._planned
        if planned is not None and planned.end == stop and planned.start == begin:
            # The batch latestOffset just planned: its checked starts and bounds stand; only the queues
            # with messages to read become key objects.
            stop_values = planned.end.array_in(planned.index)
            if stop_values is None:   # the end also carries the queues of brokers out of the routes
                stop_values = planned.index.array(planned.end)
            first = np.minimum(planned.begin, stop_values)
            busy = np.flatnonzero(stop_values > first)
            keys = [planned.index.keys[i] for i in busy.tolist()]
            with self._views() as views:
                return plan_tasks(self.options, self.brokers, dict(zip(keys, first[busy].tolist(), strict=True)),
                                  dict(zip(keys, stop_values[busy].tolist(), strict=True)), self.projection, tags,
                                  views=views)
        with self._views() as views:
            if planned is not None and planned.end == stop:
                bounds = planned.bounds()  # the same trigger: latestOffset just read them
            else:
                bounds = queue_bounds(views, self.topics)
            # queues of a broker out of the routes are carried at their offsets: nothing of them is read
            reading = {q: o for q, o in stop.items() if q in bounds or begin.get(q) != o}
            for q in reading:
                if q not in bounds:
                    raise DataLossError(
                        f"{q} of the planned batch no longer exists in the store",
                        topic=q.topic, broker_name=q.broker_name, queue_id=q.queue_id,
                    )
            known = {q: begin[q] for q in reading if q in begin}
            checked = positions.check_starts(known, bounds, self.options.fail_on_data_loss)
            starts = {q: checked.get(q, bounds[q].min) for q in reading}
            starts = {q: min(starts[q], reading[q]) for q in reading}  # retention may have passed the range
            return plan_tasks(self.options, self.brokers, starts, reading, self.projection, tags, views=views)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadTask):
            return iter(())
        return read_task(partition, self.projection)

    def commit(self, end: OffsetJson) -> None:
        self._commit(_parse(end))

    def _parse(self, offset: Mapping[str, object]) -> QueueOffsets:
        """An offset Spark hands back: one this reader returned lately is recognised by a dict comparison
        (no parsing, and it keeps its arrays); anything else is parsed and checked."""
        for known in self._recent:
            if known.matches(offset):
                return known
        return _parse(offset)

    def _remember(self, offsets: QueueOffsets) -> None:
        self._recent = [offsets, *self._recent[:_RECENT - 1]]

    def _keep_presence(self) -> None:
        """Network mode: the query is a consumer of its group on the brokers of its routes before it commits
        (a 5.x broker takes offsets only of a group it knows); heartbeats go on while it runs."""
        if self.options.name_server is None:
            return
        if self._presence is None:
            self._presence = GroupPresence(self.options)
        self._presence.keep(self.brokers, self.topics)

    def _commit(self, offsets: QueueOffsets) -> None:
        self._keep_presence()
        # An idle stream plans a trigger every few milliseconds: OffsetCommits sends only what changed.
        with self._views() as views:
            self._commits.commit(self.options, views, offsets, absent_ok=self._brokers_move)

    def stop(self) -> None:
        presence, self._presence = self._presence, None
        try:
            self._close_views()
        finally:
            if presence is not None:
                presence.close()


def _parse(offset: Mapping[str, object]) -> QueueOffsets:
    """An offset Spark hands back (the decoded checkpoint JSON)."""
    return QueueOffsets.from_dict(dict(offset), option="offset", allow_special=False)
