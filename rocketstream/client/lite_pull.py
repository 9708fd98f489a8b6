"""``LitePullConsumer``: RocketMQ's ``DefaultLitePullConsumer`` (``DefaultLitePullConsumerImpl`` 4.9.8).

``subscribe(topic, expression)`` takes part in the group's rebalance (:class:`RebalanceLitePullImpl`; no
``%RETRY%`` subscription, no locks); ``assign(queues)`` reads exactly the queues given. One pull task per
queue (``PullTaskImpl``) long-polls the broker (hold 20 s, sysFlag SUSPEND|SUBSCRIPTION|LITE_PULL) into the
queue's ProcessQueue and a shared cache of consume requests, with the same flow control as the push consumer
(1,000 messages / 100 MiB per queue, 2,000-offset span) plus ``pull_threshold_for_all`` (10,000 cached
messages). :meth:`LitePullConsumer.poll` returns the next cached batch and moves the queue's consumed offset
past it; :meth:`LitePullConsumer.commit` (and auto-commit every 5 s, checked on poll) stores consumed offsets
on the broker (CLUSTERING) or in offsets.json (BROADCASTING).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rocketstream.client.allocate import MessageQueue
from rocketstream.client.api import build_pull_sys_flag
from rocketstream.client.common import MessageExt, PullResult, PullStatus, check_group, check_topic
from rocketstream.client.config import (
    AUTO_COMMIT_INTERVAL_S,
    PULL_THRESHOLD_FOR_ALL,
    LitePullConsumerConfig,
)
from rocketstream.client.instance import MQClientInstance
from rocketstream.client.namespace import unwrap, wrap
from rocketstream.client.offset_store import (
    BrokerOffsetClient,
    LocalFileOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from rocketstream.client.process_queue import ProcessQueue
from rocketstream.client.pull_decode import process_pull_result_fast as process_pull_result
from rocketstream.client.pull_service import PullRequest, flow_control
from rocketstream.client.push_consumer import EXPRESSION_TYPES, check_client_config
from rocketstream.client.queue_change import (
    FIRST_CHECK_DELAY_S,
    TopicMessageQueueChangeListener,
    TopicQueueWatcher,
)
from rocketstream.client.rebalance import (
    CLUSTERING,
    RebalanceImpl,
    Subscription,
)
from rocketstream.client.route import subscribe_queues
from rocketstream.client.subscription import SubscriptionData
from rocketstream.errors import MQClientError, OptionError, RemotingError

__all__ = ["LitePullConsumer", "LitePullConsumerConfig", "RebalanceLitePullImpl", "AUTO_COMMIT_INTERVAL_S",
           "PULL_THRESHOLD_FOR_ALL"]

log = logging.getLogger("rocketstream.client")

CONSUMER_TIMEOUT_WHEN_SUSPEND_S = 30.0  # consumerTimeoutMillisWhenSuspend
PULL_TIME_DELAY_ON_EXCEPTION_S = 1.0    # PULL_TIME_DELAY_MILLS_ON_EXCEPTION
PULL_TIME_DELAY_WHEN_FLOW_CONTROL_S = 0.050
PULL_TIME_DELAY_WHEN_PAUSE_S = 1.0


_PullArgs = tuple[int, str, Subscription]   # a pull's offset, broker address and subscription


@dataclass
class _ConsumeRequest:
    messages: list[MessageExt]
    mq: MessageQueue
    pq: ProcessQueue


class RebalanceLitePullImpl(RebalanceImpl):
    consume_type = "CONSUME_ACTIVELY"

    def __init__(self, consumer: LitePullConsumer, **kw: Any) -> None:
        super().__init__(**kw)
        self.consumer = consumer

    async def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        self.consumer._queues_changed(topic, mq_divided)
        listener = self.consumer.message_queue_listeners.get(topic)
        if listener is not None:   # subscribe(..., message_queue_listener=): after the assignment changed
            try:
                await asyncio.to_thread(listener, topic, set(mq_all), set(mq_divided))
            except Exception:   # the user's listener: logged, the rebalance goes on
                log.exception("%s: MessageQueueListener of %s raised", self.group, topic)

    def dispatch_pull_requests(self, requests: list[PullRequest]) -> None:
        """The new queues' start offsets become their pull tasks' first offsets."""
        for r in requests:
            self.consumer._pull_offset.setdefault(r.message_queue, r.next_offset)
            self.consumer._consume_offset.setdefault(r.message_queue, r.next_offset)

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Auto-commit: the consumed offset of a queue taken away is stored before it is persisted."""
        off = self.consumer._consume_offset.get(mq)
        if self.consumer.config.auto_commit and off is not None and self.offset_store is not None:
            self.offset_store.update_offset(mq, off, False)
        return await super().remove_unnecessary_message_queue(mq, pq)


class LitePullConsumer:
    """A pull consumer of one group; ``poll`` returns lists of :class:`MessageExt`.

    With ``namespace`` (``ClientConfig.namespace``) the group and topics are in the namespace on the broker
    (``self.group`` is the group as the broker knows it); the API takes and gives topics and queues without
    it (``withNamespace`` / ``queuesWithNamespace`` on the way in, ``parseMessageQueues`` and ``poll``'s
    ``resetTopic`` on the way out)."""

    def __init__(self, group: str, config: LitePullConsumerConfig | None = None, **options: Any) -> None:
        """``config`` and/or :class:`LitePullConsumerConfig`'s field names as keywords
        (``LitePullConsumer("g", namesrv="127.0.0.1:9876", pull_batch_size=32)``); the consumer keeps its own
        copy as ``self.config``."""
        check_group(group, argument="group")
        self.config = cfg = LitePullConsumerConfig.from_options(config, options)
        self.namespace = cfg.namespace
        self.group = wrap(self.namespace, group)   # DefaultLitePullConsumer.start: wrapNamespace(consumerGroup)
        self.instance: MQClientInstance | None = None
        self.offset_store: OffsetStore | None = None
        self.rebalance = RebalanceLitePullImpl(self, group=self.group, message_model=cfg.message_model,
                                               allocate_strategy=cfg.allocate_strategy, instance=None,
                                               offset_store=None, consume_from_where=cfg.consume_from_where,
                                               consume_timestamp_ms=cfg.consume_timestamp_ms,
                                               allocate_args=cfg.allocate_args)
        self._subscriptions: dict[str, Subscription] = {}
        self._mode: str | None = None   # "subscribe" | "assign"
        self._state = "CREATE_JUST"
        self._lock = threading.RLock()
        # the poll cache (consumeRequestCache): a SimpleQueue, whose put and get are C calls without the Python
        # Condition that queue.Queue takes on both sides
        self._cache: queue.SimpleQueue[_ConsumeRequest] = queue.SimpleQueue()
        self._cached_messages = 0
        # AssignedMessageQueue: per queue its ProcessQueue, pull offset, consumed offset, seek offset, pause
        self._assigned: dict[MessageQueue, ProcessQueue] = {}
        self._pull_offset: dict[MessageQueue, int] = {}
        self._consume_offset: dict[MessageQueue, int] = {}
        self._seek_offset: dict[MessageQueue, int] = {}
        self._paused: set[MessageQueue] = set()
        self._tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._last_commit = time.monotonic()
        self._stopping = False
        # TopicMessageQueueChangeListener (queue_change.py) and subscribe()'s MessageQueueListener per topic
        self.first_topic_metadata_check_s = FIRST_CHECK_DELAY_S
        self.queue_watcher = TopicQueueWatcher(self.group, self._fetch_queues)
        self.message_queue_listeners: dict[str, Callable[[str, set[MessageQueue], set[MessageQueue]], object]] = {}
        self._watch_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"LitePullConsumer({self.group}, {self.config.message_model}, {self._state})"

    # ------------------------------------------------------------------ namespace
    def _in(self, mq: MessageQueue) -> MessageQueue:
        """``queueWithNamespace``: a queue the user names, as the broker knows it."""
        if not isinstance(mq, MessageQueue):
            raise OptionError("mq", "must be a MessageQueue", mq)
        topic = wrap(self.namespace, mq.topic)
        return mq if topic == mq.topic else MessageQueue(topic, mq.broker_name, mq.queue_id)

    def _out(self, mq: MessageQueue) -> MessageQueue:
        """A queue as the user sees it (``parseMessageQueues``)."""
        topic = unwrap(self.namespace, mq.topic)
        return mq if topic == mq.topic else MessageQueue(topic, mq.broker_name, mq.queue_id)

    # ------------------------------------------------------------------ configuration
    def subscribe(self, topic: str, expression: str | None = "*", *, expression_type: str = "TAG",
                  message_queue_listener: Callable[[str, set[MessageQueue], set[MessageQueue]], object] | None = None,
                  ) -> None:
        """Subscribe to ``topic`` (group rebalance). ``message_queue_listener(topic, mq_all, mq_divided)`` is
        called after each change of this consumer's queues of the topic (``subscribe(topic, subExpression,
        MessageQueueListener)``)."""
        check_topic(topic)
        if message_queue_listener is not None and not callable(message_queue_listener):
            raise OptionError("message_queue_listener", "must be callable (topic, mq_all, mq_divided)",
                              message_queue_listener)
        topic = wrap(self.namespace, topic)
        if message_queue_listener is not None and self.namespace:
            user_mq_listener = message_queue_listener

            def unwrapped_mq_listener(t: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> object:
                return user_mq_listener(unwrap(self.namespace, t), {self._out(q) for q in mq_all},
                                        {self._out(q) for q in mq_divided})
            message_queue_listener = unwrapped_mq_listener
        with self._lock:
            if self._mode == "assign":
                raise MQClientError("subscribe and assign cannot be mixed (the consumer assigned queues)")
            if expression_type not in EXPRESSION_TYPES:
                raise OptionError("expression_type", f"must be one of {', '.join(EXPRESSION_TYPES)}",
                                  expression_type)
            if expression_type == "TAG":
                data = SubscriptionData.parse_option(expression, "expression")
            else:
                data = SubscriptionData.parse_sql92(expression)
            sub = Subscription(topic, data, expression_type)
            if message_queue_listener is not None:
                self.message_queue_listeners[topic] = message_queue_listener
            self._mode = "subscribe"
            self._subscriptions[topic] = sub
            self.rebalance.subscription_inner[topic] = sub
        if self._state == "RUNNING" and self.instance is not None:
            self.instance.spawn(self._refresh(topic))

    async def _refresh(self, topic: str) -> None:
        assert self.instance is not None
        await self.instance.update_route(topic)
        await self.instance.send_heartbeat_to_all()
        await self.rebalance.do_rebalance(False)

    def assign(self, queues: Iterable[MessageQueue], expression: str | None = "*") -> None:
        """Read exactly ``queues`` (no rebalance); a later ``assign`` replaces the set."""
        mqs = {self._in(mq) for mq in queues}
        if not mqs:
            raise OptionError("queues", "must not be empty")
        with self._lock:
            if self._mode == "subscribe":
                raise MQClientError("subscribe and assign cannot be mixed (the consumer subscribed topics)")
            self._mode = "assign"
            for mq in mqs:
                check_topic(mq.topic, argument="queues")
                if mq.topic not in self._subscriptions:
                    sub = Subscription(mq.topic, SubscriptionData.parse_option(expression, "expression"))
                    self._subscriptions[mq.topic] = sub
                    self.rebalance.subscription_inner[mq.topic] = sub
            self._assign_queues = mqs
        if self._state == "RUNNING":
            self._run(self._apply_assignment(mqs))

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> LitePullConsumer:
        with self._lock:
            if self._state != "CREATE_JUST":
                raise MQClientError(f"the LitePullConsumer service state is {self._state}, not CREATE_JUST")
            self._state = "START_FAILED"
        inst = MQClientInstance.get(self.config.namesrv, self.config.instance_name,
                                    credentials=self.config.credentials, tls=self.config.tls)
        self.instance = inst
        self.rebalance.instance = inst
        if self.config.message_model == CLUSTERING:
            store: OffsetStore = RemoteBrokerOffsetStore(self.group, BrokerOffsetClient(inst, self.group))
        else:
            local_id = f"{inst.client_id.split('@', 1)[0]}@{self.config.instance_name}"
            store = LocalFileOffsetStore(local_id, self.group, self.config.offset_store_dir)
        store.load()
        self.offset_store = store
        self.rebalance.offset_store = store
        inst.register_consumer(self.group, self)
        try:
            inst.start()
            if self.config.rebalance_interval_s is not None:
                inst.rebalance_interval = min(inst.rebalance_interval, self.config.rebalance_interval_s)
            inst.run(self._start_on_loop(), 30.0)
        except BaseException:
            inst.consumers.pop(self.group, None)
            inst.shutdown()
            raise
        self._last_commit = time.monotonic()
        return self

    async def _start_on_loop(self) -> None:
        assert self.instance is not None
        for topic in list(self._subscriptions):
            try:
                found = await self.instance.update_route(topic)
            except RemotingError as exc:
                raise MQClientError(f"route of topic {topic} not available: {exc}") from exc
            if not found:
                log.warning("%s: topic %s has no route yet", self.group, topic)
        for sub in list(self._subscriptions.values()):
            if sub.expression_type != "TAG":
                await check_client_config(self.instance, self.group, sub)
        await self.instance.send_heartbeat_to_all()
        for topic in list(self.queue_watcher.listeners):
            await self.queue_watcher.prime(topic)
        self._watch_task = asyncio.get_running_loop().create_task(
            self.queue_watcher.run(self.first_topic_metadata_check_s,
                                   lambda: self.config.topic_metadata_check_interval_s),
            name=f"fetchTopicMessageQueuesAndCompare[{self.group}]")
        self._state = "RUNNING"
        if self._mode == "subscribe":
            await self.rebalance.do_rebalance(False)
        elif self._mode == "assign":
            await self._apply_assignment(self._assign_queues)

    def _run(self, coro: Any, timeout: float = 30.0) -> Any:
        if self.instance is None or self._state != "RUNNING":
            coro.close()
            raise MQClientError(f"the LitePullConsumer {self.group} is not running (state {self._state})")
        return self.instance.run(coro, timeout)

    def shutdown(self) -> None:
        with self._lock:
            if self._state != "RUNNING":
                self._state = "SHUTDOWN_ALREADY"
                return
        inst = self.instance
        assert inst is not None
        try:
            steps: list[tuple[str, Callable[[], object]]] = [
                ("stop pulling", lambda: inst.run(self._stop_tasks(), 10.0)),
                ("commit", self.commit),
                ("unregister", lambda: inst.run(inst.unregister_consumer(self.group), 10.0))]
            for what, step in steps:
                try:
                    step()
                except (RemotingError, MQClientError) as exc:   # broker gone: logged, shutdown goes on
                    log.warning("%s: shutdown: %s failed: %s", self.group, what, exc)
                if what == "commit":
                    self._state = "SHUTDOWN_ALREADY"
        finally:
            self._state = "SHUTDOWN_ALREADY"
            inst.consumers.pop(self.group, None)
            inst.shutdown()

    async def _stop_tasks(self) -> None:
        # the flag, not only the cancel: Python 3.11's wait_for returns a result that arrives together with
        # the cancellation and drops the CancelledError, so a pull task must also see that it has to stop
        self._stopping = True
        if self._watch_task is not None:
            self._watch_task.cancel()
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for t in tasks:
            t.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=5.0)
            for t in pending:
                log.warning("%s: %s did not stop within 5 s", self.group, t.get_name())

    # ------------------------------------------------------------------ MQClientInstance callbacks
    def consumer_data(self) -> dict[str, Any]:
        subs = [s.to_json() for s in self._subscriptions.values()] if self._mode == "subscribe" else []
        return {"consumeFromWhere": self.config.consume_from_where, "consumeType": "CONSUME_ACTIVELY",
                "groupName": self.group, "messageModel": self.config.message_model, "subscriptionDataSet": subs,
                "unitMode": False}

    def subscribed_topics(self) -> set[str]:
        return set(self._subscriptions)

    def update_topic_subscribe_info(self, topic: str, mqs: set[MessageQueue]) -> None:
        if topic in self._subscriptions:
            self.rebalance.topic_subscribe_info[topic] = set(mqs)

    async def do_rebalance(self) -> None:
        if self._state == "RUNNING" and self._mode == "subscribe":
            await self.rebalance.do_rebalance(False)

    async def persist_offsets(self) -> None:
        if self.offset_store is not None and self._state == "RUNNING":
            await self.offset_store.persist_all(list(self._assigned))

    # ------------------------------------------------------------------ assignment
    def _queues_changed(self, topic: str, mine: set[MessageQueue]) -> None:
        """``updateAssignQueueAndStartPullTask`` for one topic (on the loop): the rebalance's process queues
        are the assigned ones."""
        for mq in [m for m in self._assigned if m.topic == topic and m not in mine]:
            self._drop(mq)
        for mq in mine:
            pq = self.rebalance.process_queue_table.get(mq)
            if pq is not None and self._assigned.get(mq) is not pq:
                self._start_task(mq, pq)

    async def _apply_assignment(self, mqs: set[MessageQueue]) -> None:
        for mq in [m for m in self._assigned if m not in mqs]:
            self._drop(mq)
            self.rebalance.process_queue_table.pop(mq, None)
        for mq in sorted(mqs):
            if mq not in self._assigned:
                pq = ProcessQueue()
                self.rebalance.process_queue_table[mq] = pq
                self._start_task(mq, pq)

    def _drop(self, mq: MessageQueue) -> None:
        pq = self._assigned.pop(mq, None)
        if pq is not None:
            pq.dropped = True
        task = self._tasks.pop(mq, None)
        if task is not None:
            task.cancel()
        self._pull_offset.pop(mq, None)
        self._consume_offset.pop(mq, None)

    def _start_task(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        old = self._tasks.pop(mq, None)
        if old is not None:
            old.cancel()
        self._assigned[mq] = pq
        self._tasks[mq] = asyncio.get_running_loop().create_task(self._pull_task(mq, pq),
                                                                  name=f"PullTaskImpl[{mq}]")

    def assignment(self) -> set[MessageQueue]:
        return {self._out(mq) for mq in self._assigned}

    async def _next_pull_offset(self, mq: MessageQueue) -> int:
        """``nextPullOffset``: a pending seek, else the pull cursor, else the committed / computed offset."""
        if mq in self._seek_offset:
            off = self._seek_offset.pop(mq)
            self._consume_offset[mq] = off
            self._pull_offset[mq] = off
            return off
        if mq in self._pull_offset:
            return self._pull_offset[mq]
        off = await self.rebalance.compute_pull_from_where(mq)
        if off >= 0:
            self._pull_offset[mq] = off
            self._consume_offset.setdefault(mq, off)
        return off

    def _held_back(self, pq: ProcessQueue, count: int = 0, size: int = 0, last_offset: int | None = None) -> bool:
        """The flow control checked before each pull (``PullTaskImpl.run``: pullThresholdForAll,
        pullThresholdForQueue, pullThresholdSizeForQueue, consumeMaxSpan), counting ``count`` messages of
        ``size`` bytes up to ``last_offset`` that are pulled but not yet in ``pq``."""
        if self._cached_messages + count > self.config.pull_threshold_for_all:
            return True
        if not count:
            return flow_control(pq, pull_threshold_for_queue=self.config.pull_threshold_for_queue,
                                pull_threshold_size_for_queue_mib=self.config.pull_threshold_size_for_queue,
                                consume_concurrently_max_span=self.config.consume_max_span, orderly=False) is not None
        if pq.msg_count + count > self.config.pull_threshold_for_queue:
            return True
        if (pq.msg_size + size) // (1 << 20) > self.config.pull_threshold_size_for_queue:
            return True
        first = pq.first_offset()
        return last_offset is not None and first is not None and last_offset - first > self.config.consume_max_span

    async def _pull_task(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """``PullTaskImpl.run``, as a loop. The next pull of the queue is sent as soon as an answer arrives,
        before that answer's body is decoded (the broker reads the next batch meanwhile), when the queue is
        not paused and the flow control, counting the answer's messages, lets it; at most one pull per queue
        is in flight, as in Java."""
        ahead: asyncio.Task[PullResult] | None = None
        ahead_args: _PullArgs | None = None
        try:
            while not pq.dropped and self._state == "RUNNING" and not self._stopping:
                if ahead is None or ahead_args is None:
                    if mq in self._paused:
                        await asyncio.sleep(PULL_TIME_DELAY_WHEN_PAUSE_S)
                        continue
                    if self._held_back(pq):
                        await asyncio.sleep(PULL_TIME_DELAY_WHEN_FLOW_CONTROL_S)
                        continue
                try:
                    if ahead is None or ahead_args is None:
                        started = await self._start_pull(mq)
                        if started is None:
                            await asyncio.sleep(PULL_TIME_DELAY_ON_EXCEPTION_S)
                            continue
                        ahead_args, ahead = started
                    (offset, addr, sub), pulling = ahead_args, ahead
                    ahead = ahead_args = None
                    result = await pulling
                    if pq.dropped or mq in self._seek_offset or self._pull_offset.get(mq) != offset:
                        continue   # seeked or dropped meanwhile: the answer is stale
                    if (result.status is PullStatus.FOUND and result.body and mq not in self._paused
                            and not self._stopping):
                        count = result.next_begin_offset - offset
                        if not self._held_back(pq, count, len(result.body), result.next_begin_offset - 1):
                            self._pull_offset[mq] = result.next_begin_offset
                            try:
                                started = await self._start_pull(mq)
                            finally:   # _take moves it on; unless a seek or a drop took it meanwhile
                                if self._pull_offset.get(mq) == result.next_begin_offset:
                                    self._pull_offset[mq] = offset
                            if started is not None:
                                ahead_args, ahead = started
                                await asyncio.sleep(0)   # the pull task writes its request ...
                                await asyncio.sleep(0)   # ... and the channel sends it
                    try:
                        self._take(mq, pq, offset, addr, sub, result)
                    except BaseException:
                        if ahead is not None:   # the answer is pulled again
                            ahead.cancel()
                            ahead = ahead_args = None
                        raise
                except asyncio.CancelledError:
                    raise
                except (RemotingError, MQClientError, asyncio.TimeoutError) as exc:
                    if self._state == "RUNNING" and not pq.dropped:
                        log.warning("%s: pull of %s failed: %s", self.group, mq, exc)
                    await asyncio.sleep(PULL_TIME_DELAY_ON_EXCEPTION_S)
        finally:
            if ahead is not None:
                ahead.cancel()

    async def _start_pull(self, mq: MessageQueue) -> tuple[_PullArgs, asyncio.Task[PullResult]] | None:
        """Send the next pull of ``mq`` (a task answering it), with its offset, broker address and
        subscription; None when the queue has no pull offset or subscription yet."""
        assert self.instance is not None
        offset = await self._next_pull_offset(mq)
        if offset < 0:
            return None
        sub = self._subscriptions.get(mq.topic)
        if sub is None:
            return None
        found = self.instance.find_broker_for_subscribe(mq.broker_name)
        if found is None:
            await self.instance.update_route(mq.topic)
            found = self.instance.find_broker_for_subscribe(mq.broker_name)
        if found is None:
            raise MQClientError(f"the broker[{mq.broker_name}] of {mq} has no address")
        addr = found[0]
        task = asyncio.get_running_loop().create_task(self.instance.api.pull(
            addr, group=self.group, topic=mq.topic, queue_id=mq.queue_id, offset=offset,
            max_nums=self.config.pull_batch_size, sys_flag=build_pull_sys_flag(False, True, True, lite_pull=True),
            suspend_ms=self.config.broker_suspend_max_time_ms, subscription=sub.expression, sub_version=0,
            expression_type=sub.expression_type,
            timeout=max(CONSUMER_TIMEOUT_WHEN_SUSPEND_S, self.config.broker_suspend_max_time_ms / 1000 + 5)))
        return (offset, addr, sub), task

    def _take(self, mq: MessageQueue, pq: ProcessQueue, offset: int, addr: str, sub: Subscription,
              result: PullResult) -> None:
        """An answer to the pull of ``mq`` at ``offset``: its messages into ``pq`` and the poll cache, the pull
        offset moved on."""
        msgs: list[MessageExt] = []
        if result.status is PullStatus.FOUND:
            msgs = process_pull_result(result, mq.broker_name, sub.tags_filter(), addr=addr)
            if sub.data.sql is not None:   # SQL92: the client checks the broker's filtering too
                msgs = sub.data.filter_messages(msgs)
            if msgs:
                pq.put_messages(msgs)
                with self._lock:
                    self._cached_messages += len(msgs)
                self._cache.put(_ConsumeRequest(msgs, mq, pq))
        elif result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning("%s: offset %d of %s is illegal, continuing at %d", self.group, offset, mq,
                        result.next_begin_offset)
        self._pull_offset[mq] = result.next_begin_offset
        if not msgs and pq.msg_count == 0 and result.status is not PullStatus.OFFSET_ILLEGAL:
            # nothing cached and nothing delivered (all filtered out, or none new): the consumed offset
            # follows the pull offset, as the push consumer's correctTagsOffset does
            self._consume_offset[mq] = max(self._consume_offset.get(mq, 0), result.next_begin_offset)

    # ------------------------------------------------------------------ the API
    def poll(self, timeout: float | None = None) -> list[MessageExt]:
        """The next batch of messages (empty after ``timeout`` seconds, default ``poll_timeout_s``)."""
        if self._state != "RUNNING":
            raise MQClientError(f"the LitePullConsumer {self.group} is not running (state {self._state})")
        if self.config.auto_commit and time.monotonic() - self._last_commit >= self.config.auto_commit_interval_s:
            self._auto_commit()
        deadline = time.monotonic() + (self.config.poll_timeout_s if timeout is None else timeout)
        while True:
            left = deadline - time.monotonic()
            try:
                req = self._cache.get(timeout=max(left, 0)) if left > 0 else self._cache.get_nowait()
            except queue.Empty:
                return []
            with self._lock:
                self._cached_messages -= len(req.messages)
            if req.pq.dropped:
                continue
            offset = req.pq.remove_messages(req.messages)
            if offset >= 0 and self._assigned.get(req.mq) is req.pq and req.mq not in self._seek_offset:
                self._consume_offset[req.mq] = offset
            if self.namespace:   # resetTopic: the topics without the namespace (all of them the queue's)
                topic = unwrap(self.namespace, req.mq.topic)
                for m in req.messages:
                    m.topic = topic
            return req.messages

    def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Store consumed offsets (``commitSync``): ``offsets`` given, else every assigned queue's consumed
        offset; CLUSTERING: UPDATE_CONSUMER_OFFSET to the broker (synchronous), BROADCASTING: offsets.json."""
        store = self.offset_store
        if store is None or self.instance is None:
            raise MQClientError(f"the LitePullConsumer {self.group} is not started")
        table = dict(self._consume_offset) if offsets is None else {self._in(mq): off for mq, off in offsets.items()}
        for mq, off in table.items():
            if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                raise OptionError("offsets", f"offset of {mq} must be an int >= 0", off)
            store.update_offset(mq, off, False)
        self._last_commit = time.monotonic()
        if not table:
            return
        if isinstance(store, LocalFileOffsetStore):
            store.persist_now()
            return
        assert isinstance(store, RemoteBrokerOffsetStore)

        async def persist() -> None:
            for mq, off in table.items():
                await store.update_consume_offset_to_broker(mq, off, oneway=False)
        self.instance.run(persist(), 15.0)

    def _auto_commit(self) -> None:
        """``maybeAutoCommit`` -> ``commitAll``: the consumed offsets go into the offset store, and the broker
        learns them from a persist in the background (oneway UPDATE_CONSUMER_OFFSET; a failure is logged and
        the next auto commit or the instance's persist every 5 s sends them again). ``poll`` never fails on the
        broker's account: with the broker unreachable, a synchronous commit would raise from every poll."""
        store, instance = self.offset_store, self.instance
        if store is None or instance is None:
            return
        for mq, off in dict(self._consume_offset).items():
            store.update_offset(mq, off, False)
        self._last_commit = time.monotonic()
        if isinstance(store, LocalFileOffsetStore):
            store.persist_now()
            return
        queues = list(self._consume_offset)

        async def persist() -> None:
            await store.persist_all(queues)

        instance.spawn(persist())

    def committed(self, mq: MessageQueue) -> int:
        """The offset stored for ``mq`` (broker or offsets.json); -1 when none."""
        store = self.offset_store
        if store is None:
            raise MQClientError(f"the LitePullConsumer {self.group} is not started")
        result: int = self._run(store.read_offset(self._in(mq), ReadOffsetType.READ_FROM_STORE))
        return result

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Read ``mq`` from ``offset`` next (within [min, max] of the queue, as Java checks)."""
        mq = self._in(mq)
        if mq not in self._assigned:
            raise OptionError("mq", "is not assigned to this consumer", mq)
        lo, hi = self._run(self._bounds(mq))
        if isinstance(offset, bool) or not isinstance(offset, int) or not lo <= offset <= hi:
            raise OptionError("offset", f"seek offset of {mq} must be within [{lo}, {hi}]", offset)
        self._run(self._seek(mq, offset))

    async def _bounds(self, mq: MessageQueue) -> tuple[int, int]:
        return await self.rebalance.min_offset(mq), await self.rebalance.max_offset(mq)

    async def _seek(self, mq: MessageQueue, offset: int) -> None:
        old = self._assigned.get(mq)
        if old is None:
            return
        old.dropped = True
        self._seek_offset[mq] = offset
        self._pull_offset.pop(mq, None)
        pq = ProcessQueue()
        self.rebalance.process_queue_table[mq] = pq
        self._start_task(mq, pq)

    def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """``offsetForTimestamp``: SEARCH_OFFSET_BY_TIMESTAMP on the queue's broker."""
        if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int) or timestamp_ms < 0:
            raise OptionError("timestamp_ms", "must be ms since the epoch (int >= 0)", timestamp_ms)
        result: int = self._run(self.rebalance.search_offset(self._in(mq), timestamp_ms))
        return result

    def seek_to_begin(self, mq: MessageQueue) -> None:
        self.seek(mq, self._run(self.rebalance.min_offset(self._in(mq))))

    def seek_to_end(self, mq: MessageQueue) -> None:
        self.seek(mq, self._run(self.rebalance.max_offset(self._in(mq))))

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        self._paused |= {self._in(mq) for mq in mqs}

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        self._paused -= {self._in(mq) for mq in mqs}

    def register_topic_message_queue_change_listener(self, topic: str,
                                                     listener: TopicMessageQueueChangeListener) -> None:
        """``registerTopicMessageQueueChangeListener``: ``listener(topic, queues)`` is called when the
        readable queues of ``topic`` change (checked every ``topic_metadata_check_interval_s``); while
        running, the current set is read now as the baseline (MQClientError when the topic has no route)."""
        check_topic(topic)
        if not callable(listener):
            raise OptionError("listener", "must be callable (topic, queues)", listener)
        topic = wrap(self.namespace, topic)
        if self.namespace:   # the listener sees the topic and queues without the namespace
            user_listener = listener

            def unwrapped_listener(t: str, queues: set[MessageQueue]) -> object:
                return user_listener(unwrap(self.namespace, t), {self._out(q) for q in queues})
            listener = unwrapped_listener
        self.queue_watcher.register(topic, listener)
        if self._state == "RUNNING":
            self._run(self.queue_watcher.prime(topic), 10.0)

    async def _fetch_queues(self, topic: str) -> set[MessageQueue]:
        inst = self.instance
        if inst is None:
            raise MQClientError(f"the LitePullConsumer {self.group} is not started")
        route = await inst.api.get_route(topic)
        if route is None:
            raise MQClientError(f"topic {topic} does not exist (no route)")
        return subscribe_queues(topic, route)

    def fetch_message_queues(self, topic: str) -> set[MessageQueue]:
        """``fetchMessageQueues``: every readable queue of ``topic`` from the name server."""
        topic = wrap(self.namespace, topic)
        inst = self.instance
        if inst is None:
            raise MQClientError(f"the LitePullConsumer {self.group} is not started")

        async def fetch() -> set[MessageQueue]:
            route = await inst.api.get_route(topic)
            if route is None:
                raise MQClientError(f"topic {topic} does not exist (no route)")
            return subscribe_queues(topic, route)
        result: set[MessageQueue] = inst.run(fetch(), 10.0)
        return {self._out(mq) for mq in result}
