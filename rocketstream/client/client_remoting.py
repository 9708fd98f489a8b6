"""The broker -> client requests of RocketMQ 4.9.8's ``ClientRemotingProcessor`` besides
NOTIFY_CONSUMER_IDS_CHANGED (which instance.py handles itself), with ``MQClientInstance``'s and the
consumers' answers (spec §2.19):

==== ================================ =====================================================================
307  GET_CONSUMER_RUNNING_INFO        ``ConsumerRunningInfo`` JSON (``properties``, ``subscriptionSet``,
                                      ``mqTable`` MessageQueue -> ``ProcessQueueInfo``, ``statusTable`` topic ->
                                      ``ConsumeStatus``, ``jstack`` when ``jstackEnable``): mqadmin
                                      ``consumerStatus``; 1 when the group is not in this client
309  CONSUME_MESSAGE_DIRECTLY         the body's stored record handed to the push consumer's listener on its
                                      own (``consumeMessageDirectly``; no offset, no retry), answered with
                                      ``ConsumeMessageDirectlyResult``: mqadmin ``queryMsgById -g G -d CLIENT``
220  RESET_CONSUMER_CLIENT_OFFSET     ``MQClientInstance.resetOffset`` (push consumers): pause, drop the topic's
                                      process queues, wait ``reset_offset_wait_s`` (10 s) for running pulls and
                                      listener calls, store the new offsets on the broker, forget the queues,
                                      resume; the next rebalance pulls from the new offsets. mqadmin
                                      ``resetOffsetByTime`` (the broker sends it oneway: no answer)
221  GET_CONSUMER_STATUS_FROM_CLIENT  ``GetConsumerStatusBody`` ``{"messageQueueTable": {mq: offset}}``: the
                                      in-memory offsets of the topic (push consumers; empty otherwise)
==== ================================ =====================================================================

A consumer is reached through the instance's consumer table and the attributes the push and lite-pull
consumers share (``group``, ``rebalance``, ``offset_store``, ``consumer_data()``); a push consumer is the one
with a ``consume_service``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import traceback
from collections.abc import Coroutine, Mapping
from typing import Any, Protocol

from rocketstream.client.allocate import MessageQueue
from rocketstream.client.api import decode_messages
from rocketstream.client.offset_store import ReadOffsetType
from rocketstream.codec.fastjson import FrozenObject
from rocketstream.errors import BodyError, RemotingError
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode, json_body


class MQClientInstance(Protocol):
    """What these handlers use of ``instance.MQClientInstance`` (a Protocol: instance.py imports this module)."""

    client_id: str
    namesrv: str
    consumers: dict[str, Any]
    consumer_start_ms: dict[str, int]
    route_refresh_interval: float
    heartbeat_interval: float
    persist_interval: float

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> object: ...
    def rebalance_now(self) -> None: ...

__all__ = ["handle_request", "HANDLED", "RESET_OFFSET_WAIT_S", "consumer_running_info", "MessageQueueKey"]

log = logging.getLogger("rocketstream.client")

HANDLED = frozenset({RequestCode.GET_CONSUMER_RUNNING_INFO, RequestCode.CONSUME_MESSAGE_DIRECTLY,
                     RequestCode.RESET_CONSUMER_CLIENT_OFFSET, RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT})
RESET_OFFSET_WAIT_S = 10.0          # MQClientInstance.resetOffset: TimeUnit.SECONDS.sleep(10)
CLIENT_VERSION_DESC = "V4_9_8"      # MQVersion.getVersionDesc(CURRENT_VERSION) of the client we speak as
# ConsumerRunningInfo property names
PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"


class MessageQueueKey(FrozenObject):
    """A ``MessageQueue`` as a JSON map key (``{"brokerName":…,"queueId":…,"topic":…}``), ordered as
    Java's TreeMap orders MessageQueues (topic, broker name, queue id)."""

    __slots__ = ("_order",)

    def __init__(self, mq: MessageQueue) -> None:
        super().__init__({"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic})
        self._order = f"{mq.topic}\x00{mq.broker_name}\x00{mq.queue_id:011d}"

    def __str__(self) -> str:
        return self._order


def _is_push(consumer: Any) -> bool:
    return getattr(consumer, "consume_service", None) is not None


# ------------------------------------------------------------------------------- 307 running info
def _properties(instance: MQClientInstance, consumer: Any) -> dict[str, str]:
    """``MixAll.object2Properties(defaultMQPushConsumer)`` for the settings we have, plus the PROP_ entries."""
    data = consumer.consumer_data()
    push = _is_push(consumer)
    cfg = consumer.config   # PushConsumerConfig / LitePullConsumerConfig (client/config.py)
    props: dict[str, object] = {
        "consumerGroup": consumer.group, "messageModel": cfg.message_model,
        "consumeFromWhere": cfg.consume_from_where, "namesrvAddr": instance.namesrv,
        "clientIP": instance.client_id.split("@", 1)[0], "instanceName": cfg.instance_name,
        "pullBatchSize": cfg.pull_batch_size,
        "pullThresholdForQueue": cfg.pull_threshold_for_queue,
        "pullThresholdSizeForQueue": cfg.pull_threshold_size_for_queue,
        "language": "PYTHON", "unitMode": False,
        "pollNameServerInterval": int(instance.route_refresh_interval * 1000),
        "heartbeatBrokerInterval": int(instance.heartbeat_interval * 1000),
        "persistConsumerOffsetInterval": int(instance.persist_interval * 1000),
    }
    if push:
        props.update({
            "consumeThreadMin": cfg.consume_thread_min, "consumeThreadMax": cfg.consume_thread_max,
            "consumeConcurrentlyMaxSpan": cfg.consume_concurrently_max_span,
            "pullThresholdForTopic": cfg.pull_threshold_for_topic,
            "pullThresholdSizeForTopic": cfg.pull_threshold_size_for_topic,
            "pullInterval": cfg.pull_interval_ms,
            "consumeMessageBatchMaxSize": cfg.consume_message_batch_max_size,
            "maxReconsumeTimes": cfg.max_reconsume_times,
            "suspendCurrentQueueTimeMillis": cfg.suspend_current_queue_time_millis,
            "consumeTimeout": cfg.consume_timeout_minutes,
            "postSubscriptionWhenPull": False,
            "allocateMessageQueueStrategy": cfg.allocate_strategy,
        })
        props[PROP_CONSUME_ORDERLY] = bool(consumer.orderly)
        props[PROP_THREADPOOL_CORE_SIZE] = cfg.consume_thread_max
    else:
        props["autoCommit"] = cfg.auto_commit
    props[PROP_CONSUMER_START_TIMESTAMP] = instance.consumer_start_ms.get(consumer.group, 0)
    props[PROP_NAMESERVER_ADDR] = "".join(f"{a};" for a in instance.namesrv.split(";") if a)
    props[PROP_CONSUME_TYPE] = data["consumeType"]
    props[PROP_CLIENT_VERSION] = CLIENT_VERSION_DESC
    out: dict[str, str] = {}
    for k, v in props.items():
        if v is None:
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def _consume_status(consumer: Any) -> dict[str, object]:
    """``ConsumeStatus`` of a topic. We keep no per-topic RT/TPS samples (``ConsumerStatsManager``): the rates
    are 0.0; ``consumeFailedMsgs`` counts the group's failed messages since start (Java: in the last hour)."""
    service = getattr(consumer, "consume_service", None)
    failed = int(getattr(getattr(service, "stats", None), "consumed_failed", 0))
    return {"consumeFailedMsgs": failed, "consumeFailedTPS": 0.0, "consumeOKTPS": 0.0, "consumeRT": 0.0,
            "pullRT": 0.0, "pullTPS": 0.0}


def _jstack() -> str:
    """``UtilAll.jstack``: every thread's stack."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        parts.append(f"Thread: {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


async def consumer_running_info(instance: MQClientInstance, consumer: Any, jstack: bool = False) -> dict[str, object]:
    """``MQConsumerInner.consumerRunningInfo`` + what ``MQClientInstance.consumerRunningInfo`` adds."""
    subs = sorted(consumer.consumer_data()["subscriptionDataSet"],
                  key=lambda s: f"{s['topic']}@{s['subString']}")   # SubscriptionData.compareTo
    mq_table: dict[MessageQueueKey, dict[str, object]] = {}
    store = consumer.offset_store
    for mq, pq in list(consumer.rebalance.process_queue_table.items()):
        info = pq.fill_process_queue_info()
        info["commitOffset"] = (await store.read_offset(mq, ReadOffsetType.MEMORY_FIRST_THEN_STORE)
                                if store is not None else -1)
        mq_table[MessageQueueKey(mq)] = info
    body: dict[str, object] = {
        "properties": _properties(instance, consumer),
        "subscriptionSet": subs,
        "mqTable": mq_table,
        "statusTable": {s["topic"]: _consume_status(consumer) for s in subs},
    }
    if jstack:
        body["jstack"] = _jstack()
    return body


async def _get_consumer_running_info(instance: MQClientInstance, request: RemotingCommand) -> RemotingCommand:
    group = request.field("consumerGroup")
    consumer = instance.consumers.get(group)
    if consumer is None:
        return request.response(ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{group}> not exist in this consumer")
    jstack = str((request.ext_fields or {}).get("jstackEnable", "false")).lower() == "true"
    body = await consumer_running_info(instance, consumer, jstack)
    return request.response(ResponseCode.SUCCESS, body=json_body.dumps(body))


# ------------------------------------------------------------------------------- 309 consume directly
async def _consume_message_directly(instance: MQClientInstance, request: RemotingCommand) -> RemotingCommand:
    group = request.field("consumerGroup")
    consumer = instance.consumers.get(group)
    if consumer is None:
        return request.response(ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{group}> not exist in this consumer")
    if not _is_push(consumer):   # Java casts to DefaultMQPushConsumerImpl here (ClassCastException)
        return request.response(ResponseCode.SYSTEM_ERROR,
                                f"The Consumer Group <{group}> is not a push consumer: it has no listener to call")
    broker_name = request.field("brokerName", required=False) or ""
    msgs = decode_messages(request.body or b"", broker_name=broker_name)
    if len(msgs) != 1:
        raise BodyError(f"CONSUME_MESSAGE_DIRECTLY carries {len(msgs)} records, expected one")
    result = await asyncio.to_thread(consumer.consume_service.consume_message_directly, msgs[0], broker_name)
    return request.response(ResponseCode.SUCCESS, body=json_body.dumps(result))


# ------------------------------------------------------------------------------- 220 reset offset
def _offset_table(request: RemotingCommand) -> dict[MessageQueue, int]:
    if not request.body:
        return {}
    doc = json_body.loads(request.body, what="ResetOffsetBody")
    table = doc.get("offsetTable") if isinstance(doc, Mapping) else None
    if not isinstance(table, Mapping):
        raise BodyError("ResetOffsetBody has no offsetTable object")
    out: dict[MessageQueue, int] = {}
    for key, value in table.items():
        if not isinstance(key, Mapping) or not isinstance(value, int):
            raise BodyError(f"ResetOffsetBody.offsetTable entry {key!r:.80}: {value!r:.40} is not MessageQueue: offset")
        out[MessageQueue(str(key.get("topic")), str(key.get("brokerName")), int(key.get("queueId", -1)))] = value
    return out


async def reset_offset(instance: MQClientInstance, topic: str, group: str, offsets: Mapping[MessageQueue, int],
                       wait_s: float | None = None) -> None:
    """``MQClientInstance.resetOffset`` (push consumers only, as in RocketMQ)."""
    consumer = instance.consumers.get(group)
    if consumer is None or not _is_push(consumer):
        log.info("%s: [reset-offset] consumer does not exist. group=%s", instance.client_id, group)
        return
    wait = getattr(consumer, "reset_offset_wait_s", RESET_OFFSET_WAIT_S) if wait_s is None else wait_s
    rebalance = consumer.rebalance
    consumer.pause()
    try:
        table = rebalance.process_queue_table
        for mq, pq in list(table.items()):
            if mq.topic == topic and mq in offsets:
                pq.dropped = True
                pq.clear()
        await asyncio.sleep(wait)   # running pulls and listener calls end meanwhile
        for mq, pq in list(table.items()):
            off = offsets.get(mq)
            if mq.topic != topic or off is None:
                continue
            try:
                consumer.update_offset(mq, off, False)
                await rebalance.remove_unnecessary_message_queue(mq, pq)
                table.pop(mq, None)
            except (RemotingError, OSError) as exc:
                log.warning("%s: reset offset failed. group=%s, %s: %s", instance.client_id, group, mq, exc)
        log.info("%s: [reset-offset] %s of %s reset to %s", instance.client_id, topic, group,
                 {str(mq): o for mq, o in offsets.items()})
    finally:
        consumer.resume()
    instance.rebalance_now()


def _reset_consumer_client_offset(instance: MQClientInstance, request: RemotingCommand) -> None:
    topic, group = request.field("topic"), request.field("group")
    offsets = _offset_table(request)
    log.info("%s: invoke reset offset operation from broker. topic=%s, group=%s, timestamp=%s", instance.client_id,
             topic, group, (request.ext_fields or {}).get("timestamp"))
    instance.spawn(reset_offset(instance, topic, group, offsets))


# ------------------------------------------------------------------------------- 221 consumer status
def _get_consumer_status(instance: MQClientInstance, request: RemotingCommand) -> RemotingCommand:
    """``getConsumeStatus`` (deprecated in RocketMQ, still answered): the topic's in-memory offsets."""
    topic, group = request.field("topic"), request.field("group")
    consumer = instance.consumers.get(group)
    table: dict[MessageQueueKey, int] = {}
    if consumer is not None and _is_push(consumer) and consumer.offset_store is not None:
        table = {MessageQueueKey(mq): off for mq, off in consumer.offset_store.clone_offset_table(topic).items()}
    return request.response(ResponseCode.SUCCESS, body=json_body.dumps({"consumerTable": {},
                                                                         "messageQueueTable": table}))


def handle_request(instance: MQClientInstance, request: RemotingCommand) -> Any:
    """The answer (or an awaitable of it; None: no answer) to one of :data:`HANDLED`."""
    code = request.code
    if code == RequestCode.GET_CONSUMER_RUNNING_INFO:
        return _get_consumer_running_info(instance, request)
    if code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
        return _consume_message_directly(instance, request)
    if code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
        _reset_consumer_client_offset(instance, request)
        return None
    if code == RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT:
        return _get_consumer_status(instance, request)
    raise ValueError(f"request code {code} is not handled here")
