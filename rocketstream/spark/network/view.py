"""Network mode, planning side: a :class:`~rocketstream.spark.broker_view.BrokerView` over one broker's
address (RocketMQ's remoting protocol through :class:`rocketstream.client.api.MQClientAPI`).

* Bounds: GET_TOPIC_STATS_INFO for a whole topic (``MQClientAPI.topic_stats``), GET_MIN_OFFSET /
  GET_MAX_OFFSET for the queues its answer lacks, concurrently.
* Sizes (``maxBytesPerTrigger``): QUERY_CONSUME_QUEUE, paged (:func:`query_sizes`), many ranges in flight.
* SEARCH_OFFSET_BY_TIMESTAMP, QUERY_CONSUMER_OFFSET and UPDATE_CONSUMER_OFFSET (answered, not oneway: a
  commit that the broker did not take fails the query), so ``mqadmin consumerProgress`` shows the query's
  group. Which offsets are sent is decided by :class:`~rocketstream.spark.commits.OffsetCommits`.
* Reads: :func:`~rocketstream.spark.network.puller.pull_ranges` on the process's client loop.

Executors need nothing but the location: the pickled :class:`NetworkBroker` holds the address.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import numpy as np

from rocketstream.client.api import MQClientAPI
from rocketstream.client.common import PullStatus
from rocketstream.client.topic_stats import TopicStats, empty_topic_stats
from rocketstream.codec import FLAG_BORNHOST_V6, POS_STORE_TIMESTAMP, POS_SYS_FLAG
from rocketstream.errors import BrokerResponseError, DataLossError, OptionError, RocketStreamError
from rocketstream.remoting import ResponseCode
from rocketstream.remoting.codes import code_name
from rocketstream.spark.broker_view import QueueBounds
from rocketstream.spark.network.puller import PULL_FLAGS, PULL_MAX_NUMS, PULL_TIMEOUT_S, PullTarget, pull_ranges
from rocketstream.spark.network.routes import REQUEST_TIMEOUT_S, process_client, readable_brokers
from rocketstream.spark.secured import NOT_SECURED, SecuredOptions

if TYPE_CHECKING:
    import pyarrow as pa

T = TypeVar("T")
log = logging.getLogger(__name__)


class NetworkBroker(NamedTuple):
    """A broker reached over the network (network mode): picklable, travels in every task."""

    name: str
    addr: str
    namesrv: str
    group: str  # the query's consumerGroup: pulls are made on its behalf (brokers check the group)
    queues: tuple[tuple[str, tuple[int, ...]], ...]  # readable queue ids per topic (from the routes)
    # the query's network tunables (options requestTimeoutMs, pullTimeoutMs, pullBatchSize, pullRetries)
    request_timeout_s: float = REQUEST_TIMEOUT_S
    pull_timeout_s: float = PULL_TIMEOUT_S
    pull_batch_size: int = PULL_MAX_NUMS
    pull_retries: int = 0
    # ACL account, TLS and namespace of every request (topics and group are wrapped on the wire only)
    secured: SecuredOptions = NOT_SECURED

    def open(self) -> NetworkBrokerView:
        return NetworkBrokerView(self)


def resolve_network_brokers(namesrv: str, topics: Sequence[str], group: str, *,
                            request_timeout_s: float = REQUEST_TIMEOUT_S, pull_timeout_s: float = PULL_TIMEOUT_S,
                            pull_batch_size: int = PULL_MAX_NUMS, pull_retries: int = 0,
                            secured: SecuredOptions = NOT_SECURED) -> tuple[NetworkBroker, ...]:
    """The brokers holding readable queues of ``topics`` (:func:`~.routes.readable_brokers`) as locations
    carrying the query's tunables and its secured-cluster settings."""
    return tuple(NetworkBroker(b.name, b.addr, namesrv, group, b.queues, request_timeout_s, pull_timeout_s,
                               pull_batch_size, pull_retries, secured)
                 for b in readable_brokers(namesrv, topics, request_timeout_s, secured))


class NetworkBrokerView:
    """:class:`BrokerView` over one broker's address; methods block on the process's client loop.

    Topics and groups are the user's names here; with a namespace every request carries the wrapped ones
    (:meth:`_wire`), and rows read show the user's topic."""

    def __init__(self, location: NetworkBroker) -> None:
        self.location = location
        self._client = process_client()
        self.api = self._client.api_for(location.namesrv, location.secured)
        self._queues = dict(location.queues)
        self.timeout_s = location.request_timeout_s
        self._wire = location.secured.wrap

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
        return self._run(self.api.min_offset(self.addr, self._wire(topic), queue_id, self.timeout_s))

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self._run(self.api.max_offset(self.addr, self._wire(topic), queue_id, self.timeout_s))

    def queue_bounds(self, topic: str, queue_ids: Sequence[int]) -> dict[int, QueueBounds]:
        """[min, max) of many queues in one round of concurrent requests."""
        wire = self._wire(topic)

        async def ask() -> list[int]:
            calls = [self.api.min_offset(self.addr, wire, q, self.timeout_s) for q in queue_ids]
            calls += [self.api.max_offset(self.addr, wire, q, self.timeout_s) for q in queue_ids]
            return list(await asyncio.gather(*calls))

        values = self._run(ask())
        n = len(queue_ids)
        return {q: QueueBounds(values[i], values[n + i]) for i, q in enumerate(queue_ids)}

    def topic_stats(self, topic: str) -> TopicStats:
        """The broker's GET_TOPIC_STATS_INFO answer for ``topic``; a broker that refuses it (TOPIC_NOT_EXIST
        while the topic is being created, an ACL, another implementation) answers no queue, and the caller
        asks the queues it lacks one by one. A body that is not a TopicStatsTable is a BodyError."""
        try:
            return self._run(self.api.topic_stats(self.addr, self._wire(topic), self.timeout_s))
        except BrokerResponseError as exc:
            if refused_access(exc):   # every request would be refused: fail now, with the broker's answer
                raise BrokerResponseError(
                    exc.code, exc.remark, addr=self.addr, request_code=exc.request_code,
                    what=f"broker {self.broker_name} refused {code_name(exc.request_code or 0)} of topic "
                         f"{self._wire(topic)}") from exc
            log.debug("GET_TOPIC_STATS_INFO %s from %s: %s; asking queue by queue", topic, self.addr, exc)
            return empty_topic_stats()

    def bounds_array(self, topic: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Readable queue ids of ``topic`` and their [min, max) offsets as int64 arrays (planning, every
        trigger): one GET_TOPIC_STATS_INFO for the whole topic (:meth:`topic_stats`), GET_MIN_OFFSET /
        GET_MAX_OFFSET only for queues its answer lacks."""
        ids = self.queue_ids(topic)
        if not ids:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        wanted = np.array(ids, dtype=np.int64)
        got, got_low, got_high = self.topic_stats(topic)
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
        """Stored sizes of messages ``[start, end)`` by QUERY_CONSUME_QUEUE, paged; with ``byte_cap``
        only until their running total exceeds it (see :func:`query_sizes`)."""
        return self._run(query_sizes(self.api, self.addr, self.broker_name, self._wire(topic), queue_id, start, end,
                                     byte_cap, timeout_s=self.timeout_s))

    def message_sizes_many(self, asks: Sequence[tuple[str, int, int, int]],
                           byte_cap: int | None = None) -> list[np.ndarray]:
        """:meth:`message_sizes` of every ``(topic, queueId, start, end)``, with up to :data:`SIZES_IN_FLIGHT`
        QUERY_CONSUME_QUEUE requests in flight; results in ``asks`` order."""
        gate = asyncio.Semaphore(SIZES_IN_FLIGHT)

        async def one(topic: str, queue_id: int, start: int, end: int) -> np.ndarray:
            async with gate:
                return await query_sizes(self.api, self.addr, self.broker_name, self._wire(topic), queue_id, start,
                                         end, byte_cap, timeout_s=self.timeout_s)

        async def all_of() -> list[np.ndarray]:
            return list(await asyncio.gather(*(one(*ask) for ask in asks)))

        return self._run(all_of())

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First offset stored at or after ``timestamp_ms`` (max when none). A 4.x broker answers the last
        message's offset for a time after every message, so the answer is checked against that message."""
        async def ask() -> int:
            found = await self.api.search_offset(self.addr, self._wire(topic), queue_id, timestamp_ms, self.timeout_s)
            high = await self.api.max_offset(self.addr, self._wire(topic), queue_id, self.timeout_s)
            if found >= high or found < 0:
                return high
            ts = await self._store_time(topic, queue_id, found)
            return found + 1 if ts is not None and ts < timestamp_ms else found

        return self._run(ask())

    async def _store_time(self, topic: str, queue_id: int, offset: int) -> int | None:
        result = await self.api.pull(self.addr, group=self._wire(self.location.group), topic=self._wire(topic),
                                     queue_id=queue_id,
                                     offset=offset, max_nums=1, sys_flag=PULL_FLAGS, subscription="*",
                                     timeout=self.location.pull_timeout_s)
        body = result.body
        if result.status is not PullStatus.FOUND or not body or len(body) < POS_STORE_TIMESTAMP + 12 + 8:
            return None
        # STORETIMESTAMP follows BORNHOST, 12 bytes further when that is IPv6 (MessageDecoder.decode)
        (sys_flag,) = struct.unpack_from(">i", body, POS_SYS_FLAG)
        at = POS_STORE_TIMESTAMP + (12 if sys_flag & FLAG_BORNHOST_V6 else 0)
        return int(struct.unpack_from(">q", body, at)[0])

    def read_ranges(self, ranges: Sequence[tuple[str, int, int, int]], *, columns: Sequence[str],
                    tags: Collection[str] | None, check_crc: bool,
                    fail_on_data_loss: bool = True) -> Iterator[pa.RecordBatch]:
        """Batches of every range ``(topic, queueId, start, end)`` in order, pulled several at once
        (:func:`~rocketstream.spark.network.puller.pull_ranges`); data loss while pulling follows
        ``fail_on_data_loss``."""
        loc = self.location
        target = PullTarget(self.api, self.addr, self.broker_name, self._wire(loc.group), loc.pull_timeout_s,
                            loc.pull_batch_size, loc.pull_retries)
        if loc.secured.namespace is None:
            return pull_ranges(self._client, target, ranges, columns=columns, tags=tags, check_crc=check_crc,
                               fail_on_data_loss=fail_on_data_loss)
        wire = [(self._wire(t), q, s, e) for t, q, s, e in ranges]
        return _user_topics(pull_ranges(self._client, target, wire, columns=columns, tags=tags, check_crc=check_crc,
                                        fail_on_data_loss=fail_on_data_loss), loc.secured)

    def query_offsets(self, group: str, topic: str, queue_ids: Iterable[int]) -> dict[int, int]:
        ids = list(queue_ids)

        async def ask() -> list[int | None]:
            return list(await asyncio.gather(*(self.api.query_offset(self.addr, self._wire(group), self._wire(topic),
                                                                     q, self.timeout_s) for q in ids)))

        return {q: -1 if o is None else o for q, o in zip(ids, self._run(ask()), strict=True)}

    def commit_session(self) -> object:
        """The connection to the broker (made if there is none): offsets it acknowledged stay acknowledged
        while it is the one in use. A new connection may face a restarted broker that lost what it had not
        persisted (``ConsumerOffsetManager.persist`` runs every 5 s). The open one is taken without a trip
        through the client loop (planning commits every trigger)."""
        channel = self.api.open_channel(self.addr)
        return channel if channel is not None else self._run(self.api.channel(self.addr, self.timeout_s))

    def commit_offsets(self, group: str, waves: Sequence[Mapping[str, Mapping[int, int]]]) -> None:
        """UPDATE_CONSUMER_OFFSET of every queue, answered (a commit the broker did not take raises); the
        updates of a wave concurrently, each wave after the previous one was answered."""
        async def send() -> None:
            for wave in waves:
                await asyncio.gather(*(self.api.update_offset(self.addr, self._wire(group), self._wire(topic), q, o,
                                                              oneway=False, timeout=self.timeout_s)
                                       for topic, queues in wave.items() for q, o in queues.items()))

        self._run(send())

    def close(self) -> None:
        pass  # connections stay with the process's client for the next view

    def __repr__(self) -> str:
        return f"NetworkBrokerView({self.broker_name!r}, {self.addr!r})"


def refused_access(exc: BrokerResponseError) -> bool:
    """Whether a broker's error answer is an access refusal: NO_PERMISSION, or a 4.x ACL check that failed
    (``AclException`` thrown by ``PlainAccessValidator``, answered as SYSTEM_ERROR with the exception as remark)
    or a 5.x authentication/authorization failure (``AuthenticationException`` / ``AuthorizationException``)."""
    remark = exc.remark or ""
    return exc.code == ResponseCode.NO_PERMISSION or any(
        word in remark for word in ("AclException", "AuthenticationException", "AuthorizationException"))


def _user_topics(batches: Iterator[pa.RecordBatch], secured: SecuredOptions) -> Iterator[pa.RecordBatch]:
    """``batches`` with their ``topic`` column as the user names it (``NamespaceUtil.withoutNamespace``,
    as the Java consumer unwraps delivered messages): the broker's records carry ``ns%topic``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for batch in batches:
        at = batch.schema.get_field_index("topic")
        if at < 0 or batch.num_rows == 0:
            yield batch
            continue
        wire = batch.column(at)
        names = pc.unique(wire).to_pylist()
        shown = [secured.unwrap(t) if isinstance(t, str) else t for t in names]
        mapped = pc.take(pa.array(shown, pa.string()), pc.index_in(wire, value_set=pa.array(names, pa.string())))
        yield batch.set_column(at, batch.schema.field(at), mapped)


# ---- message sizes (maxBytesPerTrigger) ----------------------------------------------------------------

# Units asked for by the first QUERY_CONSUME_QUEUE of a queue: one per 256 bytes of the cap (plus 16), at
# most this many; later pages are sized from the sizes seen.
SIZES_FIRST_PAGE = 2048
# Units per page when every size of a range is wanted (no byte cap): about 70 bytes of JSON each.
SIZES_FULL_PAGE = 65536
# QUERY_CONSUME_QUEUE requests of one broker in flight at once (NetworkBrokerView.message_sizes_many).
SIZES_IN_FLIGHT = 16


async def query_sizes(api: MQClientAPI, addr: str, broker_name: str, topic: str, queue_id: int, start: int,
                      end: int, byte_cap: int | None = None, timeout_s: float = REQUEST_TIMEOUT_S) -> np.ndarray:
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
                                                                       timeout_s)
        except BrokerResponseError as exc:
            if exc.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                raise
            raise OptionError("maxBytesPerTrigger", f"needs the broker's message sizes, and broker {broker_name} "
                              f"({addr}) does not answer QUERY_CONSUME_QUEUE: {exc.remark}; use "
                              f"maxMessagesPerTrigger with it") from exc
        if not answer.found or answer.min_index > at:
            low = answer.min_index if answer.found else await api.min_offset(addr, topic, queue_id, timeout_s)
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


__all__ = ["NetworkBroker", "NetworkBrokerView", "query_sizes", "refused_access", "resolve_network_brokers"]
