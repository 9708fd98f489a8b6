"""``PushConsumer``: RocketMQ's ``DefaultMQPushConsumer`` (seeds 000-004; ``DefaultMQPushConsumerImpl`` 4.9.8).

"Push" is long-polling pull (seed 003): the rebalance (:class:`RebalancePushImpl`) creates a
:class:`~rocketstream.client.pull_service.PullRequest` per assigned queue; the
:class:`~rocketstream.client.pull_service.PullMessageService` hands each to :meth:`PushConsumer.pull_message`,
which applies the flow control (1,000 messages / 100 MiB per queue, a 2,000-offset span for concurrent
consumption, 50 ms back-off), pulls (broker hold 15 s), puts the messages into the queue's
:class:`~rocketstream.client.process_queue.ProcessQueue` and submits them to the consume service
(:mod:`rocketstream.client.consume_service`). Offsets: :class:`RemoteBrokerOffsetStore` (CLUSTERING) or
:class:`LocalFileOffsetStore` (BROADCASTING), persisted every 5 s by the client instance.

Example::

    consumer = PushConsumer("my_group", namesrv="127.0.0.1:9876")
    consumer.subscribe("TopicTest", "TagA || TagB")
    consumer.register_message_listener_concurrently(
        lambda msgs, ctx: print(msgs) or ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    consumer.start()
    ...
    consumer.shutdown()
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass
from typing import Any

from rocketstream.client.allocate import MessageQueue
from rocketstream.client.api import build_pull_sys_flag
from rocketstream.client.common import (
    PROPERTY_MAX_OFFSET,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_MIN_OFFSET,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TRAN_MSG,
    Message,
    MessageExt,
    PullResult,
    PullStatus,
    check_group,
    check_topic,
)
from rocketstream.client.config import UNLOCK_DELAY_TIME_S, PushConsumerConfig
from rocketstream.client.consume_service import (
    PROPERTY_CONSUME_START_TIME,
    ConcurrentListener,
    ConsumeMessageConcurrentlyService,
    ConsumeMessageOrderlyService,
    OrderlyListener,
)
from rocketstream.client.instance import MQClientInstance
from rocketstream.client.namespace import wrap
from rocketstream.client.offset_store import (
    BrokerOffsetClient,
    LocalFileOffsetStore,
    OffsetStore,
    RemoteBrokerOffsetStore,
)
from rocketstream.client.process_queue import ProcessQueue
from rocketstream.client.pull_decode import process_pull_result_fast as process_pull_result
from rocketstream.client.pull_service import (
    CONSUMER_TIMEOUT_WHEN_SUSPEND_S,
    PULL_TIME_DELAY_WHEN_BROKER_FLOW_CONTROL_S,
    PULL_TIME_DELAY_WHEN_FLOW_CONTROL_S,
    PULL_TIME_DELAY_WHEN_SUSPEND_S,
    PullMessageService,
    PullRequest,
    flow_control,
)
from rocketstream.client.rebalance import (
    BROADCASTING,
    CLUSTERING,
    RebalanceImpl,
    Subscription,
    retry_topic,
)
from rocketstream.client.route import publish_info
from rocketstream.client.subscription import SubscriptionData
from rocketstream.codec import PROPERTY_UNIQ_KEY, new_uniq_key
from rocketstream.errors import BrokerResponseError, MQClientError, OptionError, RemotingError
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode, json_body

__all__ = [
    "PushConsumer",
    "PushConsumerConfig",
    "RebalancePushImpl",
    "CLUSTERING",
    "BROADCASTING",
    "UNLOCK_DELAY_TIME_S",
    "check_client_config",
]

log = logging.getLogger("rocketstream.client")

OFFSET_ILLEGAL_FIX_DELAY_S = 10.0  # pullMessage, OFFSET_ILLEGAL: fix the offset 10 s later
SEND_BACK_TIMEOUT_S = 5.0
# pullMessage's answers a heartbeat heals (the broker has not registered the subscription yet): not logged
_SUBSCRIPTION_NOT_YET_CODES = (ResponseCode.SUBSCRIPTION_NOT_EXIST, ResponseCode.SUBSCRIPTION_NOT_LATEST)
EXPRESSION_TYPES = ("TAG", "SQL92")
_CLIENT_ONLY_PROPERTIES = (PROPERTY_MIN_OFFSET, PROPERTY_MAX_OFFSET, PROPERTY_CONSUME_START_TIME)


@dataclass(slots=True)
class _Ahead:
    """A pull sent ahead (:meth:`PushConsumer._pull_ahead`): its offset, subscription, broker and answer."""

    offset: int
    sub: Subscription
    addr: str
    task: asyncio.Task[PullResult]


def _drop_ahead(ahead: _Ahead | None) -> None:
    """Cancel a pull sent ahead whose answer will not be used (an answer or error already in is read, so that
    asyncio does not report it as never retrieved)."""
    if ahead is None:
        return
    task = ahead.task
    if task.done():
        if not task.cancelled():
            task.exception()
    else:
        task.cancel()


async def check_client_config(instance: MQClientInstance, group: str, sub: Subscription) -> None:
    """``checkClientInBroker``: CHECK_CLIENT_CONFIG (46) for a non-TAG (SQL92) subscription to every master
    of the topic's route; a broker that cannot filter with it makes ``start`` fail (MQClientError naming
    the broker and its answer) instead of the consumer silently receiving everything."""
    route = await instance.find_route(sub.topic, "cannot check the SQL92 subscription")
    body = {"clientId": instance.client_id, "group": group, "subscriptionData": sub.to_json()}
    for bd in route.broker_datas:
        addr = bd.master_addr()
        if addr is None:
            continue
        req = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None, json_body.dumps(body))
        resp = await instance.api.invoke(addr, req, 3.0)
        if resp.code != ResponseCode.SUCCESS:
            raise MQClientError(
                f"the broker[{bd.broker_name}, {addr}] does not support consumer group {group}'s {sub.expression_type} "
                f"filter {sub.expression!r} on {sub.topic}: code {resp.code}, remark {resp.remark!r}"
                + (" (the broker needs enablePropertyFilter=true)" if sub.expression_type == "SQL92" else ""))


class RebalancePushImpl(RebalanceImpl):
    consume_type = "CONSUME_PASSIVELY"

    def __init__(self, consumer: PushConsumer, **kw: Any) -> None:
        super().__init__(**kw)
        self.consumer = consumer

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """``removeUnnecessaryMessageQueue``: persist and forget the offset; orderly CLUSTERING: wait up to 1 s
        for the running listener call (``consume_lock``), then unlock the queue on the broker (20 s later when
        messages are still cached, ``unlockDelay``)."""
        await super().remove_unnecessary_message_queue(mq, pq)
        if not (self.consumer.orderly and self.message_model == CLUSTERING):
            return True
        got = await asyncio.to_thread(pq.consume_lock.acquire, True, 1.0)
        if not got:
            pq.try_unlock_times += 1
            log.warning("%s: %s is being consumed; unlock retried at the next rebalance", self.group, mq)
            return False
        try:
            if pq.has_temp_message() and self.consumer.config.unlock_delay_s > 0:
                loop = asyncio.get_running_loop()
                loop.call_later(self.consumer.config.unlock_delay_s,
                                lambda: loop.create_task(self.unlock(mq, oneway=True)))
            else:
                await self.unlock(mq, oneway=True)
        finally:
            pq.consume_lock.release()
        return True

    def dispatch_pull_requests(self, requests: list[PullRequest]) -> None:
        for r in requests:
            self.consumer.pull_service.execute_pull_request_immediately(r)

    async def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        """``messageQueueChanged``: per-queue thresholds from the topic thresholds, a new subscription version
        and a heartbeat at once (before the new queues' first pulls)."""
        cfg = self.consumer.config   # the consumer's own copy: setPullThresholdForQueue as in RocketMQ
        n = max(1, len(mq_divided))
        if cfg.pull_threshold_for_topic != -1:
            cfg.pull_threshold_for_queue = max(1, cfg.pull_threshold_for_topic // n)
        if cfg.pull_threshold_size_for_topic != -1:
            cfg.pull_threshold_size_for_queue = max(1, cfg.pull_threshold_size_for_topic // n)
        sub = self.subscription_inner.get(topic)
        if sub is not None:
            sub.sub_version = max(int(time.time() * 1000), sub.sub_version + 1)
        if self.instance is not None:
            await self.instance.send_heartbeat_to_all()


class PushConsumer:
    """A push consumer of one group (see the module docstring). Listener return values:
    ``ConsumeConcurrentlyStatus`` / ``ConsumeOrderlyStatus``; an exception or ``None`` means retry.

    With ``namespace`` (``ClientConfig.namespace``) the group, the subscribed topics and the retry topic are
    in the namespace on the broker (``ns%group``, ``ns%topic``, ``%RETRY%ns%group``; ``self.group`` is the
    group as the broker knows it, as ``getConsumerGroup`` after ``start``); the listener sees topics without
    it (``resetRetryAndNamespace``). The context's queue is the broker's, as in Java."""

    def __init__(self, group: str, config: PushConsumerConfig | None = None, **options: Any) -> None:
        """``config`` and/or :class:`PushConsumerConfig`'s field names as keywords
        (``PushConsumer("g", namesrv="127.0.0.1:9876", consume_thread_max=8)``); the consumer keeps its own copy
        as ``self.config``."""
        check_group(group, argument="group")
        self.config = cfg = PushConsumerConfig.from_options(config, options)
        self.namespace = cfg.namespace
        # DefaultMQPushConsumer.start: setConsumerGroup(NamespaceUtil.wrapNamespace(namespace, consumerGroup))
        self.group = wrap(self.namespace, group)
        self._subscriptions: dict[str, Subscription] = {}
        self._listener: ConcurrentListener | OrderlyListener | None = None
        self.orderly = False
        self.paused = False
        self._state = "CREATE_JUST"
        self._state_lock = threading.Lock()
        self.instance: MQClientInstance | None = None
        self.offset_store: OffsetStore | None = None
        self.consume_service: ConsumeMessageConcurrentlyService | ConsumeMessageOrderlyService | None = None
        self.pull_service = PullMessageService(self.pull_message, name=f"PullMessageService[{self.group}]")
        self._suggested_broker: dict[MessageQueue, int] = {}
        self.flow_control_times = 0
        self.rebalance = RebalancePushImpl(self, group=self.group, message_model=cfg.message_model,
                                           allocate_strategy=cfg.allocate_strategy, instance=None, offset_store=None,
                                           consume_from_where=cfg.consume_from_where,
                                           consume_timestamp_ms=cfg.consume_timestamp_ms,
                                           allocate_args=cfg.allocate_args,
                                           lock_max_live_time_s=cfg.lock_max_live_time_s)

    def __repr__(self) -> str:
        return f"PushConsumer({self.group}, {self.config.message_model}, {self._state})"

    # ------------------------------------------------------------------ configuration
    def subscribe(self, topic: str, expression: str | None = "*", *, expression_type: str = "TAG") -> None:
        """Subscribe to ``topic``: TAG expressions ``"*"`` or ``"TagA || TagB"``; ``expression_type="SQL92"``
        needs a broker with ``enablePropertyFilter=true`` (checked at start: MQClientError otherwise)."""
        check_topic(topic)
        topic = wrap(self.namespace, topic)   # subscribe(withNamespace(topic), ...)
        if expression_type not in EXPRESSION_TYPES:
            raise OptionError("expression_type", f"must be one of {', '.join(EXPRESSION_TYPES)}", expression_type)
        if expression_type == "TAG":
            data = SubscriptionData.parse_option(expression, "expression")
        else:
            data = SubscriptionData.parse_sql92(expression)
        sub = Subscription(topic, data, expression_type)
        self._subscriptions[topic] = sub
        self.rebalance.subscription_inner[topic] = sub
        if self._state == "RUNNING" and self.instance is not None:
            self.instance.spawn(self._after_subscribe(sub))

    async def _after_subscribe(self, sub: Subscription) -> None:
        assert self.instance is not None
        await self.instance.update_route(sub.topic)
        await self.instance.send_heartbeat_to_all()
        self.instance.rebalance_now()

    def unsubscribe(self, topic: str) -> None:
        topic = wrap(self.namespace, topic)
        self._subscriptions.pop(topic, None)
        self.rebalance.subscription_inner.pop(topic, None)

    def register_message_listener_concurrently(self, listener: ConcurrentListener) -> None:
        self._set_listener(listener, orderly=False)

    def register_message_listener_orderly(self, listener: OrderlyListener) -> None:
        self._set_listener(listener, orderly=True)

    def _set_listener(self, listener: Any, orderly: bool) -> None:
        if not callable(listener):
            raise OptionError("listener", "must be callable (msgs, context) -> status", listener)
        if self._state != "CREATE_JUST":
            raise MQClientError(f"consumer {self.group}: register the listener before start()")
        self._listener = listener
        self.orderly = orderly

    def effective_max_reconsume_times(self, orderly: bool) -> int:
        """``getMaxReconsumeTimes``: -1 means 16 (concurrent) or unlimited (orderly)."""
        return self.config.effective_max_reconsume_times(orderly)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self.instance is None:
            raise MQClientError(f"consumer {self.group} is not started")
        return self.instance.loop

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> PushConsumer:
        with self._state_lock:
            if self._state != "CREATE_JUST":
                raise MQClientError(f"the PushConsumer service state is {self._state}, not CREATE_JUST")
            if self._listener is None:
                raise MQClientError("messageListener is null: register a listener before start()")
            if not self._subscriptions:
                raise MQClientError(f"consumer {self.group} has no subscription")
            if self.orderly and self.config.message_model == BROADCASTING:
                log.warning("%s: orderly consumption in BROADCASTING does not lock queues", self.group)
            self._state = "START_FAILED"
        instance = MQClientInstance.get(self.config.namesrv, self.config.instance_name,
                                     credentials=self.config.credentials, tls=self.config.tls)
        if self.config.message_model == CLUSTERING:
            retry = retry_topic(self.group)
            sub = Subscription(retry, SubscriptionData.parse("*"))
            self.rebalance.subscription_inner[retry] = sub
        self.instance = instance
        self.rebalance.instance = instance
        if self.config.message_model == CLUSTERING:
            store: OffsetStore = RemoteBrokerOffsetStore(self.group, BrokerOffsetClient(instance, self.group))
        else:
            local_id = f"{instance.client_id.split('@', 1)[0]}@{self.config.instance_name}"
            store = LocalFileOffsetStore(local_id, self.group, self.config.offset_store_dir)
        store.load()
        self.offset_store = store
        self.rebalance.offset_store = store
        if self.orderly:
            self.consume_service = ConsumeMessageOrderlyService(self, self._listener,  # type: ignore[arg-type]
                                                                self.config.consume_thread_max,
                                                                lock_interval_s=self.config.lock_interval_s,
                                                                namespace=self.namespace)
        else:
            self.consume_service = ConsumeMessageConcurrentlyService(self, self._listener,  # type: ignore[arg-type]
                                                                     self.config.consume_thread_max,
                                                                     namespace=self.namespace)
        instance.register_consumer(self.group, self)
        try:
            instance.start()
            if self.config.rebalance_interval_s is not None:
                instance.rebalance_interval = min(instance.rebalance_interval, self.config.rebalance_interval_s)
            instance.run(self._start_on_loop(), 30.0)
        except BaseException:
            self._state = "START_FAILED"
            self._abort_start()
            raise
        self._state = "RUNNING"
        instance.rebalance_now()
        return self

    def _abort_start(self) -> None:
        inst = self.instance
        if inst is None:
            return
        try:
            if inst.running:
                inst.run(self._stop_on_loop(), 10.0)
                inst.run(inst.unregister_consumer(self.group), 10.0)
        except Exception as exc:   # the start error is what the caller sees
            log.warning("%s: cleanup after a failed start: %s", self.group, exc)
        finally:
            inst.consumers.pop(self.group, None)
            if self.consume_service is not None:
                self.consume_service.shutdown()
            inst.shutdown()

    async def _start_on_loop(self) -> None:
        assert self.instance is not None and self.consume_service is not None
        self.pull_service.start()
        self.consume_service.start()
        for topic in list(self.rebalance.subscription_inner):
            try:
                found = await self.instance.update_route(topic)
            except RemotingError as exc:
                raise MQClientError(f"route of topic {topic} not available: {exc}") from exc
            if not found and not topic.startswith("%RETRY%"):
                log.warning("%s: topic %s has no route yet", self.group, topic)
        for sub in list(self._subscriptions.values()):
            if sub.expression_type != "TAG":
                await check_client_config(self.instance, self.group, sub)
        await self.instance.send_heartbeat_to_all()
        self._state = "RUNNING"
        await self.do_rebalance()

    async def _stop_on_loop(self) -> None:
        await self.pull_service.stop()

    def shutdown(self) -> None:
        """``shutdown``: stop pulling, let running listener calls end (``await_termination_s``), unlock orderly
        queues, persist offsets, UNREGISTER_CLIENT, release the client instance."""
        with self._state_lock:
            if self._state != "RUNNING":
                self._state = "SHUTDOWN_ALREADY"
                return
            self._state = "SHUTDOWN_ALREADY"
        inst = self.instance
        assert inst is not None and self.consume_service is not None and self.offset_store is not None
        service = self.consume_service
        try:
            self._shutdown_step("stop pulling", lambda: inst.run(self._stop_on_loop(), 10.0))
            service.shutdown(self.config.await_termination_s)
            if self.orderly and self.config.message_model == CLUSTERING:
                self._shutdown_step("unlock queues", lambda: inst.run(self.rebalance.unlock_all(oneway=False), 10.0))
            self._shutdown_step("persist offsets", self.persist_offsets_sync)
            for pq in self.rebalance.process_queue_table.values():
                pq.dropped = True
            self._shutdown_step("unregister", lambda: inst.run(inst.unregister_consumer(self.group), 10.0))
        finally:
            inst.consumers.pop(self.group, None)
            inst.shutdown()

    def _shutdown_step(self, what: str, fn: Any) -> None:
        """A shutdown step whose network failure (broker gone) is logged; shutdown goes on."""
        try:
            fn()
        except (RemotingError, MQClientError) as exc:
            log.warning("%s: shutdown: %s failed: %s", self.group, what, exc)

    def persist_offsets_sync(self) -> None:
        inst, store = self.instance, self.offset_store
        assert inst is not None and store is not None
        mqs = list(self.rebalance.process_queue_table)
        if isinstance(store, LocalFileOffsetStore):
            store.persist_now()
            return
        assert isinstance(store, RemoteBrokerOffsetStore)

        async def persist() -> None:
            for mq, off in store.snapshot(mqs).items():
                try:
                    await store.update_consume_offset_to_broker(mq, off, oneway=False)
                except (RemotingError, MQClientError) as exc:
                    log.warning("%s: final offset %d of %s not stored: %s", self.group, off, mq, exc)
        inst.run(persist(), 15.0)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    # ------------------------------------------------------------------ MQClientInstance callbacks
    def consumer_data(self) -> dict[str, Any]:
        return {"consumeFromWhere": self.config.consume_from_where, "consumeType": "CONSUME_PASSIVELY",
                "groupName": self.group, "messageModel": self.config.message_model,
                "subscriptionDataSet": [s.to_json() for s in list(self.rebalance.subscription_inner.values())],
                "unitMode": False}

    def subscribed_topics(self) -> set[str]:
        return set(self.rebalance.subscription_inner)

    def update_topic_subscribe_info(self, topic: str, mqs: set[MessageQueue]) -> None:
        if topic in self.rebalance.subscription_inner:
            self.rebalance.topic_subscribe_info[topic] = set(mqs)

    async def do_rebalance(self) -> None:
        if self._state == "RUNNING":
            await self.rebalance.do_rebalance(self.orderly)

    async def persist_offsets(self) -> None:
        if self.offset_store is not None and self._state == "RUNNING":
            await self.offset_store.persist_all(list(self.rebalance.process_queue_table))

    # ------------------------------------------------------------------ consume service callbacks
    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        if self.offset_store is not None:
            self.offset_store.update_offset(mq, offset, increase_only)

    def send_message_back(self, msg: MessageExt, delay_level: int, broker_name: str | None) -> bool:
        """``sendMessageBack`` (from a consume thread): CONSUMER_SEND_MSG_BACK to the broker the message came
        from; if that fails, a copy to ``%RETRY%<group>`` (delay 3 + reconsume times). False when both fail.
        The message's topic goes back into the namespace first (``msg.setTopic(withNamespace(...))`` in
        ``ConsumeMessageConcurrentlyService.sendMessageBack``), so RETRY_TOPIC names the broker's topic."""
        msg.topic = wrap(self.namespace, msg.topic)
        inst = self.instance
        if inst is None or not inst.running:
            return False
        try:
            return inst.run(self._send_back(msg, delay_level, broker_name), SEND_BACK_TIMEOUT_S * 3)
        except (RemotingError, MQClientError) as exc:
            log.warning("%s: send back of %s failed: %s", self.group, msg.msg_id, exc)
            return False

    async def _send_back(self, msg: MessageExt, delay_level: int, broker_name: str | None) -> bool:
        try:
            if broker_name:
                addr = await self.rebalance.master_addr(broker_name, msg.topic)
            else:
                addr = f"{msg.store_host.host}:{msg.store_host.port}"
            assert self.instance is not None
            await self.instance.api.send_back(addr, msg, self.group, delay_level,
                                              self.effective_max_reconsume_times(self.orderly), SEND_BACK_TIMEOUT_S)
            return True
        except (RemotingError, MQClientError, asyncio.TimeoutError) as exc:
            log.warning("%s: CONSUMER_SEND_MSG_BACK of %s failed (%s): sending to %s", self.group, msg.msg_id, exc,
                        retry_topic(self.group))
        return await self._send_retry_copy(msg, msg.reconsume_times + 1)

    def send_to_retry_topic(self, msg: MessageExt, reconsume_times: int) -> bool:
        """Orderly ``sendMessageBack``: a copy to ``%RETRY%<group>`` carrying ``reconsume_times`` (at the limit
        the broker stores it in ``%DLQ%<group>``)."""
        inst = self.instance
        if inst is None or not inst.running:
            return False
        try:
            return inst.run(self._send_retry_copy(msg, reconsume_times), SEND_BACK_TIMEOUT_S * 2)
        except (RemotingError, MQClientError) as exc:
            log.warning("%s: retry copy of %s failed: %s", self.group, msg.msg_id, exc)
            return False

    async def _send_retry_copy(self, msg: MessageExt, reconsume_times: int) -> bool:
        inst = self.instance
        assert inst is not None
        topic = retry_topic(self.group)
        props = {k: v for k, v in msg.properties.items() if k not in _CLIENT_ONLY_PROPERTIES}
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, msg.properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or msg.msg_id)
        props[PROPERTY_RETRY_TOPIC] = msg.topic
        props[PROPERTY_RECONSUME_TIME] = str(reconsume_times)
        props[PROPERTY_MAX_RECONSUME_TIMES] = str(self.effective_max_reconsume_times(self.orderly))
        props.pop(PROPERTY_TRAN_MSG, None)
        props.pop("DELAY", None)
        props.setdefault(PROPERTY_UNIQ_KEY, new_uniq_key())
        copy = Message(topic, bytes(msg.body), flag=msg.flag, properties=props, delay_level=3 + msg.reconsume_times)
        try:
            route = await inst.find_route(topic, "cannot send the message back to the broker")
            mq = publish_info(topic, route).select()
            addr = await self.rebalance.master_addr(mq.broker_name, topic)
            wire = copy.wire_properties()
            await inst.api.send(addr, mq.broker_name, copy, mq.queue_id, producer_group="CLIENT_INNER_PRODUCER",
                                properties=wire, timeout=SEND_BACK_TIMEOUT_S)
            return True
        except (RemotingError, MQClientError, IndexError, asyncio.TimeoutError) as exc:
            log.warning("%s: sending %s to %s failed: %s", self.group, msg.msg_id, topic, exc)
            return False

    # ------------------------------------------------------------------ the pull loop
    def _flow_controlled(self, pq: ProcessQueue, incoming: tuple[int, int, int, int] | None = None) -> str | None:
        """:func:`flow_control` with this consumer's thresholds."""
        cfg = self.config
        return flow_control(pq, pull_threshold_for_queue=cfg.pull_threshold_for_queue,
                            pull_threshold_size_for_queue_mib=cfg.pull_threshold_size_for_queue,
                            consume_concurrently_max_span=cfg.consume_concurrently_max_span, orderly=self.orderly,
                            incoming=incoming)

    async def _send_pull(self, offset: int, mq: MessageQueue,
                         sub: Subscription) -> tuple[str, Coroutine[Any, Any, PullResult]] | None:
        """PULL_MESSAGE of ``offset`` (``pullKernelImpl``): the broker's address and the call sending it
        (not started); None when the broker has no address."""
        assert self.instance is not None
        commit_offset = 0
        if self.config.message_model == CLUSTERING and self.offset_store is not None:
            mem = self.offset_store.offset_table.get(mq, -1)
            commit_offset = mem if mem > 0 else 0
        found = self.instance.find_broker_for_subscribe(mq.broker_name, self._suggested_broker.get(mq, 0))
        if found is None:
            await self.instance.update_route(mq.topic)
            found = self.instance.find_broker_for_subscribe(mq.broker_name, self._suggested_broker.get(mq, 0))
        if found is None:
            return None
        addr, slave = found
        sys_flag = build_pull_sys_flag(commit_offset > 0 and not slave, True, False)
        return addr, self.instance.api.pull(
            addr, group=self.group, topic=mq.topic, queue_id=mq.queue_id, offset=offset,
            max_nums=self.config.pull_batch_size, sys_flag=sys_flag, commit_offset=commit_offset,
            suspend_ms=self.config.broker_suspend_max_time_ms, subscription=sub.expression,
            sub_version=sub.sub_version, expression_type=sub.expression_type,
            timeout=max(CONSUMER_TIMEOUT_WHEN_SUSPEND_S, self.config.broker_suspend_max_time_ms / 1000 + 5))

    async def _pull_ahead(self, pr: PullRequest, mq: MessageQueue, sub: Subscription, result: PullResult) -> bool:
        """Send the pull after ``result`` (a found batch, not decoded yet) now, into ``pr.ahead``, when the
        consumption is concurrent, no pull interval is set, and the flow control lets it with the batch counted
        by its upper bounds: as many messages as offsets it covers, as many bytes as its body (records with their
        headers), its last offset the one before ``next_begin_offset``. True when sent."""
        cfg = self.config
        pq = pr.process_queue
        if self.orderly or cfg.pull_interval_ms > 0 or self.paused or pq.dropped or result.body is None:
            return False
        first, after = pr.next_offset, result.next_begin_offset
        if after <= first or self._flow_controlled(pq, (after - first, len(result.body), first, after - 1)) is not None:
            return False
        sent = await self._send_pull(after, mq, sub)
        if sent is None:
            return False
        task = asyncio.get_running_loop().create_task(sent[1])
        self.pull_service.track(task)
        pr.ahead = _Ahead(after, sub, sent[0], task)
        await asyncio.sleep(0)   # the pull's task writes its request ...
        await asyncio.sleep(0)   # ... and the channel sends it, before this batch is decoded
        return True

    async def pull_message(self, pr: PullRequest) -> None:
        """``DefaultMQPushConsumerImpl.pullMessage`` (runs on the loop, one task per pull).

        Concurrent consumption pulls one batch ahead (:meth:`_pull_ahead`): the pull after a found batch is sent
        before that batch is decoded, when the flow control lets it even counting the batch by its upper bounds
        (its offsets and its body's bytes); the flow control is then checked exactly, as ``pullMessage`` checks
        it, once the batch is in the ProcessQueue, and a pull it would have held back is cancelled (its answer
        is never used: the same offset is pulled again). This call then takes the answer of the pull sent
        ahead instead of sending one."""
        pq = pr.process_queue
        svc = self.pull_service
        ahead: _Ahead | None = pr.ahead
        pr.ahead = None
        if pq.dropped:
            _drop_ahead(ahead)
            return
        pq.last_pull_timestamp = time.monotonic()
        if self._state != "RUNNING":
            _drop_ahead(ahead)
            svc.execute_pull_request_later(pr, self.config.pull_delay_on_exception_s)
            return
        if self.paused:
            _drop_ahead(ahead)
            svc.execute_pull_request_later(pr, PULL_TIME_DELAY_WHEN_SUSPEND_S)
            return
        mq = pr.message_queue
        pulling: Awaitable[PullResult]
        sub: Subscription
        if ahead is not None and ahead.offset == pr.next_offset and \
                self.rebalance.subscription_inner.get(mq.topic) is ahead.sub:
            sub = ahead.sub   # sent with the flow control passed
            addr, pulling = ahead.addr, ahead.task
        else:
            _drop_ahead(ahead)
            if self._flow_controlled(pq) is not None:
                self.flow_control_times += 1
                svc.execute_pull_request_later(pr, PULL_TIME_DELAY_WHEN_FLOW_CONTROL_S)
                return
            if self.orderly:
                if pq.locked:
                    if not pr.locked_first:
                        offset = await self.rebalance.compute_pull_from_where(pr.message_queue)
                        if offset < 0:
                            svc.execute_pull_request_later(pr, self.config.pull_delay_on_exception_s)
                            return
                        pr.locked_first = True
                        pr.next_offset = offset
                else:
                    svc.execute_pull_request_later(pr, self.config.pull_delay_on_exception_s)
                    return
            found_sub = self.rebalance.subscription_inner.get(mq.topic)
            if found_sub is None:
                svc.execute_pull_request_later(pr, self.config.pull_delay_on_exception_s)
                return
            sub = found_sub
            sent = await self._send_pull(pr.next_offset, mq, sub)
            if sent is None:
                log.warning("%s: no address of broker %s", self.group, mq.broker_name)
                svc.execute_pull_request_later(pr, self.config.pull_delay_on_exception_s)
                return
            addr, pulling = sent
        try:
            result = await pulling
        except BrokerResponseError as exc:
            if exc.code == ResponseCode.FLOW_CONTROL:
                svc.execute_pull_request_later(pr, PULL_TIME_DELAY_WHEN_BROKER_FLOW_CONTROL_S)
            else:
                if exc.code not in _SUBSCRIPTION_NOT_YET_CODES:
                    log.warning("%s: pull of %s failed: %s", self.group, mq, exc)
                svc.execute_pull_request_later(pr, self.config.pull_delay_on_exception_s)
            return
        except (RemotingError, asyncio.TimeoutError) as exc:
            if self._state == "RUNNING":
                log.warning("%s: pull of %s from %s failed: %s", self.group, mq, addr, exc)
            svc.execute_pull_request_later(pr, self.config.pull_delay_on_exception_s)
            return
        self._suggested_broker[mq] = result.suggest_which_broker_id
        if result.status is PullStatus.FOUND:
            if await self._pull_ahead(pr, mq, sub, result):
                if pq.dropped or self._state != "RUNNING":   # while the pull ahead was being sent
                    _drop_ahead(pr.ahead)
                    pr.ahead = None
                    return
            msgs = process_pull_result(result, mq.broker_name, sub.tags_filter(), addr=addr)
            if sub.data.sql is not None:   # SQL92: the client checks the broker's filtering too
                msgs = sub.data.filter_messages(msgs)
            pr.next_offset = result.next_begin_offset
            if not msgs:
                svc.execute_pull_request_immediately(pr)
                return
            dispatch = pq.put_messages(msgs)
            if pr.ahead is not None and self._flow_controlled(pq) is not None:
                _drop_ahead(pr.ahead)   # pullMessage's check, exact now: it would not pull yet
                pr.ahead = None
            if self.consume_service is not None and not pq.dropped:
                self.consume_service.submit_consume_request(msgs, pq, mq, dispatch)
            if self.config.pull_interval_ms > 0:
                svc.execute_pull_request_later(pr, self.config.pull_interval_ms / 1000)
            else:
                svc.execute_pull_request_immediately(pr)
        elif result.status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            pr.next_offset = result.next_begin_offset
            if pq.msg_count == 0 and self.offset_store is not None:   # correctTagsOffset
                self.offset_store.update_offset(mq, pr.next_offset, True)
            svc.execute_pull_request_immediately(pr)
        else:   # OFFSET_ILLEGAL
            log.warning("%s: pull offset %d of %s is illegal; the queue restarts at %d", self.group,
                        pr.next_offset, mq, result.next_begin_offset)
            pr.next_offset = result.next_begin_offset
            pq.dropped = True

            async def fix() -> None:
                if self.offset_store is not None:
                    self.offset_store.update_offset(mq, pr.next_offset, False)
                    await self.offset_store.persist(mq)
                await self.rebalance.remove_process_queue(mq)
            svc.execute_task_later(lambda: self.loop.create_task(fix()), OFFSET_ILLEGAL_FIX_DELAY_S)
