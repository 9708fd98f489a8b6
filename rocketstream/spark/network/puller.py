"""Network mode, executor side: the range puller — PULL_MESSAGE of queue ranges, several in flight — and the
decoding of its pull bodies into Arrow batches.

* :func:`pull_ranges` pulls the ranges of one broker for a task: up to :data:`RANGES_IN_FLIGHT` queue ranges
  at once, each one chunk of about :data:`BATCH_BYTES` ahead of the decoder, with the broker-side tag filter
  (subscription flag, no suspend: a bounded range never long-polls).
* :class:`_RangePuller` is one queue range: once the broker's batch is known, several pulls of it are in
  flight at once (tiles), sent by one ``MQClientAPI.pull_tiles`` call per round. A chunk ends before a pull
  that would take it past :data:`BATCH_BYTES`, so it is one decode unit (``pack_pull_bodies``).
* Pull bodies become RecordBatches of the requested columns through
  :class:`rocketstream.codec.arrow_records.PullBodyDecoder` (the one records -> Arrow module, shared with the
  local read); rows past the range end (the broker's tag scan may run ahead) are dropped, and a tag filter is
  re-checked exactly on TAGS.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

import pyarrow as pa

from rocketstream.client.api import PULL_SYS_FLAG_LITE_PULL, PULL_SYS_FLAG_SUBSCRIPTION
from rocketstream.client.common import PullResult, PullStatus
from rocketstream.codec.arrow_records import (
    ALONE_BYTES,
    BATCH_BYTES,
    PullBody,
    PullBodyDecoder,
    pack_pull_bodies,
    project_schema,
)
from rocketstream.errors import BodyError, DataLossError, RemotingConnectError, RemotingTimeoutError

if TYPE_CHECKING:
    from rocketstream.spark.network.routes import NetworkClient

log = logging.getLogger(__name__)

# Defaults of the options pullTimeoutMs and pullBatchSize (a query's values travel in its PullTarget).
PULL_TIMEOUT_S = 30.0
# Messages asked for per pull: the broker answers with as many as its transfer limits allow
# (maxTransferCountOnMessageInMemory / ...BytesOn..., 32 messages / 256 KiB by default on 4.9.8).
PULL_MAX_NUMS = 4096
# Queue ranges of one task pulled at once (each keeps one chunk in flight ahead of the decoder).
RANGES_IN_FLIGHT = 4
# Pulls of one queue range in flight at once once the broker's batch is known (_RangePuller).
TILES_IN_FLIGHT = 16
# a pull body: bytes, or the buffer a large answer was received into (MQClientAPI.pull(body_buffer=True))
Body = PullBody


class PullApi(Protocol):
    """What the puller needs of :class:`~rocketstream.client.api.MQClientAPI`: its ``pull``."""

    async def pull(self, addr: str, *, group: str, topic: str, queue_id: int, offset: int, max_nums: int,
                   sys_flag: int, subscription: str, timeout: float, body_buffer: bool = False) -> PullResult: ...


class PullTarget(NamedTuple):
    """The broker a range is pulled from: the client API, the broker's address and name, the group the
    pulls are made on behalf of (brokers check the group), and the query's pull tunables: each pull's
    timeout, the messages it asks for at most (pullBatchSize) and how often a pull that timed out or lost
    its connection is sent again before the task fails (pullRetries)."""

    api: PullApi
    addr: str
    broker_name: str
    group: str
    timeout_s: float = PULL_TIMEOUT_S
    batch_size: int = PULL_MAX_NUMS
    retries: int = 0


def pull_ranges(client: NetworkClient, target: PullTarget, ranges: Sequence[tuple[str, int, int, int]], *,
                columns: Sequence[str], tags: Collection[str] | None, check_crc: bool,
                fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
    """Batches of every range ``(topic, queueId, start, end)`` in order; up to :data:`RANGES_IN_FLIGHT`
    ranges are pulled concurrently on the process's client loop, each one chunk ahead of the decoder."""
    pullers = [_RangePuller(target, t, q, s, e, tags, fail_on_data_loss) for t, q, s, e in ranges if e > s]
    decoder = PullBodyDecoder(project_schema(list(columns)), target.broker_name, tags, check_crc, target.addr)
    pending: dict[int, asyncio.Future[list[Body]]] = {}
    try:
        for i, puller in enumerate(pullers):
            for j in range(i, min(i + RANGES_IN_FLIGHT, len(pullers))):
                if j not in pending and not pullers[j].done:
                    pending[j] = client.submit(pullers[j].next_chunk())
            carry: list[Body] = []
            while i in pending:
                bodies = pending.pop(i).result()
                if not puller.done:
                    pending[i] = client.submit(puller.next_chunk())
                groups = list(pack_pull_bodies(carry + bodies))
                # a small last unit of a chunk (its pulls' sizes varied) goes with the next chunk's: a decode
                # costs about a millisecond besides its rows (32 messages alone: ~14 us each). The last chunk
                # (done: no next one was sent) keeps nothing back.
                carry = [groups.pop()] if groups and not puller.done and len(groups[-1]) < ALONE_BYTES else []
                for group in groups:
                    batch = decoder.decode(group, puller.topic, puller.queue_id, puller.start, puller.end)
                    if batch.num_rows:
                        yield batch
    finally:
        for fut in pending.values():
            fut.cancel()


PULL_FLAGS = PULL_SYS_FLAG_SUBSCRIPTION | PULL_SYS_FLAG_LITE_PULL  # no commit, no suspend (no long polling)


class _RangePuller:
    """Pulls ``[start, end)`` of one queue, a chunk of about :data:`BATCH_BYTES` per call.

    The broker answers at most its transfer limits per pull (maxTransferCountOnMessageInMemory /
    ...BytesOn...; 32 messages / 256 KiB by default), which the protocol does not tell. The first pull asks
    for up to the target's ``batch_size`` (pullBatchSize); what it returns (``nextBeginOffset - offset``
    without a tag filter) is
    taken as the broker's batch, and later pulls are *tiles*: up to :data:`TILES_IN_FLIGHT` pulls in flight
    at once for [o, o+k), [o+k, o+2k), ... with ``maxMsgNums = k`` each, so round trips overlap. Tiles are
    used in order while each starts where the previous ended; a tile answered short (a byte limit, a gap,
    a consume-queue file end) ends the round, and the next round starts at the true ``nextBeginOffset``
    with a single pull that learns the batch again, so nothing is skipped or read twice. With a tag filter
    the broker's scan may run past a tile's end: pulls are then sequential."""

    def __init__(self, target: PullTarget, topic: str, queue_id: int, start: int, end: int,
                 tags: Collection[str] | None, fail_on_data_loss: bool) -> None:
        self.target, self.topic, self.queue_id, self.start, self.end = target, topic, queue_id, start, end
        self.offset = start
        self.subscription = " || ".join(sorted(tags)) if tags else "*"
        self.fail_on_data_loss = fail_on_data_loss
        self.done = False
        self.batch: int | None = None   # messages per pull the broker gave (learned, no tag filter only)
        self.record_bytes = 0            # average stored bytes per message seen (for the tile count)

    async def _pull(self, offset: int, max_nums: int, failed: BaseException | None = None) -> PullResult:
        """One pull, sent again after a timeout or a lost connection up to pullRetries times (``failed``: the
        first attempt's error, when that attempt was a tile of :meth:`_pull_tiles`)."""
        target = self.target
        for attempt in range(target.retries + 1):
            try:
                if failed is not None:
                    exc, failed = failed, None
                    raise exc
                return await target.api.pull(
                    target.addr, group=target.group, topic=self.topic, queue_id=self.queue_id, offset=offset,
                    max_nums=max_nums, sys_flag=PULL_FLAGS, subscription=self.subscription,
                    timeout=target.timeout_s, body_buffer=True)
            except (RemotingTimeoutError, RemotingConnectError) as exc:
                if attempt == target.retries:
                    raise
                log.warning("pull of %s at %d failed (%s); sending it again (%d of pullRetries=%d)",
                            self._where(), offset, exc, attempt + 1, target.retries)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _pull_tiles(self, tiles: list[tuple[int, int]]) -> list[PullResult]:
        """Pulls of every ``(offset, maxMsgNums)`` at once: by the API's ``pull_tiles`` where it has one
        (MQClientAPI: one timer and one future for all), else one :meth:`_pull` each; a tile that timed out or
        lost its connection is sent again on its own (pullRetries)."""
        target = self.target
        pull_tiles = getattr(target.api, "pull_tiles", None)
        if pull_tiles is None:
            return list(await asyncio.gather(*(self._pull(o, n) for o, n in tiles)))
        try:
            answers = await pull_tiles(target.addr, group=target.group, topic=self.topic, queue_id=self.queue_id,
                                       tiles=tiles, sys_flag=PULL_FLAGS, subscription=self.subscription,
                                       timeout=target.timeout_s, body_buffer=True)
        except (RemotingTimeoutError, RemotingConnectError) as exc:   # no connection: no tile was sent
            answers = [exc] * len(tiles)
        again = [i for i, a in enumerate(answers) if isinstance(a, (RemotingTimeoutError, RemotingConnectError))]
        if again:   # sent again concurrently, as the tiles of the gather above would be
            retried = await asyncio.gather(*(self._pull(*tiles[i], cast(BaseException, answers[i])) for i in again))
            for i, result in zip(again, retried, strict=True):
                answers[i] = result
        results: list[PullResult] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
            results.append(answer)
        return results

    async def next_chunk(self) -> list[Body]:
        bodies: list[Body] = []
        size = 0
        while self.offset < self.end and size < BATCH_BYTES:
            k = self.batch
            pull_bytes = k * self.record_bytes if k is not None else 0
            if size and size + pull_bytes > BATCH_BYTES:
                break   # a chunk is one decode unit of pack_pull_bodies: a pull past it would start a small one
            if k is not None and self.end - self.offset > k:
                tiles = max(1, min(TILES_IN_FLIGHT, (BATCH_BYTES - size) // max(pull_bytes, 1)))
                starts = range(self.offset, min(self.end, self.offset + tiles * k), k)
                results = await self._pull_tiles([(o, min(k, self.end - o)) for o in starts])
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
            want = min(self.end - self.offset, self.target.batch_size)
            (result,) = await self._pull_tiles([(self.offset, want)])   # one tile: pull_tiles' cheaper send
            body = self._advance(result)
            if body:
                bodies.append(body)
                size += len(body)
                if self.subscription == "*" and self.batch is None and self.offset > before:
                    self.batch = self.offset - before
                    self.record_bytes = max(-(-len(body) // self.batch), 1)
        if self.offset >= self.end:
            self.done = True
        return bodies

    def _advance(self, result: PullResult) -> Body | None:
        """Move past one pull's answer: its body (FOUND), None otherwise; data loss as failOnDataLoss says."""
        view = self.target   # the broker pulled from
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
        return f"topic {self.topic!r} on broker {self.target.broker_name!r} queue {self.queue_id}"

    def _lost(self, resume: int) -> None:
        """Messages ``[offset, resume)`` are gone: DataLossError (failOnDataLoss) or a logged skip."""
        lost_to = min(resume, self.end)
        message = f"messages [{self.offset}, {lost_to}) of {self._where()} are gone (removed by retention)"
        if self.fail_on_data_loss:
            raise DataLossError(message + "; set failOnDataLoss=false to skip them", topic=self.topic,
                                broker_name=self.target.broker_name, queue_id=self.queue_id,
                                lost_from=self.offset, lost_to=lost_to)
        log.warning("%s; continuing at offset %d (failOnDataLoss=false)", message, resume)
        self.offset = resume


__all__ = ["Body", "PULL_FLAGS", "PULL_MAX_NUMS", "PULL_TIMEOUT_S", "PullApi", "PullTarget", "RANGES_IN_FLIGHT",
           "TILES_IN_FLIGHT", "pull_ranges"]
