"""The one interface the Spark source plans and reads through: a :class:`BrokerView` over one broker's queues.

Planning (driver) asks a view for a topic's queues and their [min, max) offsets (one queue, or a whole
topic as arrays), the stored message sizes (``maxBytesPerTrigger``; one range or many at once), the offset
of a timestamp, and the consumer group's committed offsets, and commits offsets through it; reading
(executor) asks it for queue ranges as Arrow RecordBatches. The interface is closed: every method is
implemented by both views, and nothing in ``spark/`` asks which kind of view it holds. Which broker is
read, and how, stays behind it:

* local mode: :class:`~rocketstream.spark.local_view.LocalBrokerView` over the store directory
  (:class:`rocketstream.store.MessageStore`, opened read-only, batches straight from the mapped files);
* network mode: :class:`~rocketstream.spark.network.view.NetworkBrokerView` over a broker address,
  answering with RocketMQ's requests — GET_TOPIC_STATS_INFO, GET_MIN_OFFSET, GET_MAX_OFFSET,
  QUERY_CONSUME_QUEUE, SEARCH_OFFSET_BY_TIMESTAMP, PULL_MESSAGE, QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET.

A :class:`BrokerLocation` names a broker and opens a view on it; locations are small picklable values, so a
task carries its locations to the executor and opens views there (executors see no driver state). The
one place that knows the two modes is :func:`rocketstream.spark.brokers.broker_locations`, which builds
the locations from the options.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

import numpy as np

from rocketstream.errors import StoreError
from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.spark.offsets import QueueIndex, group_order

if TYPE_CHECKING:
    import pyarrow as pa


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

    def bounds_array(self, topic: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The topic's queue ids on this broker (ascending) and their min and max offsets, as int64 arrays of
        one length (empty when the broker has no queue of it)."""
        ...

    def message_sizes(self, topic: str, queue_id: int, start: int, end: int,
                      byte_cap: int | None = None) -> np.ndarray:
        """Stored size of each message ``[start, end)`` (the consume-queue unit's size field), as int64; with
        ``byte_cap`` the view may stop after the first message at which their running total exceeds it."""
        ...

    def message_sizes_many(self, asks: Sequence[tuple[str, int, int, int]],
                           byte_cap: int | None = None) -> list[np.ndarray]:
        """:meth:`message_sizes` of every ``(topic, queueId, start, end)`` of ``asks``, in that order."""
        ...

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First offset stored at or after ``timestamp_ms`` (``BoundaryType.LOWER``; max offset when none)."""
        ...

    def read_ranges(self, ranges: Sequence[tuple[str, int, int, int]], *, columns: Sequence[str],
                    tags: Collection[str] | None, check_crc: bool,
                    fail_on_data_loss: bool = True) -> Iterator[pa.RecordBatch]:
        """Messages of every range ``(topic, queueId, start, end)``, range after range, as RecordBatches with
        ``columns`` (MessageExt field names, in order) and ``brokerName`` this view's name; only messages
        whose tag is in ``tags`` when given; ``check_crc`` verifies every body's CRC (RocketMQ consumer's
        checkCRC). Messages of a range that retention removed since planning: a DataLossError naming them
        (``fail_on_data_loss``), or a logged skip past them."""
        ...

    def query_offsets(self, group: str, topic: str, queue_ids: Iterable[int]) -> dict[int, int]:
        """The group's committed (next) offset per queue, -1 where it has none (``readOffset(READ_FROM_STORE)``)."""
        ...

    def commit_session(self) -> object:
        """What offsets acknowledged by the broker stay acknowledged with: the same object (``is``) as long
        as nothing can have lost them (a network view: its connection). A view whose every commit must be
        complete answers a new object each time."""
        ...

    def commit_offsets(self, group: str, waves: Sequence[Mapping[str, Mapping[int, int]]]) -> None:
        """Store ``{topic: {queueId: next offset}}`` of every wave for the group, other entries kept; each
        wave is acknowledged before the next is sent (what to send, and in which waves, is
        :class:`~rocketstream.spark.commits.OffsetCommits`' call)."""
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
    the same (no key objects are made). Every view answers a topic at once (``bounds_array``)."""
    topics = tuple(topics)
    parts: list[tuple[str, str, np.ndarray, np.ndarray, np.ndarray]] = []
    for broker, view in views.items():
        for topic in topics:
            ids, low, high = view.bounds_array(topic)
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


__all__ = ["BrokerLocation", "BrokerView", "QueueBounds", "bounds_arrays",
           "open_views", "queue_bounds", "view_of"]
