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

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from rocketstream.client.offset_ranges import QueueKey
from rocketstream.errors import StoreError

if TYPE_CHECKING:
    import pyarrow as pa

    from rocketstream.spark.offset_store import OffsetStore
    from rocketstream.store import MessageStore


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

    def message_sizes(self, topic: str, queue_id: int, start: int, end: int) -> np.ndarray:
        """Stored size of each message ``[start, end)`` (the consume-queue unit's size field), as int64."""
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

    def open(self) -> LocalBrokerView:
        return LocalBrokerView(self.name, self.root)


class LocalBrokerView:
    """:class:`BrokerView` over a store directory: the store is opened read-only on first use (so offset
    reads and commits open no store files) and reread on every open, so a stream sees what a live writer
    appended since. Batches come from the mapped commit log without copies."""

    def __init__(self, broker_name: str, root: str) -> None:
        self._name = broker_name
        self.root = root
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

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.store.max_offset(topic, queue_id)

    def message_sizes(self, topic: str, queue_id: int, start: int, end: int) -> np.ndarray:
        return np.asarray(self.store.read_cq_units(topic, queue_id, start, end)["size"], dtype=np.int64)

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return int(self.store.search_offset(topic, queue_id, timestamp_ms, "lower"))

    def read_range(self, topic: str, queue_id: int, start: int, end: int, *, columns: Sequence[str],
                   tags: Collection[str] | None, check_crc: bool) -> Iterator[pa.RecordBatch]:
        return self.store.read_range(topic, queue_id, start, end, broker_name=self._name, columns=list(columns),
                                     tags=tags, check_crc=check_crc)

    def query_offsets(self, group: str, topic: str, queue_ids: Iterable[int]) -> dict[int, int]:
        queues = [QueueKey(topic, self._name, qid) for qid in queue_ids]
        committed = self._offset_store(read_only=True).read(group, queues)
        return {q.queue_id: offset for q, offset in committed.items()}

    def commit_offsets(self, group: str, offsets: Mapping[str, Mapping[int, int]]) -> None:
        flat = {QueueKey(topic, self._name, qid): o for topic, queues in offsets.items() for qid, o in queues.items()}
        if flat:
            self._offset_store(read_only=False).commit(group, flat)

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


def queue_bounds(views: Mapping[str, BrokerView], topics: Iterable[str]) -> dict[QueueKey, QueueBounds]:
    """Every queue of ``topics`` on every broker, with its current [min, max) offsets, in queue order."""
    topics = tuple(topics)
    bounds: dict[QueueKey, QueueBounds] = {}
    for broker, view in views.items():
        known = set(view.topics())
        for topic in topics:
            if topic not in known:
                continue
            many = getattr(view, "queue_bounds", None)  # a network view asks for all queues at once
            if many is not None:
                for qid, b in many(topic, view.queue_ids(topic)).items():
                    bounds[QueueKey(topic, broker, qid)] = b
                continue
            for qid in view.queue_ids(topic):
                bounds[QueueKey(topic, broker, qid)] = QueueBounds(view.min_offset(topic, qid),
                                                                   view.max_offset(topic, qid))
    return dict(sorted(bounds.items()))


__all__ = ["BrokerLocation", "BrokerView", "LocalBroker", "LocalBrokerView", "QueueBounds", "open_views",
           "queue_bounds", "view_of"]
