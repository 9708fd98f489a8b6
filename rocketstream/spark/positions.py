"""Where reading starts and ends: symbolic positions resolved into queue offsets through broker views.

Turns the typed positions of :class:`~rocketstream.spark.options.RocketMQOptions` (earliest, latest,
group, specific offsets with -2/-1, timestamps) into offsets per queue, and applies the data-loss rules.
Everything about a broker goes through a :class:`~rocketstream.spark.broker_view.BrokerView`, opened per
planning call and closed after it, so a long-running stream sees what a live writer appended since (and
pickled readers carry no open files).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from rocketstream.errors import DataLossError, OptionError
from rocketstream.spark import options as opt
from rocketstream.spark.broker_view import BrokerView, QueueBounds, open_views, queue_bounds, view_of
from rocketstream.spark.offset_ranges import EARLIEST as EARLIEST_OFFSET
from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.spark.offsets import (
    EARLIEST,
    GROUP,
    LATEST,
    AtTimestamp,
    SpecificOffsets,
    TimestampsPerQueue,
)
from rocketstream.spark.options import RocketMQOptions

if TYPE_CHECKING:
    from rocketstream.spark.offset_store import OffsetStore

log = logging.getLogger(__name__)
Offsets = dict[QueueKey, int]
Views = Mapping[str, BrokerView]


def starting_offsets(options: RocketMQOptions, views: Views, bounds: Mapping[QueueKey, QueueBounds]) -> Offsets:
    """First offset to read per queue, already checked against the queue's [min, max]."""
    start = options.starting
    if isinstance(start, AtTimestamp):
        return timestamp_starts(options, views, bounds, dict.fromkeys(bounds, start.timestamp_ms),
                                opt.STARTING_TIMESTAMP)
    if isinstance(start, TimestampsPerQueue):
        _check_known(start.timestamps, bounds, opt.STARTING_OFFSETS_BY_TIMESTAMP)
        named = {q: start.timestamps[q] for q in bounds if q in start.timestamps}
        found = timestamp_starts(options, views, bounds, named, opt.STARTING_OFFSETS_BY_TIMESTAMP)
        return {q: found.get(q, b.min) for q, b in bounds.items()}  # queues left out: earliest
    if start is EARLIEST:
        return {q: b.min for q, b in bounds.items()}
    if start is LATEST:
        return {q: b.max for q, b in bounds.items()}
    if start is GROUP:
        return group_offsets(options, views, bounds)
    assert isinstance(start, SpecificOffsets)  # the last kind of StartPosition
    _check_known(start.offsets, bounds, opt.STARTING_OFFSETS)
    resolved = {q: start.resolve(q, b.min, b.max, default=EARLIEST_OFFSET) for q, b in bounds.items()}
    return check_starts(resolved, bounds, options.fail_on_data_loss, origin=f"option '{opt.STARTING_OFFSETS}'")


def ending_offsets(options: RocketMQOptions, views: Views, bounds: Mapping[QueueKey, QueueBounds]) -> Offsets:
    """Exclusive end offset per queue for a batch query."""
    end = options.ending
    if isinstance(end, AtTimestamp):
        return {q: search_lower(views, q, end.timestamp_ms) for q in bounds}
    if isinstance(end, TimestampsPerQueue):
        # the first message at or after the time is the exclusive end; none: the queue's max (latest)
        _check_known(end.timestamps, bounds, opt.ENDING_OFFSETS_BY_TIMESTAMP)
        return {q: search_lower(views, q, end.timestamps[q]) if q in end.timestamps else b.max
                for q, b in bounds.items()}
    if end is LATEST:
        return {q: b.max for q, b in bounds.items()}
    _check_known(end.offsets, bounds, opt.ENDING_OFFSETS)
    if any(o == EARLIEST_OFFSET for o in end.offsets.values()):
        raise OptionError(opt.ENDING_OFFSETS, "-2 (earliest) is not a valid end; use an offset or -1 (latest)")
    ends = {q: end.resolve(q, b.min, b.max, default=-1) for q, b in bounds.items()}
    for q, stop in ends.items():
        if stop > bounds[q].max:
            raise DataLossError(
                f"endingOffsets {stop} of {q} is beyond the queue's max offset {bounds[q].max}",
                topic=q.topic, broker_name=q.broker_name, queue_id=q.queue_id, lost_from=bounds[q].max, lost_to=stop,
            )
    return ends


def timestamp_starts(options: RocketMQOptions, views: Views, bounds: Mapping[QueueKey, QueueBounds],
                     times: Mapping[QueueKey, int], option: str) -> Offsets:
    """The first offset stored at or after ``times[q]`` for every queue named; where no message is (the
    search answers the max offset of a queue holding messages), ``startingOffsetsByTimestampStrategy``
    decides: ``latest`` starts there, ``error`` is an OptionError naming the queue and the time (an empty
    queue has nothing to miss and starts at its max either way)."""
    found: Offsets = {}
    for q, ts in times.items():
        offset = search_lower(views, q, ts)
        b = bounds[q]
        if offset >= b.max and b.max > b.min and options.timestamp_strategy == opt.TIMESTAMP_STRATEGY_ERROR:
            raise OptionError(
                option, f"no message of topic {q.topic!r} on broker {q.broker_name!r} queue {q.queue_id} is stored "
                f"at or after {ts} ms (its messages end at offset {b.max}); set "
                f"{opt.STARTING_OFFSETS_BY_TIMESTAMP_STRATEGY}=latest to start there", ts)
        found[q] = offset
    return found


def group_offsets(options: RocketMQOptions, views: Views, bounds: Mapping[QueueKey, QueueBounds]) -> Offsets:
    """The consumer group's committed offsets; for queues without one, consumeFromWhere as RocketMQ's
    ``RebalancePushImpl.computePullFromWhereWithException`` decides it."""
    committed = read_committed(options, views, bounds)
    result: Offsets = {}
    for q, b in bounds.items():
        last = committed.get(q, -1)
        if last >= 0:
            result[q] = last
        elif options.consume_from_where == opt.CONSUME_FROM_FIRST_OFFSET:
            result[q] = b.min  # "0", corrected to min by the first pull's OFFSET_ILLEGAL answer
        elif options.consume_from_where == opt.CONSUME_FROM_TIMESTAMP:
            ts = options.consume_timestamp_ms
            if ts is None:
                ts = int(time.time() * 1000) - 30 * 60 * 1000  # client default: 30 minutes ago
            result[q] = search_lower(views, q, ts)
        else:
            # CONSUME_FROM_LAST_OFFSET: the broker answers 0 for a group with no offset on a queue that
            # still starts at 0 (ConsumerOffsetManager / PullMessageProcessor), so a new group reads a
            # young queue from the start.
            result[q] = 0 if b.min <= 0 else b.max
    return check_starts(result, bounds, options.fail_on_data_loss,
                        origin=f"committed offsets of consumer group '{options.consumer_group}'")


def require_queues(views: Views, bounds: Mapping[QueueKey, QueueBounds], topics: tuple[str, ...]) -> None:
    """A read of topics no broker has is a typo far more often than a topic yet to be created."""
    if not bounds:
        known = sorted({t for v in views.values() for t in v.topics()})
        raise OptionError(opt.TOPIC, f"no queue of {', '.join(topics)} in any broker; topics: {', '.join(known)}")


def check_starts(starts: Mapping[QueueKey, int], bounds: Mapping[QueueKey, QueueBounds], fail_on_data_loss: bool,
                 origin: str | None = None) -> Offsets:
    """Data-loss rules for start offsets: below min -> DataLossError (failOnDataLoss) or a logged skip to
    min; above max -> DataLossError always (the offsets were never written here). ``origin`` says where
    the offsets came from (an option, the group's table), for the message."""
    source = f"{origin}: " if origin else ""
    checked: Offsets = {}
    for q, start in starts.items():
        b = bounds[q]
        if start > b.max:
            raise DataLossError(
                f"{source}offset {start} of {q} is beyond the queue's max offset {b.max}: the offsets do not belong to "
                f"this store (a different or reset broker?)",
                topic=q.topic, broker_name=q.broker_name, queue_id=q.queue_id, lost_from=b.max, lost_to=start,
            )
        if start < b.min:
            message = (
                f"messages [{start}, {b.min}) of topic {q.topic!r} on broker {q.broker_name!r} queue {q.queue_id} "
                f"are gone (removed by retention)"
            )
            if fail_on_data_loss:
                raise DataLossError(
                    message + "; set failOnDataLoss=false to skip them",
                    topic=q.topic, broker_name=q.broker_name, queue_id=q.queue_id, lost_from=start, lost_to=b.min,
                )
            log.warning("%s; continuing at offset %d (failOnDataLoss=false)", message, b.min)
            start = b.min
        checked[q] = start
    return checked


def broadcast_store(options: RocketMQOptions, *, read_only: bool) -> OffsetStore:
    """BROADCASTING offsets live with the client (``<offsetsStoreDir>/<clientId>/<group>/offsets.json``,
    RocketMQ's LocalFileOffsetStore): the broker never learns them, in local and network mode alike."""
    from rocketstream.spark.offset_store import OffsetStore

    client_id = options.client_id or f"{_local_ip()}@DEFAULT"  # a broadcasting client's usual directory
    return OffsetStore.broadcasting(client_id, options.offsets_store_dir, read_only=read_only)


def read_committed(options: RocketMQOptions, views: Views, queues: Iterable[QueueKey]) -> Offsets:
    """Committed offsets of the group per queue (queue order), -1 where it has none. CLUSTERING: each
    broker's table, asked through its view; BROADCASTING: the client-side offsets.json."""
    queues = sorted(set(queues))
    if options.broadcasting:
        return dict(broadcast_store(options, read_only=True).read(options.consumer_group, queues))
    by_broker: dict[tuple[str, str], list[int]] = {}
    for q in queues:
        by_broker.setdefault((q.broker_name, q.topic), []).append(q.queue_id)
    committed: dict[QueueKey, int] = {}
    for (broker, topic), ids in by_broker.items():
        table = view_of(views, broker).query_offsets(options.consumer_group, topic, ids)
        committed.update({QueueKey(topic, broker, qid): table.get(qid, -1) for qid in ids})
    return {q: committed[q] for q in queues}


def _local_ip() -> str:
    import socket

    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def search_lower(views: Views, q: QueueKey, timestamp_ms: int) -> int:
    """5.x ``BoundaryType.LOWER``: the first message stored at or after the timestamp (max when none is)."""
    return view_of(views, q.broker_name).search_offset(q.topic, q.queue_id, timestamp_ms)


def _check_known(spec: Mapping[QueueKey, int], bounds: Mapping[QueueKey, QueueBounds], option: str) -> None:
    unknown = [str(q) for q in spec if q not in bounds]
    if unknown:
        raise OptionError(option, f"names queues that do not exist: {', '.join(unknown)}")


__all__ = ["QueueBounds", "check_starts", "ending_offsets", "group_offsets", "open_views", "queue_bounds",
           "read_committed", "require_queues", "search_lower", "starting_offsets", "timestamp_starts"]
