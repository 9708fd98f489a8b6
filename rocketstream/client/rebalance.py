"""``RebalanceImpl`` (seeds 000/001; ``RebalanceImpl.java`` / ``RebalancePushImpl.java`` 4.9.8, spec §5.8).

Per subscribed topic: BROADCASTING takes every queue; CLUSTERING asks a broker for the group's consumer ids
(GET_CONSUMER_LIST_BY_GROUP), sorts queues and ids as Java does and keeps what the allocation strategy
(:mod:`rocketstream.client.allocate`, AVG by default) gives this client. The result is applied to
``process_queue_table``: queues no longer assigned are dropped (``remove_unnecessary_message_queue``: offset
persisted; orderly: unlocked on the broker), new queues get a ProcessQueue, a start offset
(:meth:`RebalanceImpl.compute_pull_from_where`, spec §5.8 table) and a :class:`PullRequest`; orderly
consumption must first lock a new queue (LOCK_BATCH_MQ) and skips it until the lock succeeds.

The rebalance itself runs on the client instance's event loop, every 20 s and on NOTIFY_CONSUMER_IDS_CHANGED
(the instance's RebalanceService). Subclasses (the push and lite-pull consumers) fill in the hooks
``remove_unnecessary_message_queue``, ``dispatch_pull_requests`` and ``message_queue_changed``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rocketstream.client.allocate import MessageQueue, allocate, sort_inputs
from rocketstream.client.offset_store import OffsetStore, ReadOffsetType
from rocketstream.client.process_queue import ProcessQueue
from rocketstream.client.pull_service import PullRequest
from rocketstream.client.subscription import SubscriptionData
from rocketstream.errors import AllocationError, MQClientError, OptionError, RemotingError

if TYPE_CHECKING:
    from rocketstream.client.instance import MQClientInstance

__all__ = [
    "CLUSTERING",
    "BROADCASTING",
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
    "CONSUME_FROM_WHERE",
    "Subscription",
    "RebalanceImpl",
    "parse_consume_timestamp",
    "default_consume_timestamp",
    "RETRY_GROUP_TOPIC_PREFIX",
    "retry_topic",
]

log = logging.getLogger("rocketstream.client")

CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"
CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
# deprecated values Java treats as CONSUME_FROM_LAST_OFFSET
_DEPRECATED_LAST = ("CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST", "CONSUME_FROM_MIN_OFFSET",
                    "CONSUME_FROM_MAX_OFFSET")
CONSUME_FROM_WHERE = (CONSUME_FROM_LAST_OFFSET, CONSUME_FROM_FIRST_OFFSET, CONSUME_FROM_TIMESTAMP, *_DEPRECATED_LAST)
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
CONSUME_TIMESTAMP_FORMAT = "%Y%m%d%H%M%S"   # UtilAll.YYYYMMDDHHMMSS


def retry_topic(group: str) -> str:
    """``MixAll.getRetryTopic``."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def default_consume_timestamp() -> str:
    """``DefaultMQPushConsumer.consumeTimestamp``: half an hour ago, ``yyyyMMddHHmmss`` local time."""
    return datetime.fromtimestamp(time.time() - 30 * 60).strftime(CONSUME_TIMESTAMP_FORMAT)


def parse_consume_timestamp(value: object, option: str = "consume_timestamp") -> int:
    """Milliseconds since the epoch from an int (ms), a datetime, or Java's ``yyyyMMddHHmmss`` text."""
    if isinstance(value, bool):
        raise OptionError(option, "must be ms since the epoch, a datetime or 'yyyyMMddHHmmss'", value)
    if isinstance(value, int):
        if value < 0:
            raise OptionError(option, "must be >= 0", value)
        return value
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, str):
        try:
            return int(datetime.strptime(value, CONSUME_TIMESTAMP_FORMAT).timestamp() * 1000)
        except ValueError:
            raise OptionError(option, "is not 'yyyyMMddHHmmss'", value) from None
    raise OptionError(option, "must be ms since the epoch, a datetime or 'yyyyMMddHHmmss'", value)


@dataclass
class Subscription:
    """One topic's ``SubscriptionData`` as the heartbeat carries it (the tag parse is immutable; the version
    changes when the rebalance result changes)."""

    topic: str
    data: SubscriptionData
    expression_type: str = "TAG"
    sub_version: int = 0

    def __post_init__(self) -> None:
        if not self.sub_version:
            self.sub_version = int(time.time() * 1000)

    @property
    def expression(self) -> str:
        return self.data.sub_string

    def to_json(self) -> dict[str, Any]:
        """``SubscriptionData`` fields in fastjson's (sorted) order."""
        sql = self.expression_type != "TAG"
        return {"classFilterMode": False, "codeSet": [] if sql else sorted(self.data.codes),
                "expressionType": self.expression_type, "subString": self.data.sub_string,
                "subVersion": self.sub_version, "tagsSet": [] if sql else sorted(self.data.tags),
                "topic": self.topic}

    def tags_filter(self) -> SubscriptionData | None:
        """What the client-side exact tag check keeps (None: everything; SQL92 is the broker's)."""
        return None if self.expression_type != "TAG" or self.data.sub_all else self.data


class RebalanceImpl:
    """Queue assignment of one consumer group in this client; ``consume_type`` CONSUME_PASSIVELY (push) or
    CONSUME_ACTIVELY (lite pull)."""

    consume_type = "CONSUME_PASSIVELY"

    def __init__(self, group: str, message_model: str, allocate_strategy: str, *,
                 instance: MQClientInstance | None, offset_store: OffsetStore | None,
                 consume_from_where: str = CONSUME_FROM_LAST_OFFSET, consume_timestamp_ms: int | None = None,
                 allocate_args: dict[str, Any] | None = None,
                 lock_max_live_time_s: float | None = None) -> None:
        self.group = group
        self.message_model = message_model
        self.allocate_strategy = allocate_strategy
        self.allocate_args = dict(allocate_args or {})
        self.instance = instance
        self.offset_store = offset_store
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.lock_max_live_time_s = lock_max_live_time_s
        self.subscription_inner: dict[str, Subscription] = {}
        self.topic_subscribe_info: dict[str, set[MessageQueue]] = {}
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        self._rebalance_lock = asyncio.Lock()

    # ------------------------------------------------------------------ identity / lookups
    @property
    def client_id(self) -> str:
        if self.instance is None:
            raise MQClientError("no client instance")
        return self.instance.client_id

    def new_process_queue(self) -> ProcessQueue:
        if self.lock_max_live_time_s is None:
            return ProcessQueue()
        return ProcessQueue(lock_max_live_time_s=self.lock_max_live_time_s)

    # ------------------------------------------------------------------ the rebalance
    async def do_rebalance(self, is_order: bool) -> None:
        """``doRebalance``: every subscribed topic, then drop queues of topics no longer subscribed."""
        async with self._rebalance_lock:
            for topic in list(self.subscription_inner):
                try:
                    await self.rebalance_by_topic(topic, is_order)
                except Exception as exc:   # one topic's failure must not stop the others
                    if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                        log.warning("%s: rebalance of %s failed: %s", self.group, topic, exc, exc_info=exc)
            await self.truncate_message_queue_not_my_topic()

    async def rebalance_by_topic(self, topic: str, is_order: bool) -> None:
        mq_set = self.topic_subscribe_info.get(topic)
        if self.message_model == BROADCASTING:
            if not mq_set:
                if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                    log.warning("%s: no queues known for topic %s", self.group, topic)
                return
            requests = await self.update_process_queue_table_in_rebalance(topic, set(mq_set), is_order)
            if requests is not None:
                await self.message_queue_changed(topic, set(mq_set), set(mq_set))
                self.dispatch_pull_requests(requests)
            return
        cids = await self.find_consumer_ids(topic)
        if not mq_set:
            if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                log.warning("%s: no queues known for topic %s", self.group, topic)
            return
        if not cids:
            log.warning("%s: no consumer ids for topic %s", self.group, topic)
            return
        mine = self.allocate(topic, mq_set, cids)
        if mine is None:
            return
        requests = await self.update_process_queue_table_in_rebalance(topic, mine, is_order)
        if requests is not None:
            log.info("%s: rebalance of %s: %d queues of %d, %d consumers: %s", self.group, topic, len(mine),
                     len(mq_set), len(cids), sorted(mine))
            await self.message_queue_changed(topic, set(mq_set), mine)
            self.dispatch_pull_requests(requests)

    def allocate(self, topic: str, mq_set: Iterable[MessageQueue], cids: Iterable[str]) -> set[MessageQueue] | None:
        """The queues of ``topic`` this client owns (inputs sorted as RebalanceImpl does); None on bad input."""
        mq_all, cid_all = sort_inputs(mq_set, cids)
        try:
            return set(allocate(self.allocate_strategy, self.client_id, mq_all, cid_all, **self.allocate_args))
        except AllocationError as exc:
            log.error("%s: allocation of %s with %s failed: %s", self.group, topic, self.allocate_strategy, exc)
            return None

    async def update_process_queue_table_in_rebalance(self, topic: str, mq_set: set[MessageQueue],
                                                      is_order: bool) -> list[PullRequest] | None:
        """``updateProcessQueueTableInRebalance``: the pull requests of new queues when anything changed,
        else None."""
        changed = False
        for mq, pq in list(self.process_queue_table.items()):
            if mq.topic != topic:
                continue
            if mq not in mq_set:
                pq.dropped = True
                if await self.remove_unnecessary_message_queue(mq, pq):
                    self.process_queue_table.pop(mq, None)
                    changed = True
                    log.info("%s: queue %s removed from this consumer", self.group, mq)
            elif self.consume_type == "CONSUME_PASSIVELY" and pq.is_pull_expired():
                pq.dropped = True
                if await self.remove_unnecessary_message_queue(mq, pq):
                    self.process_queue_table.pop(mq, None)
                    changed = True
                    log.warning("%s: queue %s was not pulled for too long: dropped, recreated next time",
                                self.group, mq)
        requests: list[PullRequest] = []
        for mq in sorted(mq_set):
            if mq in self.process_queue_table:
                continue
            if is_order and not await self.lock(mq):
                log.warning("%s: new queue %s not taken: the broker lock failed", self.group, mq)
                continue
            self.remove_dirty_offset(mq)
            pq = self.new_process_queue()
            if is_order:
                pq.mark_locked(True)
            try:
                next_offset = await self.compute_pull_from_where(mq)
            except (RemotingError, MQClientError, asyncio.TimeoutError) as exc:
                log.warning("%s: start offset of %s not computed: %s", self.group, mq, exc)
                next_offset = -1
            if next_offset < 0:
                if is_order:
                    await self.unlock(mq, oneway=True)
                continue
            self.process_queue_table[mq] = pq
            requests.append(PullRequest(self.group, mq, pq, next_offset))
            changed = True
            log.info("%s: queue %s added, pulling from %d", self.group, mq, next_offset)
        return requests if changed else None

    async def truncate_message_queue_not_my_topic(self) -> None:
        for mq, pq in list(self.process_queue_table.items()):
            if mq.topic not in self.subscription_inner:
                pq.dropped = True
                self.process_queue_table.pop(mq, None)
                log.info("%s: queue %s of a topic no longer subscribed removed", self.group, mq)

    async def remove_process_queue(self, mq: MessageQueue) -> None:
        pq = self.process_queue_table.pop(mq, None)
        if pq is not None:
            pq.dropped = True
            await self.remove_unnecessary_message_queue(mq, pq)

    # ------------------------------------------------------------------ hooks
    def remove_dirty_offset(self, mq: MessageQueue) -> None:
        if self.offset_store is not None:
            self.offset_store.remove_offset(mq)

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        if self.offset_store is not None:
            await self.offset_store.persist(mq)
            self.offset_store.remove_offset(mq)
        return True

    def dispatch_pull_requests(self, requests: list[PullRequest]) -> None:
        """Start pulling the new queues (the push consumer queues them on its PullMessageService)."""

    async def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        """Called after the table of ``topic`` changed."""

    # ------------------------------------------------------------------ network
    async def find_consumer_ids(self, topic: str) -> list[str] | None:
        """``findConsumerIdList``: the group's client ids from a broker of the topic's route."""
        inst = self._instance()
        addr = inst.any_broker_addr_of(topic)
        if addr is None:
            await inst.update_route(topic)
            addr = inst.any_broker_addr_of(topic)
        if addr is None:
            return None
        try:
            return await inst.api.consumer_ids(addr, self.group)
        except RemotingError as exc:
            log.warning("%s: consumer ids from %s: %s", self.group, addr, exc)
            return None

    def _instance(self) -> MQClientInstance:
        if self.instance is None:
            raise MQClientError(f"consumer group {self.group} has no client instance")
        return self.instance

    async def master_addr(self, broker_name: str, topic: str) -> str:
        return await self._instance().find_master_addr(broker_name, topic)

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self._instance().api.max_offset(await self.master_addr(mq.broker_name, mq.topic), mq.topic,
                                                     mq.queue_id)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self._instance().api.min_offset(await self.master_addr(mq.broker_name, mq.topic), mq.topic,
                                                     mq.queue_id)

    async def search_offset(self, mq: MessageQueue, ts_ms: int) -> int:
        return await self._instance().api.search_offset(await self.master_addr(mq.broker_name, mq.topic), mq.topic,
                                                        mq.queue_id, ts_ms)

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """``RebalancePushImpl.computePullFromWhereWithException`` (4.9.8, spec §5.8): the stored offset
        when there is one; else LAST: the queue's max offset (0 for a %RETRY% topic), FIRST: 0, TIMESTAMP:
        the offset searched for ``consume_timestamp`` (max offset for a %RETRY% topic); -1: skip the queue
        for now (the offset could not be read)."""
        if self.offset_store is None:
            raise MQClientError("no offset store")
        last = await self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
        if last >= 0:
            return last
        if last != -1:
            return -1
        is_retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        where = self.consume_from_where
        if where == CONSUME_FROM_FIRST_OFFSET:
            return 0
        if where == CONSUME_FROM_TIMESTAMP:
            if is_retry:
                return await self.max_offset(mq)
            ts = self.consume_timestamp_ms
            if ts is None:
                ts = parse_consume_timestamp(default_consume_timestamp())
            return await self.search_offset(mq, ts)
        # CONSUME_FROM_LAST_OFFSET and the deprecated values
        return 0 if is_retry else await self.max_offset(mq)

    # ------------------------------------------------------------------ orderly locks
    def _by_broker(self, mqs: Iterable[MessageQueue]) -> dict[str, set[MessageQueue]]:
        out: dict[str, set[MessageQueue]] = {}
        for mq in mqs:
            out.setdefault(mq.broker_name, set()).add(mq)
        return out

    async def lock(self, mq: MessageQueue) -> bool:
        """``lock``: LOCK_BATCH_MQ for one queue on its broker's master; True when this client holds it."""
        inst = self._instance()
        try:
            addr = await self.master_addr(mq.broker_name, mq.topic)
            locked = await inst.api.lock_batch(addr, self.group, self.client_id, {mq})
        except (RemotingError, MQClientError) as exc:
            log.warning("%s: lock of %s failed: %s", self.group, mq, exc)
            return False
        for m in locked:
            pq = self.process_queue_table.get(m)
            if pq is not None:
                pq.mark_locked(True)
        return mq in locked

    async def lock_all(self) -> None:
        """``lockAll`` (every 20 s for orderly consumption): renew the locks of every assigned queue; a queue
        the broker did not lock is marked unlocked and not consumed."""
        inst = self._instance()
        for broker, mqs in self._by_broker(self.process_queue_table).items():
            topic = next(iter(mqs)).topic
            try:
                addr = await self.master_addr(broker, topic)
                locked = await inst.api.lock_batch(addr, self.group, self.client_id, mqs)
            except (RemotingError, MQClientError) as exc:
                log.warning("%s: lock of %d queues on %s failed: %s", self.group, len(mqs), broker, exc)
                continue
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is None:
                    continue
                if mq in locked:
                    pq.mark_locked(True)
                else:
                    if pq.locked:
                        log.warning("%s: lock of %s lost", self.group, mq)
                    pq.locked = False

    async def unlock(self, mq: MessageQueue, *, oneway: bool) -> None:
        inst = self._instance()
        try:
            addr = await self.master_addr(mq.broker_name, mq.topic)
            await inst.api.unlock_batch(addr, self.group, self.client_id, {mq}, oneway=oneway)
        except (RemotingError, MQClientError) as exc:
            log.warning("%s: unlock of %s failed: %s", self.group, mq, exc)

    async def unlock_all(self, *, oneway: bool) -> None:
        inst = self._instance()
        for broker, mqs in self._by_broker(self.process_queue_table).items():
            try:
                addr = await self.master_addr(broker, next(iter(mqs)).topic)
                await inst.api.unlock_batch(addr, self.group, self.client_id, mqs, oneway=oneway)
            except (RemotingError, MQClientError) as exc:
                log.warning("%s: unlock of %d queues on %s failed: %s", self.group, len(mqs), broker, exc)
                continue
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is not None:
                    pq.locked = False
