"""Driver-side store access for the Spark source: which queues exist, and where reading starts/ends.

Turns the symbolic positions of :class:`~rocketstream.spark.options.RocketMQOptions` (``earliest``,
``latest``, ``group``, JSON with -2/-1, timestamps) into queue offsets, and applies the data-loss
rules. Stores are opened read-only and closed after each call, so a long-running stream sees what a
live writer appended since (and pickled readers carry no open files).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from rocketstream.client.offset_ranges import EARLIEST, LATEST, QueueKey
from rocketstream.errors import DataLossError, OptionError
from rocketstream.spark import options as opt
from rocketstream.spark.options import RocketMQOptions

log = logging.getLogger(__name__)
Offsets = dict[QueueKey, int]


def resolve_broker_names(options: RocketMQOptions) -> tuple[tuple[str, str], ...]:
    """``(brokerName, store root)`` pairs. An unnamed ``load(path)`` store is called by conf/broker.conf's
    brokerName when it is the configured default store, else by its directory's name."""
    result = []
    for name, root in options.brokers:
        if not name:
            name = _default_broker_name(root)
        result.append((name, str(root)))
    return tuple(result)


def _default_broker_name(root: Path) -> str:
    from rocketstream.store import default_broker_name

    return default_broker_name(root)


@contextmanager
def open_stores(brokers: tuple[tuple[str, str], ...]) -> Iterator[dict[str, object]]:
    """brokerName -> read-only MessageStore, all closed on exit."""
    from rocketstream.store import MessageStore

    with ExitStack() as stack:
        stores = {}
        for name, root in brokers:
            store = MessageStore.open(root, read_only=True)
            stack.callback(store.close)
            stores[name] = store
        yield stores


@dataclass(frozen=True)
class QueueBounds:
    min: int
    max: int


def queue_bounds(stores: Mapping[str, object], topics: tuple[str, ...]) -> dict[QueueKey, QueueBounds]:
    """Every queue of ``topics`` on every broker, with its current [min, max) offsets."""
    bounds: dict[QueueKey, QueueBounds] = {}
    for broker, store in stores.items():
        for topic in topics:
            if topic not in store.topics():  # type: ignore[attr-defined]
                continue
            for qid in store.queue_ids(topic):  # type: ignore[attr-defined]
                q = QueueKey(topic, broker, qid)
                bounds[q] = QueueBounds(store.min_offset(topic, qid), store.max_offset(topic, qid))  # type: ignore[attr-defined]
    return dict(sorted(bounds.items()))


def starting_offsets(
    options: RocketMQOptions,
    stores: Mapping[str, object],
    bounds: Mapping[QueueKey, QueueBounds],
    *,
    default: str,
) -> Offsets:
    """First offset to read per queue, already checked against the queue's [min, max]."""
    spec = options.starting_offsets if options.starting_offsets is not None else default
    if options.starting_timestamp is not None:
        return {q: search_lower(stores, q, options.starting_timestamp) for q in bounds}
    if spec == opt.EARLIEST:
        return {q: b.min for q, b in bounds.items()}
    if spec == opt.LATEST:
        return {q: b.max for q, b in bounds.items()}
    if spec == opt.GROUP:
        return group_offsets(options, stores, bounds)
    assert isinstance(spec, dict)
    _check_known(spec, bounds, opt.STARTING_OFFSETS)
    wanted = {q: spec.get(q, EARLIEST) for q in bounds}
    resolved = {q: bounds[q].min if o == EARLIEST else bounds[q].max if o == LATEST else o for q, o in wanted.items()}
    return check_starts(resolved, bounds, options.fail_on_data_loss, origin=f"option '{opt.STARTING_OFFSETS}'")


def ending_offsets(
    options: RocketMQOptions, stores: Mapping[str, object], bounds: Mapping[QueueKey, QueueBounds]
) -> Offsets:
    """Exclusive end offset per queue for a batch query."""
    if options.ending_timestamp is not None:
        return {q: search_lower(stores, q, options.ending_timestamp) for q in bounds}
    spec = options.ending_offsets
    if spec is None or spec == opt.LATEST:
        return {q: b.max for q, b in bounds.items()}
    assert isinstance(spec, dict)
    _check_known(spec, bounds, opt.ENDING_OFFSETS)
    if any(o == EARLIEST for o in spec.values()):
        raise OptionError(opt.ENDING_OFFSETS, "-2 (earliest) is not a valid end; use an offset or -1 (latest)")
    ends = {q: bounds[q].max if spec.get(q, LATEST) == LATEST else spec[q] for q in bounds}
    for q, end in ends.items():
        if end > bounds[q].max:
            raise DataLossError(
                f"endingOffsets {end} of {q} is beyond the queue's max offset {bounds[q].max}",
                topic=q.topic, broker_name=q.broker_name, queue_id=q.queue_id, lost_from=bounds[q].max, lost_to=end,
            )
    return ends


def group_offsets(
    options: RocketMQOptions, stores: Mapping[str, object], bounds: Mapping[QueueKey, QueueBounds]
) -> Offsets:
    """The consumer group's committed offsets; for queues without one, consumeFromWhere (spec 8.8)."""
    committed = read_committed(options, bounds)
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
            result[q] = search_lower(stores, q, ts)
        else:
            # CONSUME_FROM_LAST_OFFSET: the broker answers 0 for a group with no offset on a queue that
            # still starts at 0 (spec 7.3), so a new group reads a young queue from the start.
            result[q] = 0 if b.min <= 0 else b.max
    return check_starts(result, bounds, options.fail_on_data_loss,
                        origin=f"committed offsets of consumer group '{options.consumer_group}'")


def require_queues(stores: Mapping[str, object], bounds: Mapping[QueueKey, QueueBounds], topics: tuple[str, ...]) -> None:
    """A read of topics no broker has is a typo far more often than a topic yet to be created."""
    if not bounds:
        known = sorted({t for s in stores.values() for t in s.topics()})  # type: ignore[attr-defined]
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


def offset_store(options: RocketMQOptions, *, read_only: bool = False):  # -> client OffsetStore
    """The group's offset store: broker tables (CLUSTERING) or the local offsets.json (BROADCASTING,
    where the broker never learns broadcast offsets)."""
    from rocketstream.client.offset_store import OffsetStore

    if options.broadcasting:
        client_id = options.client_id or f"{_local_ip()}@DEFAULT"  # a broadcasting client's usual directory
        return OffsetStore.broadcasting(client_id, options.offsets_store_dir, read_only=read_only)
    return OffsetStore.clustering(dict(resolve_broker_names(options)), read_only=read_only)


def read_committed(options: RocketMQOptions, queues) -> Offsets:
    """Committed offsets of the group per queue, -1 where it has none."""
    return offset_store(options, read_only=True).read(options.consumer_group, queues)


def commit_offsets(options: RocketMQOptions, offsets: Mapping[QueueKey, int]) -> None:
    """Write ``offsets`` for the group (one atomic rewrite per broker table)."""
    if offsets:
        offset_store(options).commit(options.consumer_group, offsets)


def _local_ip() -> str:
    import socket

    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def search_lower(stores: Mapping[str, object], q: QueueKey, timestamp_ms: int) -> int:
    # 5.x LOWER boundary: the first message stored at or after the timestamp (max when none is).
    return int(stores[q.broker_name].search_offset(q.topic, q.queue_id, timestamp_ms, "lower"))  # type: ignore[attr-defined]


def _check_known(spec: Mapping[QueueKey, int], bounds: Mapping[QueueKey, QueueBounds], option: str) -> None:
    unknown = [str(q) for q in spec if q not in bounds]
    if unknown:
        raise OptionError(option, f"names queues that do not exist: {', '.join(unknown)}")
