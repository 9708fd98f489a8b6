"""The one interface the Spark source plans and reads through: a :class:`BrokerView` over one broker's queues.

Planning (driver) asks a view for a topic's queues, their [min, max) offsets, the stored message sizes
(``maxBytesPerTrigger``), the offset of a timestamp, and the consumer group's committed offsets; reading
(executor) asks it for a queue range as Arrow RecordBatches. Which broker is read, and how, stays behind
this interface:

* local mode: :class:`LocalBrokerView` over the store directory (:class:`rocketstream.store.MessageStore`,
  opened read-only, batches straight from the mapped files);
* network mode (next): a view over a broker address, answering with RocketMQ's requests — GET_MIN_OFFSET,
  GET_MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, PULL_MESSAGE, QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET.

A :class:`BrokerLocation` names a broker and opens a view on it; locations are small picklable values, so a
task carries its locations to the executor and opens views there (executors see no driver state).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

import numpy as np

from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.errors import OptionError, StoreError
from rocketstream.spark.offsets import QueueIndex, group_order

if TYPE_CHECKING:
    import pyarrow as pa

    from rocketstream.client.api import MQClientAPI
    from rocketstream.spark.offset_store import OffsetStore
    from rocketstream.store import MessageStore

T = TypeVar("T")


class BrokerView(Protocol):
    """Read access to one broker's queues, and to one consumer group's offsets on that broker.

    Offsets are queue offsets; ``max_offset`` is the next offset to be written (exclusive), as RocketMQ's
    ``ConsumeQueue.getMaxOffsetInQueue``. A view may hold files or connections: ``close()`` releases them.
    """

    @property
    def broker_name(self) -> str: ...

    def topics(self) -> Sequence[str]:
        """Every topic the broker knows (its topic config and its consume queues)."""
        ...

    def queue_ids(self, topic: str) -> Sequence[int]:
        """The topic's queue ids on this broker, ascending (empty when it has none)."""
        ...

    def min_offset(self, topic: str, queue_id: int) -> int: ...

    def max_offset(self, topic: str, queue_id: int) -> int: ...

    def message_sizes(self, topic: str, queue_id: int, start: int, end: int,
                      byte_cap: int | None = None) -> np.ndarray:
        """Stored size of each message ``[start, end)`` (the consume-queue unit's size field), as int64; with
        ``byte_cap`` the view may stop after the first message at which their running total exceeds it."""
        ...

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First offset stored at or after ``timestamp_ms`` (``BoundaryType.LOWER``; max offset when none)."""
        ...

    def read_range(self, topic: str, queue_id: int, start: int, end: int, *, columns: Sequence[str],
                   tags: Collection[str] | None, check_crc: bool) -> Iterator[pa.RecordBatch]:
        """Messages ``[start, end)`` as RecordBatches with ``columns`` (MessageExt field names, in order) and
        ``brokerName`` this view's name; only messages whose tag is in ``tags`` when given; ``check_crc``
        verifies every body's CRC (RocketMQ consumer's checkCRC)."""
        ...

    def query_offsets(self, group: str, topic: str, queue_ids: Iterable[int]) -> dict[int, int]:
        """The group's committed (next) offset per queue, -1 where it has none (``readOffset(READ_FROM_STORE)``)."""
        ...

    def commit_offsets(self, group: str, offsets: Mapping[str, Mapping[int, int]]) -> None:
        """Store ``{topic: {queueId: next offset}}`` for the group, other entries kept, in one update."""
        ...

    def close(self) -> None: ...

    # Optional, used when a view has it: ``bounds_array(topic) -> (queue ids, mins, maxes)`` for all of a
    # topic's queues at once, as int64 arrays (queue_bounds() asks each queue's min and max otherwise).


class BrokerLocation(Protocol):
    """Where a broker is, as a picklable value that travels in a task: ``open()`` gives its view."""

    @property
    def name(self) -> str: ...

    def open(self) -> BrokerView: ...


class QueueBounds(NamedTuple):
    """Current ``[min, max)`` offsets of one queue."""

    min: int
    max: int


class LocalBroker(NamedTuple):
    """A broker whose store directory this process can open (local mode)."""

    name: str
    root: str
    broker_addr: str | None = None  # option brokerAddr: the live broker serving this store, if any

    def open(self) -> LocalBrokerView:
        return LocalBrokerView(self.name, self.root, self.broker_addr)


class LocalBrokerView:
    """:class:`BrokerView` over a store directory: the store is opened read-only on first use (so offset
    reads and commits open no store files) and reread on every open, so a stream sees what a live writer
    appended since. Batches come from the mapped commit log without copies."""

    def __init__(self, broker_name: str, root: str, broker_addr: str | None = None) -> None:
        self._name = broker_name
        self.root = root
        self.broker_addr = broker_addr
        self._store: MessageStore | None = None

    @property
    def broker_name(self) -> str:
        return self._name

    @property
    def store(self) -> MessageStore:
        if self._store is None:
            from rocketstream.store import MessageStore

            self._store = MessageStore.open(self.root, read_only=True)
        return self._store

    def topics(self) -> list[str]:
        return self.store.topics()

    def queue_ids(self, topic: str) -> list[int]:
        return self.store.queue_ids(topic)

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.store.min_offset(topic, queue_id)

    def bounds_array(self, topic: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Queue ids of ``topic`` (ascending) and their min and max offsets, as int64 arrays: the store's
        topic config reread and every queue refreshed once (no listing of the other topics' queues)."""
        store = self.store
        if store.read_only:
            store.topic_config.load()
        ids = store.queue_ids(topic)
        pairs = store.queue_bounds(topic, ids)
        both = np.array(pairs, dtype=np.int64).reshape(len(ids), 2)
        return np.array(ids, dtype=np.int64), both[:, 0], both[:, 1]

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.store.max_offset(topic, queue_id)

    def message_sizes(self, topic: str, queue_id: int, start: int, end: int,
                      byte_cap: int | None = None) -> np.ndarray:
        return np.asarray(self.store.read_cq_units(topic, queue_id, start, end)["size"], dtype=np.int64)

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return int(self.store.search_offset(topic, queue_id, timestamp_ms, "lower"))

    def read_range(self, topic: str, queue_id: int, start: int, end: int, *, columns: Sequence[str],
                   tags: Collection[str] | None, check_crc: bool) -> Iterator[pa.RecordBatch]:
        return self.store.read_range(topic, queue_id, start, end, broker_name=self._name, columns=list(columns),
                                     tags=tags, check_crc=check_crc)

    def query_offsets(self, group: str, topic: str, queue_ids: Iterable[int]) -> dict[int, int]:
        addr = self._live_broker()
        if addr is not None:   # the broker's table in memory is the truth; its file lags up to 5 s
            ids = list(queue_ids)

            async def query(api: MQClientAPI) -> list[int | None]:
                return list(await asyncio.gather(*(api.query_offset(addr, group, topic, q) for q in ids)))

            answers = _with_broker(addr, query)
            return {q: -1 if o is None else o for q, o in zip(ids, answers, strict=True)}
        queues = [QueueKey(topic, self._name, qid) for qid in queue_ids]
        committed = self._offset_store(read_only=True).read(group, queues)
        return {q.queue_id: offset for q, offset in committed.items()}

    def commit_offsets(self, group: str, offsets: Mapping[str, Mapping[int, int]]) -> None:
        if not any(offsets.values()):
            return
        addr = self._live_broker()
        if addr is not None:
            async def update(api: MQClientAPI) -> None:
                await asyncio.gather(*(api.update_offset(addr, group, topic, qid, o, oneway=False)
                                       for topic, queues in offsets.items() for qid, o in queues.items()))

            _with_broker(addr, update)
            return
        # The broker's config/consumerOffset.json (ConsumerOffsetManager): one atomic rewrite for all topics.
        from rocketstream.store.meta.offsets import ConsumerOffsetManager

        ConsumerOffsetManager(self.root).commit_many({(group, topic): queues for topic, queues in offsets.items()})

    def _live_broker(self) -> str | None:
        """The address to commit through when another process (a broker) holds the store's ``lock``;
        None when none does. A live broker keeps offsets in memory and rewrites consumerOffset.json from
        them every 5 s, so a commit written to the file would be lost: without an address, refuse."""
        from rocketstream.store.files.lock import is_broker_process, lock_holder

        pid = lock_holder(Path(self.root))
        # a plain writer (rocketstream produce, a sink, a script) keeps no offsets in memory: file commits stand
        if pid is None or not is_broker_process(pid):
            return None
        if self.broker_addr:
            return self.broker_addr
        from rocketstream.store.meta.config import broker_conf_for

        conf = broker_conf_for(self.root)
        if conf is not None and conf.store_host is not None:
            return f"{conf.store_host.host}:{conf.store_host.port}"
        raise OptionError(
            "brokerAddr",
            f"process {pid} holds the lock of store {self.root}: a live broker serves it, and it keeps consumer "
            f"offsets in memory and overwrites config/consumerOffset.json every 5 s, so consumerGroup offsets "
            f"cannot be committed to the file. Set option 'brokerAddr' to that broker's host:port (its "
            f"listenPort) to commit through it, read over the network with option 'nameServer', or stop the "
            f"broker")

    def _offset_store(self, *, read_only: bool) -> OffsetStore:
        # The broker's config/consumerOffset.json (ConsumerOffsetManager), one atomic rewrite per commit.
        from rocketstream.spark.offset_store import OffsetStore

        return OffsetStore.clustering({self._name: self.root}, read_only=read_only)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def __repr__(self) -> str:
        return f"LocalBrokerView({self._name!r}, {self.root!r})"


def _with_broker(addr: str, work: Callable[[MQClientAPI], Awaitable[T]]) -> T:
    """Run ``work`` with a client connected to the broker at ``addr`` (planning calls are synchronous)."""
    from rocketstream.client.api import MQClientAPI

    async def run() -> T:
        api = MQClientAPI(addr)   # no name server is asked: every request names the broker
        try:
            return await work(api)
        finally:
            await api.close()

    return asyncio.run(run())


@contextmanager
def open_views(brokers: Iterable[BrokerLocation]) -> Iterator[dict[str, BrokerView]]:
    """brokerName -> view, all closed on exit."""
    with ExitStack() as stack:
        views: dict[str, BrokerView] = {}
        for location in brokers:
            view = location.open()
            stack.callback(view.close)
            views[location.name] = view
        yield views


def view_of(views: Mapping[str, BrokerView], broker_name: str) -> BrokerView:
    """The view of ``broker_name``; a broker the query was not given is an error naming the known ones."""
    try:
        return views[broker_name]
    except KeyError:
        known = ", ".join(sorted(views))
        raise StoreError(f"no store root known for broker {broker_name!r} (known: {known})") from None


def bounds_arrays(views: Mapping[str, BrokerView], topics: Iterable[str],
                  previous: QueueIndex | None = None) -> tuple[QueueIndex, np.ndarray, np.ndarray]:
    """:func:`queue_bounds` as arrays: the queues' index and their min and max offsets in its order. A
    planner asking every trigger passes the index it got last time; it is reused while the queues stay
    the same (no key objects are made). Views with ``bounds_array(topic)`` answer a topic at once."""
    topics = tuple(topics)
    parts: list[tuple[str, str, np.ndarray, np.ndarray, np.ndarray]] = []
    for broker, view in views.items():
        arrays = getattr(view, "bounds_array", None)
        if arrays is None:
            for q, b in _bounds_one_by_one(broker, view, topics).items():
                parts.append((q.topic, broker, np.array([q.queue_id]), np.array([b.min]), np.array([b.max])))
            continue
        for topic in topics:
            ids, low, high = arrays(topic)
            if len(ids):
                parts.append((topic, broker, ids, low, high))
    merged: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for topic, broker, ids, low, high in parts:
        merged.setdefault((topic, broker), []).append((ids, low, high))
    groups = []
    for (topic, broker), pieces in sorted(merged.items(), key=lambda kv: group_order(*kv[0])):
        ids, low, high = (np.concatenate([p[i] for p in pieces]).astype(np.int64) for i in range(3))
        order = np.argsort(ids, kind="stable")
        groups.append((topic, broker, ids[order], low[order], high[order]))
    layout = tuple((t, b, tuple(ids.tolist())) for t, b, ids, _, _ in groups)
    index = previous if previous is not None and previous.layout == layout else QueueIndex(layout)
    if not groups:
        return index, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return index, np.concatenate([g[3] for g in groups]), np.concatenate([g[4] for g in groups])


def queue_bounds(views: Mapping[str, BrokerView], topics: Iterable[str]) -> dict[QueueKey, QueueBounds]:
    """Every queue of ``topics`` on every broker, with its current [min, max) offsets, in queue order."""
    index, low, high = bounds_arrays(views, topics)
    return {q: QueueBounds(lo, hi) for q, lo, hi in zip(index.keys, low.tolist(), high.tolist(), strict=True)}


def _bounds_one_by_one(broker: str, view: BrokerView, topics: tuple[str, ...]) -> dict[QueueKey, QueueBounds]:
    """A view without ``bounds_array``: each queue's min and max asked on its own."""
    bounds: dict[QueueKey, QueueBounds] = {}
    known = set(view.topics())
    for topic in topics:
        if topic in known:
            for qid in view.queue_ids(topic):
                bounds[QueueKey(topic, broker, qid)] = QueueBounds(view.min_offset(topic, qid),
                                                                   view.max_offset(topic, qid))
    return bounds


__all__ = ["BrokerLocation", "BrokerView", "LocalBroker", "LocalBrokerView", "QueueBounds", "bounds_arrays",
           "open_views", "queue_bounds", "view_of"]
