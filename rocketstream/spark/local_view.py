"""Local mode: a :class:`~rocketstream.spark.broker_view.BrokerView` over a store directory this process can
open (ours, or a copy of a real broker's store), zero copy; offsets in the store's consumerOffset.json, or
through the live broker serving the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import numpy as np

from rocketstream.errors import BrokerResponseError, CorruptStoreError, OptionError
from rocketstream.remoting.codes import ResponseCode
from rocketstream.spark.broker_view import QueueBounds
from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.spark.positions import check_starts

if TYPE_CHECKING:
    import pyarrow as pa

    from rocketstream.client.api import MQClientAPI
    from rocketstream.spark.offset_store import OffsetStore
    from rocketstream.store import MessageStore
    from rocketstream.store.files.consume_queue import ConsumeQueue
    from rocketstream.store.read.bulk_read import RangeUnits

T = TypeVar("T")

# Units a task reads at once (``read_ranges``): 20 MiB of consume-queue units in memory, whatever the task's size
UNITS_PER_READ = 1 << 20
# A planner sums the sizes of a range of at most this many units of a queue it has not loaded from a positional
# read of them (``range_bytes``); a longer one loads the queue (its sum samples units beyond EXACT_UNITS)
PREAD_PLAN_UNITS = 1 << 16


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
        self._bounds_asked: set[str] = set()   # topics bounds_array answered once (a stream asks again)

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
        topic config reread and every queue refreshed once (no listing of the other topics' queues). The
        first time a view is asked about a topic (a batch query's planner asks once) its queues are peeked
        at, not loaded (``MessageStore.queue_bounds(load=False)``); from the second time (a stream's next
        trigger) they are loaded and then only refreshed."""
        store = self.store
        if store.read_only:
            store.topic_config.load()
        ids = store.queue_ids(topic)
        pairs = store.queue_bounds(topic, ids, load=topic in self._bounds_asked)
        self._bounds_asked.add(topic)
        both = np.array(pairs, dtype=np.int64).reshape(len(ids), 2)
        return np.array(ids, dtype=np.int64), both[:, 0], both[:, 1]

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.store.max_offset(topic, queue_id)

    def message_sizes(self, topic: str, queue_id: int, start: int, end: int,
                      byte_cap: int | None = None) -> np.ndarray:
        """Every size of the range (a read of the consume queue; ``byte_cap`` needs no prefix here)."""
        return np.asarray(self.store.read_cq_units(topic, queue_id, start, end)["size"], dtype=np.int64)

    def message_sizes_many(self, asks: Sequence[tuple[str, int, int, int]],
                           byte_cap: int | None = None) -> list[np.ndarray]:
        return [self.message_sizes(topic, qid, start, end, byte_cap) for topic, qid, start, end in asks]

    def range_bytes(self, topic: str, ranges: Sequence[tuple[int, int, int]],
                    tags_codes: np.ndarray | None = None) -> list[int]:
        """Stored bytes of each ``(queueId, start, end)`` (of the messages whose tagsCode may match
        ``tags_codes``), summed from the consume queue's unit sizes (``store.read.range_bytes``); queues the
        planner just refreshed are not refreshed again."""
        from rocketstream.store.read.range_bytes import queue_range_bytes, units_bytes

        store = self.store
        out: list[int | None] = [None] * len(ranges)
        if store.read_only:   # short ranges of queues not loaded (peeked at by bounds_array): their units read
            cl_min = store.commit_log.min_offset()
            for i, (q, start, end) in enumerate(ranges):
                if end <= start:
                    out[i] = 0
                elif not store.queue_loaded(topic, q):
                    units = store.peeked_units(topic, q, start, end)
                    if units is None and end - start <= PREAD_PLAN_UNITS:
                        units = store.units_at(topic, q, start, end, cl_min)
                    out[i] = None if units is None else units_bytes(units, tags_codes)
        ids = list(dict.fromkeys(q for (q, _, _), b in zip(ranges, out, strict=True) if b is None))
        queues = dict(zip(ids, store.queues_for_read(topic, ids, refresh=False), strict=True))
        return [b if b is not None else 0 if queues[q] is None else
                queue_range_bytes(queues[q], start, end, tags_codes)  # type: ignore[arg-type]
                for (q, start, end), b in zip(ranges, out, strict=True)]

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return int(self.store.search_offset(topic, queue_id, timestamp_ms, "lower"))

    def read_ranges(self, ranges: Sequence[tuple[str, int, int, int]], *, columns: Sequence[str],
                    tags: Collection[str] | None, check_crc: bool,
                    fail_on_data_loss: bool = True) -> Iterator[pa.RecordBatch]:
        """The ranges' rows, in their order, read together (``bulk_read.read_ranges_batches``: batches cross
        range boundaries) in runs of about :data:`UNITS_PER_READ` units. A range's units are read where they
        are (``MessageStore.units_at``: a positional read, the queue neither listed nor mapped) when every one
        is a message to return; otherwise (retention passed the range's start, a file is missing or damaged)
        the queue is opened (``queues_for_read``, each queue once) and its min, max and data-loss rule decide,
        as they do at planning."""
        from rocketstream.store.read.bulk_read import RangeUnits, read_ranges_batches

        store = self.store
        queues: dict[tuple[str, int], ConsumeQueue | None] = {}
        cl_min = store.commit_log.min_offset()
        run: list[RangeUnits] = []
        units_in_run = 0
        for topic, queue_id, start, end in ranges:
            at = start
            while at < end:
                stop = min(end, at + UNITS_PER_READ)
                units = store.units_at(topic, queue_id, at, stop, cl_min)
                if units is not None:
                    run.append(RangeUnits(topic, queue_id, at, units, self._rereader(topic, queue_id, queues)))
                else:
                    piece = self._opened_units(topic, queue_id, at, end, fail_on_data_loss, queues)
                    stop = end
                    if piece is None:
                        break
                    run.append(piece)
                units_in_run += len(run[-1].units)
                at = stop
                if units_in_run >= UNITS_PER_READ:
                    yield from read_ranges_batches(store.commit_log, run, broker_name=self._name, columns=columns,
                                                   tags=tags, check_crc=check_crc)
                    run, units_in_run = [], 0
        if run:
            yield from read_ranges_batches(store.commit_log, run, broker_name=self._name, columns=columns,
                                           tags=tags, check_crc=check_crc)

    def _opened(self, topic: str, queue_id: int,
                queues: dict[tuple[str, int], ConsumeQueue | None]) -> ConsumeQueue | None:
        key = (topic, queue_id)
        if key not in queues:
            queues[key] = self.store.queues_for_read(topic, [queue_id])[0]
        return queues[key]

    def _rereader(self, topic: str, queue_id: int,
                  queues: dict[tuple[str, int], ConsumeQueue | None]) -> Callable[[int, int], np.ndarray]:
        """``RangeUnits.reread`` for units read positionally: read them again from the opened queue."""
        def reread(start: int, end: int) -> np.ndarray:
            cq = self._opened(topic, queue_id, queues)
            if cq is None:
                raise CorruptStoreError(f"consume queue {topic}/{queue_id} is gone while its units were read",
                                        path=self.store.root / "consumequeue" / topic / str(queue_id))
            return cq.raw_units(start, end)

        return reread

    def _opened_units(self, topic: str, queue_id: int, start: int, end: int, fail_on_data_loss: bool,
                      queues: dict[tuple[str, int], ConsumeQueue | None]) -> RangeUnits | None:
        """Units [start, end) from the opened queue, after the data-loss rule (None: nothing to read)."""
        from rocketstream.store.read.bulk_read import RangeUnits

        cq = self._opened(topic, queue_id, queues)
        if cq is None:
            return None   # no directory: a queue with nothing (its bounds are 0, 0)
        start = self._surviving_start(topic, queue_id, start, end, fail_on_data_loss, cq)
        if start >= end:
            return None
        # bulk_read checks every unit it reads against the header it decodes (a batch that disagrees
        # is read again from the queue before that is an error)
        first, units = cq.clamped_units(start, end)
        if not len(units):
            return None
        return RangeUnits(topic, queue_id, first, units, cq.raw_units)

    def _surviving_start(self, topic: str, queue_id: int, start: int, end: int, fail_on_data_loss: bool,
                         cq: ConsumeQueue) -> int:
        """Retention may delete files between a batch's planning and its task: the planner's data-loss rule
        (DataLossError naming the range, or a logged skip to the queue's new min) applies here again."""
        low = cq.min_offset()
        if start >= low:
            return start
        q = QueueKey(topic, self._name, queue_id)
        bounds = {q: QueueBounds(low, max(low, end, cq.max_offset()))}
        return min(check_starts({q: start}, bounds, fail_on_data_loss)[q], end)

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

    def commit_session(self) -> object:
        """A new object every time: each commit is complete (a file rewrite, or a short connection to the
        live broker that no later commit shares)."""
        return object()

    def commit_offsets(self, group: str, waves: Sequence[Mapping[str, Mapping[int, int]]]) -> None:
        if not any(queues for wave in waves for queues in wave.values()):
            return
        addr = self._live_broker()
        if addr is not None:
            async def update(api: MQClientAPI) -> None:
                for wave in waves:
                    await asyncio.gather(*(api.update_offset(addr, group, topic, qid, o, oneway=False)
                                           for topic, queues in wave.items() for qid, o in queues.items()))

            async def join_then_update(api: MQClientAPI) -> None:
                await api.heartbeat(addr, _heartbeat_of(group, sorted({t for wave in waves for t in wave})))
                await update(api)

            try:
                _with_broker(addr, update)
            except BrokerResponseError as exc:
                # a 5.x broker takes offsets only of a group it knows (ConsumerManageProcessor
                # .updateConsumerOffset: SUBSCRIPTION_GROUP_NOT_EXIST); a consumer's HEART_BEAT makes it known
                # (autoCreateSubscriptionGroup), as network mode's GroupPresence does. Commits are absolute:
                # sending them all again is safe.
                if exc.code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                    raise
                _with_broker(addr, join_then_update)
            return
        # The broker's config/consumerOffset.json (ConsumerOffsetManager): one atomic rewrite for all topics and
        # waves (waves order a broker's concurrent handling of requests; a file is written by this process alone).
        from rocketstream.store.meta.offsets import ConsumerOffsetManager

        merged: dict[str, dict[int, int]] = {}
        for wave in waves:
            for topic, queues in wave.items():
                merged.setdefault(topic, {}).update(queues)
        ConsumerOffsetManager(self.root).commit_many({(group, topic): queues for topic, queues in merged.items()})

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


def _heartbeat_of(group: str, topics: Sequence[str]) -> dict:
    """A pull consumer's ``HeartbeatData`` of ``group`` subscribed to ``topics`` (all tags)."""
    from rocketstream.client.rebalance import Subscription
    from rocketstream.client.subscription import SubscriptionData
    from rocketstream.spark.group_presence import pull_consumer_heartbeat, spark_client_id

    everything = SubscriptionData.parse("*")
    return pull_consumer_heartbeat(spark_client_id(), group, [Subscription(t, everything) for t in topics],
                                   consume_from_where="CONSUME_FROM_LAST_OFFSET", message_model="CLUSTERING")


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


__all__ = ["LocalBroker", "LocalBrokerView"]
