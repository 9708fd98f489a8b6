"""Network mode: a :class:`~rocketstream.spark.broker_view.BrokerView` over a broker's address (RocketMQ's
remoting protocol through :class:`rocketstream.client.api.MQClientAPI`), for any RocketMQ cluster reachable
by name server — ours or Apache's.

* The driver asks the name server for each topic's route (GET_ROUTEINFO_BY_TOPIC): every broker with a
  queue data that has the READ permission bit becomes a :class:`NetworkBroker` location carrying its address
  and its readable queue ids (``0 .. readQueueNums-1``, as ``topicRouteData2TopicSubscribeInfo``).
* Planning: GET_MIN_OFFSET / GET_MAX_OFFSET (all queues of a broker at once, concurrently), QUERY_CONSUME_QUEUE
  for message sizes (``maxBytesPerTrigger``; :func:`query_sizes`),
  SEARCH_OFFSET_BY_TIMESTAMP, QUERY_CONSUMER_OFFSET and UPDATE_CONSUMER_OFFSET (answered, not oneway: a
  commit that the broker did not take fails the query), so ``mqadmin consumerProgress`` shows the query's group.
* Executors: PULL_MESSAGE of each queue range with the broker-side tag filter (subscription flag, no
  suspend: a bounded range never long-polls), several queues of a task in flight at once and, once the
  broker's batch is known, several pulls of one queue at once (:class:`_RangePuller`); bodies decoded with
  the vectorized codec straight into Arrow batches of the requested columns by the local read's column
  builder (``store.read.bulk_read.ColumnBuilder``); rows past the range end (the broker's tag scan may run
  ahead) are dropped, and a tag filter is re-checked exactly on TAGS.

Executors need nothing but the location: the pickled :class:`NetworkBroker` holds the address. One asyncio
loop thread per process carries every connection (:func:`_client`); views are cheap handles on it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import struct
import threading
import time
from collections.abc import Awaitable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketstream.client.api import PULL_SYS_FLAG_LITE_PULL, PULL_SYS_FLAG_SUBSCRIPTION, MQClientAPI
from rocketstream.client.common import MessageQueue, PullResult, PullStatus
from rocketstream.client.route import PERM_READ, TopicRouteData
from rocketstream.codec import MAGIC_V1, MAGIC_V2
from rocketstream.codec import vectorized as vz
from rocketstream.errors import (
    BodyError,
    BrokerResponseError,
    CorruptStoreError,
    DataLossError,
    OptionError,
    RocketStreamError,
)
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode, json_body
from rocketstream.spark.broker_view import QueueBounds
from rocketstream.store import project_schema
from rocketstream.store.read.bulk_read import ColumnBuilder

T = TypeVar("T")
log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
# Every queue's offset is sent again at least this often (the Java consumer's persistConsumerOffsetInterval,
# 5 s by default, sends its whole table), so a table changed behind our back converges to the query's.
FULL_COMMIT_S = 5.0
PULL_TIMEOUT_S = 30.0
# Messages asked for per pull: the broker answers with as many as its transfer limits allow
# (maxTransferCountOnMessageInMemory / ...BytesOn..., 32 messages / 256 KiB by default on 4.9.8).
PULL_MAX_NUMS = 4096
# Stored bytes per Arrow batch (the 1-4 MiB range where PySpark's Arrow transfer is cheapest per row).
BATCH_BYTES = 7 << 19
# Queue ranges of one task pulled at once (each keeps one chunk in flight ahead of the decoder).
RANGES_IN_FLIGHT = 4
# Pulls of one queue range in flight at once once the broker's batch is known (_RangePuller).
TILES_IN_FLIGHT = 16
_SIZE = struct.Struct(">i")
# a pull body: bytes, or the buffer a large answer was received into (MQClientAPI.pull(body_buffer=True))
Body = bytes | memoryview


# ---- the process's client ----------------------------------------------------------------------------

class _Client:
    """An event loop in a daemon thread plus the :class:`MQClientAPI` (connections by address) on it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.api: MQClientAPI | None = None
        self.apis: dict[str, MQClientAPI] = {}
        thread = threading.Thread(target=self.loop.run_forever, name="rocketstream-spark-net", daemon=True)
        thread.start()

    def run(self, coro: Awaitable[T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def submit(self, coro: Awaitable[T]) -> asyncio.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type, return-value]

    def api_for(self, namesrv: str) -> MQClientAPI:
        api = self.apis.get(namesrv)
        if api is None:
            api = self.apis[namesrv] = MQClientAPI(namesrv)
        return api


_CLIENT: _Client | None = None
_CLIENT_LOCK = threading.Lock()


def _client() -> _Client:
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is None or _CLIENT.pid != os.getpid():  # a forked worker gets its own loop
            _CLIENT = _Client()
        return _CLIENT


# ---- routes -> locations ------------------------------------------------------------------------------

class NetworkBroker(NamedTuple):
    """A broker reached over the network (network mode): picklable, travels in every task."""

    name: str
    addr: str
    namesrv: str
    group: str  # the query's consumerGroup: pulls are made on its behalf (brokers check the group)
    queues: tuple[tuple[str, tuple[int, ...]], ...]  # readable queue ids per topic (from the routes)

    def open(self) -> NetworkBrokerView:
        return NetworkBrokerView(self)


def resolve_network_brokers(namesrv: str, topics: Sequence[str], group: str) -> tuple[NetworkBroker, ...]:
    """The brokers holding readable queues of ``topics``, by the name server's routes. A topic without a
    route is an OptionError naming it (a typo far more often than a topic yet to be created)."""
    client = _client()
    api = client.api_for(namesrv)

    async def routes() -> list[TopicRouteData | None]:
        return list(await asyncio.gather(*(api.get_route(t, REQUEST_TIMEOUT_S) for t in topics)))

    try:
        found = client.run(routes())
    except RocketStreamError as exc:
        raise RocketStreamError(f"name server {namesrv}: cannot read the routes of {', '.join(topics)}: {exc}") from exc
    missing = [t for t, r in zip(topics, found, strict=True) if r is None]
    if missing:
        raise OptionError("topic", f"name server {namesrv} has no route for topic {', '.join(missing)}")
    addrs: dict[str, str] = {}
    queues: dict[str, dict[str, tuple[int, ...]]] = {}
    for topic, route in zip(topics, found, strict=True):
        assert route is not None
        for qd in route.queue_datas:
            if not qd.perm & PERM_READ or qd.read_queue_nums <= 0:
                continue
            bd = route.broker(qd.broker_name)
            addr = bd.master_addr() or bd.select_addr() if bd is not None else None
            if addr is None:
                continue  # no broker address yet: the queues are unreachable (as the Java client skips them)
            addrs[qd.broker_name] = addr
            queues.setdefault(qd.broker_name, {})[topic] = tuple(range(qd.read_queue_nums))
    if not queues:
        raise OptionError("topic", f"no broker serves a readable queue of {', '.join(topics)} "
                                   f"(name server {namesrv}; read permission or addresses missing)")
    return tuple(NetworkBroker(name, addrs[name], namesrv, group, tuple(sorted(queues[name].items())))
                 for name in sorted(queues))


# ---- planning: a topic's queue bounds in one request ----------------------------------------------

async def topic_stats(api: MQClientAPI, addr: str, topic: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Queue ids, min and max offsets of the topic's queues on the broker at ``addr``, by one GET_TOPIC_STATS_INFO
    (202; ``AdminBrokerProcessor.getTopicStatsInfo``): the broker answers ``getMinOffsetInQueue`` /
    ``getMaxOffsetInQueue`` of each queue — what GET_MIN_OFFSET / GET_MAX_OFFSET answer one queue at a time —
    in a ``TopicStatsTable``. It lists queues ``0 .. writeQueueNums-1`` only (the route's readable queues may
    be more), and a broker may refuse it (TOPIC_NOT_EXIST while the topic is being created, an ACL, another
    implementation): an answer other than SUCCESS is no queue, and the caller asks the queues it lacks one
    by one. A body that is not a TopicStatsTable is a :class:`BodyError`."""
    req = RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
    resp = await api.invoke(addr, req, REQUEST_TIMEOUT_S)
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        log.debug("GET_TOPIC_STATS_INFO %s from %s: code %s (%s); asking queue by queue", topic, addr, resp.code,
                  resp.remark)
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return parse_topic_stats(resp.body, topic, addr)


# One TopicStatsTable entry as fastjson writes it (RemotingSerializable.encode: bean fields sorted by name).
_STATS_ENTRY = re.compile(rb'\{"brokerName":"[^"\\]*","queueId":(\d+),"topic":"([^"\\]*)"\}:'
                          rb'\{"lastUpdateTimestamp":-?\d+,"maxOffset":(-?\d+),"minOffset":(-?\d+)\}')
_STATS_HEAD = b'{"offsetTable":{'


def parse_topic_stats(body: bytes, topic: str, addr: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The queues of ``topic`` in a TopicStatsTable body: queue ids, minOffset and maxOffset as int64 arrays
    (ids in the body's order). The compact form brokers write is matched entry by entry, when every entry
    of the body matched; anything else goes through the fastjson reader."""
    stripped = body.strip()
    if stripped.startswith(_STATS_HEAD) and stripped.endswith(b"}}"):
        entries = _STATS_ENTRY.findall(stripped)
        n = len(entries)
        if n and stripped.count(b'"brokerName"') == n and stripped.count(b",") == 5 * n - 1:
            cols = np.array(entries)
            keep = cols[:, 1] == topic.encode("utf-8")
            return cols[keep, 0].astype(np.int64), cols[keep, 3].astype(np.int64), cols[keep, 2].astype(np.int64)
    found = _parse_topic_stats_slow(body, topic, addr)
    ids = sorted(found)
    return (np.array(ids, dtype=np.int64), np.array([found[q].min for q in ids], dtype=np.int64),
            np.array([found[q].max for q in ids], dtype=np.int64))


def _parse_topic_stats_slow(body: bytes, topic: str, addr: str | None) -> dict[int, QueueBounds]:
    doc = json_body.loads(body, what="GET_TOPIC_STATS_INFO body", addr=addr)
    table = doc.get("offsetTable") if isinstance(doc, Mapping) else None
    if not isinstance(table, Mapping):
        raise BodyError("GET_TOPIC_STATS_INFO body has no offsetTable object", addr=addr)
    found: dict[int, QueueBounds] = {}
    for mq, offsets in table.items():
        if not isinstance(mq, Mapping) or not isinstance(offsets, Mapping):
            raise BodyError(f"GET_TOPIC_STATS_INFO: entry {mq!r}: {offsets!r} is not MessageQueue: TopicOffset",
                            addr=addr)
        if mq.get("topic") != topic:
            continue
        qid, low, high = mq.get("queueId"), offsets.get("minOffset"), offsets.get("maxOffset")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (qid, low, high)):
            raise BodyError(f"GET_TOPIC_STATS_INFO: entry {dict(mq)}: {dict(offsets)} lacks integer queueId, "
                            f"minOffset or maxOffset", addr=addr)
        assert isinstance(qid, int) and isinstance(low, int) and isinstance(high, int)
        found[qid] = QueueBounds(low, high)
    return found


# ---- the view ----------------------------------------------------------------------------------------

class NetworkBrokerView:
    """:class:`BrokerView` over one broker's address; methods block on the process's client loop."""

    def __init__(self, location: NetworkBroker) -> None:
        self.location = location
        self._client = _client()
        self.api = self._client.api_for(location.namesrv)
        self._queues = dict(location.queues)
        # commit_offsets: what the broker acknowledged, on which connection, and when all was last sent
        self._acked: dict[tuple[str, str, int], int] = {}
        self._acked_on: object = None
        self._full_at = 0.0

    @property
    def broker_name(self) -> str:
        return self.location.name

    @property
    def addr(self) -> str:
        return self.location.addr

    def _run(self, coro: Awaitable[T]) -> T:
        return self._client.run(coro)

    def topics(self) -> list[str]:
        return sorted(self._queues)

    def queue_ids(self, topic: str) -> list[int]:
        return list(self._queues.get(topic, ()))

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self._run(self.api.min_offset(self.addr, topic, queue_id, REQUEST_TIMEOUT_S))

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self._run(self.api.max_offset(self.addr, topic, queue_id, REQUEST_TIMEOUT_S))

    def queue_bounds(self, topic: str, queue_ids: Sequence[int]) -> dict[int, QueueBounds]:
        """[min, max) of many queues in one round of concurrent requests."""
        async def ask() -> list[int]:
            calls = [self.api.min_offset(self.addr, topic, q, REQUEST_TIMEOUT_S) for q in queue_ids]
            calls += [self.api.max_offset(self.addr, topic, q, REQUEST_TIMEOUT_S) for q in queue_ids]
            return list(await asyncio.gather(*calls))

        values = self._run(ask())
        n = len(queue_ids)
        return {q: QueueBounds(values[i], values[n + i]) for i, q in enumerate(queue_ids)}

    def bounds_array(self, topic: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Readable queue ids of ``topic`` and their [min, max) offsets as int64 arrays (planning, every
        trigger): one GET_TOPIC_STATS_INFO for the whole topic, GET_MIN_OFFSET / GET_MAX_OFFSET only for
        queues its answer lacks (see :func:`topic_stats`)."""
        ids = self.queue_ids(topic)
        if not ids:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        wanted = np.array(ids, dtype=np.int64)
        got, got_low, got_high = self._run(topic_stats(self.api, self.addr, topic))
        order = np.argsort(got, kind="stable")
        got, got_low, got_high = got[order], got_low[order], got_high[order]
        at = np.minimum(np.searchsorted(got, wanted), max(len(got) - 1, 0))
        found = (got[at] == wanted) if len(got) else np.zeros(len(wanted), dtype=bool)
        low = np.where(found, got_low[at] if len(got) else 0, 0)
        high = np.where(found, got_high[at] if len(got) else 0, 0)
        missing = wanted[~found].tolist()
        if missing:   # readable queues the answer lacks (readQueueNums > writeQueueNums, or no answer)
            asked = self.queue_bounds(topic, missing)
            rows = np.flatnonzero(~found)
            low[rows] = [asked[q].min for q in missing]
            high[rows] = [asked[q].max for q in missing]
        return wanted, low.astype(np.int64), high.astype(np.int64)

    def message_sizes(self, topic: str, queue_id: int, start: int, end: int,
                      byte_cap: int | None = None) -> np.ndarray:
        """Stored sizes of messages ``[start, end)`` by QUERY_CONSUME_QUEUE (321), paged; with ``byte_cap``
        only until their running total exceeds it (see :func:`query_sizes`)."""
        return self._run(query_sizes(self.api, self.addr, self.broker_name, topic, queue_id, start, end, byte_cap))

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First offset stored at or after ``timestamp_ms`` (max when none). A 4.x broker answers the last
        message's offset for a time after every message, so the answer is checked against that message."""
        async def ask() -> int:
            found = await self.api.search_offset(self.addr, topic, queue_id, timestamp_ms, REQUEST_TIMEOUT_S)
            high = await self.api.max_offset(self.addr, topic, queue_id, REQUEST_TIMEOUT_S)
            if found >= high or found < 0:
                return high
            ts = await self._store_time(topic, queue_id, found)
            return found + 1 if ts is not None and ts < timestamp_ms else found

        return self._run(ask())

    async def _store_time(self, topic: str, queue_id: int, offset: int) -> int | None:
        result = await self.api.pull(self.addr, group=self.location.group, topic=topic, queue_id=queue_id,
                                     offset=offset, max_nums=1, sys_flag=_PULL_FLAGS, subscription="*",
                                     timeout=PULL_TIMEOUT_S)
        if result.status is not PullStatus.FOUND or not result.body:
            return None
        return int(struct.unpack_from(">q", result.body, _STORE_TIMESTAMP_POS)[0]) if len(result.body) > 64 else None

    def read_range(self, topic: str, queue_id: int, start: int, end: int, *, columns: Sequence[str],
                   tags: Collection[str] | None, check_crc: bool) -> Iterator[pa.RecordBatch]:
        return self.read_ranges([(topic, queue_id, start, end)], columns=columns, tags=tags, check_crc=check_crc)

    def read_ranges(self, ranges: Sequence[tuple[str, int, int, int]], *, columns: Sequence[str],
                    tags: Collection[str] | None, check_crc: bool,
                    fail_on_data_loss: bool = True) -> Iterator[pa.RecordBatch]:
        """Batches of every range ``(topic, queueId, start, end)`` in order; up to :data:`RANGES_IN_FLIGHT`
        ranges are pulled concurrently, each one chunk ahead of the decoder."""
        pullers = [_RangePuller(self, t, q, s, e, tags, fail_on_data_loss) for t, q, s, e in ranges if e > s]
        decoder = _Decoder(project_schema(list(columns)), self.broker_name, tags, check_crc, self.addr)
        pending: dict[int, asyncio.Future[list[Body]]] = {}
        try:
            for i, puller in enumerate(pullers):
                for j in range(i, min(i + RANGES_IN_FLIGHT, len(pullers))):
                    if j not in pending and not pullers[j].done:
                        pending[j] = self._client.submit(pullers[j].next_chunk())
                while i in pending:
                    bodies = pending.pop(i).result()
                    if not puller.done:
                        pending[i] = self._client.submit(puller.next_chunk())
                    for group in _pack(bodies):
                        batch = decoder.decode(group, puller.topic, puller.queue_id, puller.start, puller.end)
                        if batch.num_rows:
                            yield batch
        finally:
            for fut in pending.values():
                fut.cancel()

    def query_offsets(self, group: str, topic: str, queue_ids: Iterable[int]) -> dict[int, int]:
        ids = list(queue_ids)

        async def ask() -> list[int | None]:
            return list(await asyncio.gather(*(self.api.query_offset(self.addr, group, topic, q, REQUEST_TIMEOUT_S)
                                               for q in ids)))

        return {q: -1 if o is None else o for q, o in zip(ids, self._run(ask()), strict=True)}

    def commit_offsets(self, group: str, offsets: Mapping[str, Mapping[int, int]]) -> None:
        """UPDATE_CONSUMER_OFFSET of every queue, answered. A planner commits every trigger, mostly the same
        offsets: queues whose offset the broker already acknowledged are skipped while the connection it
        was acknowledged on is still the one in use and less than :data:`FULL_COMMIT_S` has passed since
        the last commit of every queue. A new connection (the broker restarted and may have lost what it
        had not persisted, ``ConsumerOffsetManager.persist`` runs every 5 s) or a failed commit means
        everything is sent again next time."""
        if not any(offsets.values()):
            return

        async def send() -> None:
            channel = await self.api.channel(self.addr, REQUEST_TIMEOUT_S)
            now = time.monotonic()
            full = channel is not self._acked_on or now - self._full_at >= FULL_COMMIT_S
            acked = {} if full else self._acked
            todo = [(topic, q, o) for topic, queues in offsets.items() for q, o in queues.items()
                    if acked.get((group, topic, q)) != o]
            self._acked_on = None   # until every update is answered

            async def update(items: list[tuple[str, int, int]]) -> None:
                await asyncio.gather(*(self.api.update_offset(self.addr, group, topic, q, o, oneway=False,
                                                              timeout=REQUEST_TIMEOUT_S) for topic, q, o in items))

            rest = todo
            if full:
                # 4.9.8's ConsumerOffsetManager.commitOffset creates a group's table for a topic with a get, then
                # a put (no putIfAbsent): first commits handled at once by the broker's threads can each create
                # one, and all but the last are lost (seen: 2 of 4 queues read back 0). Where the table may be
                # new, one update per topic goes first, alone.
                firsts: dict[str, tuple[str, int, int]] = {}
                for item in todo:
                    firsts.setdefault(item[0], item)
                await update(list(firsts.values()))
                rest = [item for item in todo if firsts[item[0]] is not item]
            await update(rest)
            acked.update(((group, topic, q), o) for topic, q, o in todo)
            self._acked, self._acked_on = acked, channel
            if full:
                self._full_at = now

        self._run(send())

    def close(self) -> None:
        pass  # connections stay with the process's client for the next view

    def __repr__(self) -> str:
        return f"NetworkBrokerView({self.broker_name!r}, {self.addr!r})"


# ---- message sizes (maxBytesPerTrigger) ----------------------------------------------------------------

# Units asked for by the first QUERY_CONSUME_QUEUE of a queue: one per 256 bytes of the cap (plus 16), at
# most this many; later pages are sized from the sizes seen.
SIZES_FIRST_PAGE = 2048
# Units per page when every size of a range is wanted (no byte cap): about 70 bytes of JSON each.
SIZES_FULL_PAGE = 65536


async def query_sizes(api: MQClientAPI, addr: str, broker_name: str, topic: str, queue_id: int, start: int,
                      end: int, byte_cap: int | None = None) -> np.ndarray:
    """Sizes of the units ``[start, end)`` of a queue (int64), by as many QUERY_CONSUME_QUEUE requests as it
    takes: a 4.9.8 broker answers at most the asked count and never past the end of the consume-queue file
    holding the index, so each page starts where the last answer ended. With ``byte_cap`` the pages stop
    once the running total exceeds it (the result is then a prefix) and each page after the first asks for
    about as many units as the sizes seen so far say the cap still needs; the prefix ends at the first
    message at which the running total exceeds the cap.

    Every answer is checked against the asked index: a broker that no longer holds ``index`` (below its min:
    retention ran between planning and now) is a :class:`DataLossError`; past its max, an answer with no
    unit, more units than asked, a unit past ``maxQueueIndex``, a size <= 0 or commit-log offsets that do
    not increase are a :class:`RocketStreamError` naming the broker, topic, queue and index — never sizes
    that might belong to other messages. A broker that does not serve the request (REQUEST_CODE_NOT_SUPPORTED)
    is an :class:`OptionError` naming maxBytesPerTrigger."""
    from rocketstream.client.consume_queue_query import MAX_QUERY_COUNT, ConsumeQueueAnswer

    where = f"{topic}:{queue_id} on {broker_name} ({addr})"
    parts: list[np.ndarray] = []
    at, total, last_offset = start, 0, -1
    page = min(SIZES_FIRST_PAGE, byte_cap // 256 + 16) if byte_cap is not None else SIZES_FULL_PAGE
    while at < end:
        want = min(end - at, page, MAX_QUERY_COUNT)
        try:
            answer: ConsumeQueueAnswer = await api.query_consume_queue(addr, topic, queue_id, at, want, None,
                                                                       REQUEST_TIMEOUT_S)
        except BrokerResponseError as exc:
            if exc.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                raise
            raise OptionError("maxBytesPerTrigger", f"needs the broker's message sizes, and broker {broker_name} "
                              f"({addr}) does not answer QUERY_CONSUME_QUEUE (321): {exc.remark}; use "
                              f"maxMessagesPerTrigger with it") from exc
        if not answer.found or answer.min_index > at:
            low = answer.min_index if answer.found else await api.min_offset(addr, topic, queue_id, REQUEST_TIMEOUT_S)
            if at < low:
                raise DataLossError(
                    f"maxBytesPerTrigger: messages [{at}, {low}) of {where} were removed (retention) between "
                    f"planning and sizing the batch [{start}, {end})", topic=topic, broker_name=broker_name,
                    queue_id=queue_id, lost_from=at, lost_to=low)
            raise RocketStreamError(f"maxBytesPerTrigger: QUERY_CONSUME_QUEUE of {where} holds no unit at index "
                                    f"{at} (broker: {answer.remark!r}); the batch [{start}, {end}) was planned "
                                    f"past the queue's end")
        sizes, offsets = answer.sizes, answer.physic_offsets
        got = len(sizes)
        if not 0 < got <= want or at + got > answer.max_index:
            raise RocketStreamError(f"maxBytesPerTrigger: QUERY_CONSUME_QUEUE of {where} from index {at} asked "
                                    f"{want} units and got {got} (broker max {answer.max_index})")
        if int(sizes.min()) <= 0 or int(offsets[0]) <= last_offset or (got > 1 and bool((np.diff(offsets) <= 0).any())):
            raise RocketStreamError(f"maxBytesPerTrigger: QUERY_CONSUME_QUEUE of {where} from index {at}: a size "
                                    f"<= 0 or commit-log offsets that do not increase (not units of one queue)")
        last_offset = int(offsets[-1])
        parts.append(sizes)
        at += got
        total += int(sizes.sum())
        if byte_cap is not None:
            if total > byte_cap:
                sizes = np.concatenate(parts) if len(parts) != 1 else parts[0]
                # up to the first message at which the running total exceeds the cap
                return sizes[:int(np.searchsorted(np.cumsum(sizes), byte_cap, side="right")) + 1]
            seen = at - start
            page = max(16, -(-(byte_cap - total) * seen // total) * 5 // 4 + 16)
    return np.concatenate(parts) if len(parts) != 1 else parts[0]


# QUERY_CONSUME_QUEUE requests of one broker in flight at once (network_sizes).
SIZES_IN_FLIGHT = 16


def network_sizes(views: Mapping[str, object], asks: Sequence[tuple[MessageQueue, int, int]],
                  byte_cap: int | None) -> list[np.ndarray]:
    """``rate_limit``'s ``bytes_many`` in network mode: :func:`query_sizes` of every ``(queue, start, end)``
    with up to :data:`SIZES_IN_FLIGHT` requests per broker in flight; results in ``asks`` order."""
    by_broker: dict[str, list[int]] = {}
    for i, (q, _, _) in enumerate(asks):
        by_broker.setdefault(q.broker_name, []).append(i)
    out: list[np.ndarray] = [np.zeros(0, np.int64)] * len(asks)
    for name, rows in by_broker.items():
        view = views[name]
        if not isinstance(view, NetworkBrokerView):
            raise RocketStreamError(f"network_sizes: broker {name} has a {type(view).__name__}, not a network view")
        gate = asyncio.Semaphore(SIZES_IN_FLIGHT)

        async def one(i: int, v: NetworkBrokerView = view, gate: asyncio.Semaphore = gate) -> np.ndarray:
            q, a, b = asks[i]
            async with gate:
                return await query_sizes(v.api, v.addr, v.broker_name, q.topic, q.queue_id, a, b, byte_cap)

        async def all_of(rows: list[int] = rows) -> list[np.ndarray]:
            return list(await asyncio.gather(*(one(i) for i in rows)))

        for i, sizes in zip(rows, view._run(all_of()), strict=True):
            out[i] = sizes
    return out


def _pack(bodies: list[Body]) -> Iterator[Body]:
    """Pull bodies in order as decode units of about :data:`BATCH_BYTES`: small bodies joined (a batch per
    pull of 32 small messages would cost PySpark's Arrow transfer dearly per row), a body of
    :data:`_ALONE_BYTES` or more alone (no copy; already in the 1-4 MiB range)."""
    group: list[Body] = []
    size = 0
    for body in bodies:
        if len(body) >= _ALONE_BYTES or size + len(body) > BATCH_BYTES:
            if group:
                yield group[0] if len(group) == 1 else b"".join(group)
                group, size = [], 0
            if len(body) >= _ALONE_BYTES:
                yield body
                continue
        group.append(body)
        size += len(body)
    if group:
        yield group[0] if len(group) == 1 else b"".join(group)


_ALONE_BYTES = BATCH_BYTES // 2
_PULL_FLAGS = PULL_SYS_FLAG_SUBSCRIPTION | PULL_SYS_FLAG_LITE_PULL  # no commit, no suspend (no long polling)
_STORE_TIMESTAMP_POS = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8  # TOTALSIZE..BORNHOST(v4): STORETIMESTAMP


class _RangePuller:
    """Pulls ``[start, end)`` of one queue, a chunk of about :data:`BATCH_BYTES` per call.

    The broker answers at most its transfer limits per pull (maxTransferCountOnMessageInMemory /
    ...BytesOn...; 32 messages / 256 KiB by default), which the protocol does not tell. The first pull asks
    for up to :data:`PULL_MAX_NUMS`; what it returns (``nextBeginOffset - offset`` without a tag filter) is
    taken as the broker's batch, and later pulls are *tiles*: up to :data:`TILES_IN_FLIGHT` pulls in flight
    at once for [o, o+k), [o+k, o+2k), ... with ``maxMsgNums = k`` each, so round trips overlap. Tiles are
    used in order while each starts where the previous ended; a tile answered short (a byte limit, a gap,
    a consume-queue file end) ends the round, and the next round starts at the true ``nextBeginOffset``
    with a single pull that learns the batch again, so nothing is skipped or read twice. With a tag filter
    the broker's scan may run past a tile's end: pulls are then sequential."""

    def __init__(self, view: NetworkBrokerView, topic: str, queue_id: int, start: int, end: int,
                 tags: Collection[str] | None, fail_on_data_loss: bool) -> None:
        self.view, self.topic, self.queue_id, self.start, self.end = view, topic, queue_id, start, end
        self.offset = start
        self.subscription = " || ".join(sorted(tags)) if tags else "*"
        self.fail_on_data_loss = fail_on_data_loss
        self.done = False
        self.batch: int | None = None   # messages per pull the broker gave (learned, no tag filter only)
        self.record_bytes = 0            # average stored bytes per message seen (for the tile count)

    async def _pull(self, offset: int, max_nums: int) -> PullResult:
        view = self.view
        return await view.api.pull(
            view.addr, group=view.location.group, topic=self.topic, queue_id=self.queue_id, offset=offset,
            max_nums=max_nums, sys_flag=_PULL_FLAGS, subscription=self.subscription, timeout=PULL_TIMEOUT_S,
            body_buffer=True)

    async def next_chunk(self) -> list[Body]:
        bodies: list[Body] = []
        size = 0
        while self.offset < self.end and size < BATCH_BYTES:
            k = self.batch
            if k is not None and self.end - self.offset > k:
                tiles = max(1, min(TILES_IN_FLIGHT, -(-(BATCH_BYTES - size) // max(k * self.record_bytes, 1))))
                starts = range(self.offset, min(self.end, self.offset + tiles * k), k)
                results = await asyncio.gather(*(self._pull(o, min(k, self.end - o)) for o in starts))
                for o, result in zip(starts, results, strict=True):
                    if o != self.offset:
                        break   # the previous tile ended short: the next round starts at its nextBeginOffset
                    if o != starts[0] and (result.status is not PullStatus.FOUND
                                           or (result.body_buffer is None and not result.body)):
                        break   # anything but messages is judged by a pull of its own in the next round
                    body = self._advance(result)
                    if body:
                        bodies.append(body)
                        size += len(body)
                        if self.offset - o < min(k, self.end - o):
                            self.batch = None   # answered short (byte limit, file end): learn the batch again
                continue
            before = self.offset
            want = min(self.end - self.offset, PULL_MAX_NUMS)
            body = self._advance(await self._pull(self.offset, want))
            if body:
                bodies.append(body)
                size += len(body)
                if self.subscription == "*" and self.batch is None and self.offset > before:
                    self.batch = self.offset - before
                    self.record_bytes = max(len(body) // self.batch, 1)
        if self.offset >= self.end:
            self.done = True
        return bodies

    def _advance(self, result: PullResult) -> Body | None:
        """Move past one pull's answer: its body (FOUND), None otherwise; data loss as failOnDataLoss says."""
        view = self.view
        status = result.status
        body: Body | None = None
        if status is PullStatus.FOUND and result.body_buffer is not None:
            body = result.body_buffer.data
        elif status is PullStatus.FOUND and result.body:
            body = result.body
        elif status is PullStatus.OFFSET_ILLEGAL:  # PULL_OFFSET_MOVED: below min or beyond max
            if self.offset < result.min_offset:
                self._lost(result.min_offset)
                return None
            raise DataLossError(
                f"{self._where()}: offset {self.offset} is beyond the broker's max offset {result.max_offset} "
                f"({view.addr}): the planned offsets do not belong to this broker (was it reset?)",
                topic=self.topic, broker_name=view.broker_name, queue_id=self.queue_id,
                lost_from=result.max_offset, lost_to=self.end)
        elif status is PullStatus.NO_NEW_MSG:
            if result.next_begin_offset > self.offset:  # entries whose messages are gone (OFFSET_FOUND_NULL)
                self._lost(result.next_begin_offset)
                return None
            raise DataLossError(
                f"{self._where()}: offsets [{self.offset}, {self.end}) were planned but the broker "
                f"{view.addr} has none (max offset {result.max_offset}): was the broker reset?",
                topic=self.topic, broker_name=view.broker_name, queue_id=self.queue_id,
                lost_from=self.offset, lost_to=self.end)
        if result.next_begin_offset <= self.offset:
            raise BodyError(f"{self._where()}: pull at {self.offset} did not advance "
                            f"(nextBeginOffset {result.next_begin_offset})", addr=view.addr)
        self.offset = result.next_begin_offset  # NO_MATCHED_MSG (all filtered by tag) just moves on
        return body

    def _where(self) -> str:
        return f"topic {self.topic!r} on broker {self.view.broker_name!r} queue {self.queue_id}"

    def _lost(self, resume: int) -> None:
        """Messages ``[offset, resume)`` are gone: DataLossError (failOnDataLoss) or a logged skip."""
        lost_to = min(resume, self.end)
        message = f"messages [{self.offset}, {lost_to}) of {self._where()} are gone (removed by retention)"
        if self.fail_on_data_loss:
            raise DataLossError(message + "; set failOnDataLoss=false to skip them", topic=self.topic,
                                broker_name=self.view.broker_name, queue_id=self.queue_id,
                                lost_from=self.offset, lost_to=lost_to)
        log.warning("%s; continuing at offset %d (failOnDataLoss=false)", message, resume)
        self.offset = resume


# ---- pull bodies -> Arrow ----------------------------------------------------------------------------

def record_starts(body: Body, addr: str | None = None) -> np.ndarray:
    """Start of every record of a pull body (stored records back to back): TOTALSIZE read at each start
    (the one loop per record left: each start depends on the previous size), then the magic codes of
    all records checked at once."""
    starts: list[int] = []
    append = starts.append
    unpack = _SIZE.unpack_from
    pos = size = 0
    try:
        while True:   # ends at struct.error: fewer than 4 bytes left at pos (the end, or a bad size)
            (size,) = unpack(body, pos)
            if size <= 8:
                break
            append(pos)
            pos += size
    except struct.error:
        pass
    n = len(body)
    if pos > n:
        raise BodyError(f"pull body: record at byte {starts[-1]} has size {pos - starts[-1]} beyond the body "
                        f"({n} bytes)", addr=addr)
    if pos < n:
        what = f"has size {size}" if pos + 4 <= n else "is truncated"
        raise BodyError(f"pull body: record at byte {pos} {what} (truncated record header or a bad size; "
                        f"{n} bytes)", addr=addr)
    rel = np.asarray(starts, dtype=np.int64)
    if len(rel):
        magic = vz.as_uint8(body)[rel[:, None] + np.arange(4, 8)].view(">i4").reshape(-1)
        bad = (magic != MAGIC_V1) & (magic != MAGIC_V2)
        if bad.any():
            i = int(np.argmax(bad))
            raise BodyError(f"pull body: record at byte {int(rel[i])} has magic code {int(magic[i]) & 0xFFFFFFFF:#x}",
                            addr=addr)
    return rel


class _Decoder:
    """Pull bodies of one view to RecordBatches of ``schema`` (MessageExt field names); the columns are
    built by the local read's :class:`~rocketstream.store.read.bulk_read.ColumnBuilder`."""

    def __init__(self, schema: pa.Schema, broker_name: str, tags: Collection[str] | None, check_crc: bool,
                 addr: str) -> None:
        self.schema = schema
        self.broker_name = broker_name
        self.tag_set = frozenset(tags) if tags else None
        self.tag_values = pa.array(sorted(self.tag_set), pa.string()) if self.tag_set else None
        self.check_crc = check_crc
        self.addr = addr
        self.columns = ColumnBuilder(schema, broker_name, self.tag_set)

    def decode(self, body: Body, topic: str, queue_id: int, start: int, end: int) -> pa.RecordBatch:
        buf = vz.as_uint8(body)
        rel = record_starts(body, self.addr)
        if not len(rel):
            return pa.RecordBatch.from_pylist([], schema=self.schema)
        h = vz.decode_headers(buf, rel, topic_len_hint=len(topic.encode("utf-8")))
        problems = vz.record_problems(buf, h, rel, check_ports=True, check_position=False)
        bad = vz.any_problem(problems)
        if bad.any():
            i = int(np.argmax(bad))
            reasons = [vz.PROBLEM_DESCRIPTIONS[k] for k, m in problems.items() if m[i]]
            raise BodyError(f"pull body of {topic}:{queue_id}: record at byte {int(rel[i])} does not decode: "
                            f"{'; '.join(reasons)}", addr=self.addr)
        qoff = h["queue_offset"]
        # rows past the range end (a tag scan may run ahead) and rows of another queue are dropped
        keep = (qoff >= start) & (qoff < end) & (h["queue_id"] == queue_id)
        props = tag_col = keys_col = uniq_col = None
        if self.columns.parse_props:
            raw = vz.gather_segments(buf, h["props_pos"], h["props_len"], pa.binary())
            props, tag_col, keys_col, uniq_col = self.columns.properties(raw)
            if self.tag_values is not None:  # the broker filters by tag hash code: check the TAGS string
                hit = pc.fill_null(pc.is_in(tag_col, value_set=self.tag_values), False).to_numpy(zero_copy_only=False)
                keep &= hit
        if not keep.all():
            sel = np.flatnonzero(keep)
            h = {k: v[sel] if isinstance(v, np.ndarray) and v.ndim else v for k, v in h.items()}
            index = vz.numeric_array(sel)
            props, tag_col, keys_col, uniq_col = (None if a is None else a.take(index)
                                                  for a in (props, tag_col, keys_col, uniq_col))
        if self.check_crc:
            crc_bad = vz.body_crc_mismatches(buf, h)
            if crc_bad.any():
                i = int(np.argmax(crc_bad))
                raise CorruptStoreError(f"BODYCRC mismatch in a pull body from {self.addr}: {topic}:{queue_id} "
                                        f"offset {int(h['queue_offset'][i])}, stored {int(h['body_crc'][i])}",
                                        offset=int(h["physical_offset"][i]))
        try:
            return self.columns.assemble(buf, h, topic, queue_id, h["physical_offset"], h["total_size"],
                                         h["queue_offset"], props=props, tags=tag_col, keys=keys_col, uniq=uniq_col,
                                         path=f"pull body from {self.addr} ({topic}:{queue_id})")
        except CorruptStoreError as exc:   # a compressed body that does not inflate
            raise BodyError(f"pull body of {topic}:{queue_id}: {exc}", addr=self.addr) from exc


__all__ = ["NetworkBroker", "NetworkBrokerView", "parse_topic_stats", "record_starts", "resolve_network_brokers",
           "topic_stats"]
