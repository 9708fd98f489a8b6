"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320): RocketMQ 4.9.8's
``SendMessageProcessor`` / ``AbstractSendMessageProcessor`` over ``MessageStore``.

In order: header (V2's one-letter names are aliases of V1's), ``msgCheck`` (broker writable for order
topics, topic name, topics nobody may send to, topic lookup or auto-create from ``defaultTopic`` /
``%RETRY%``, queue id bound), a random writable queue for a negative queue id, the ``%RETRY%`` rules
(``handleRetryAndDLQ``: at ``maxReconsumeTimes`` the message goes to ``%DLQ%<group>``), then the put:
body, flag, sysFlag, bornTimestamp and reconsumeTimes as the producer sent them, the born host = the
client's socket address, properties as sent plus ``CLUSTER`` and without ``WAIT`` (single messages);
``DELAY`` makes the store rewrite the message to ``SCHEDULE_TOPIC_XXXX``; ``TRAN_MSG=true`` makes it a
half message (broker/transaction.py). The response carries the
offsetMsgId(s), queue id and queue offset, and the ``MSG_REGION`` / ``TRACE_ON`` extFields the Java
producer reads without a null check.

Every put goes through ``MessageStore.put_*``, whose put listeners wake held pulls (pull.py). Under
SYNC_FLUSH a put whose ``WAIT`` is true is answered once the flush thread has synced it (flush.py).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Awaitable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from rocketstream import codec
from rocketstream.broker import transaction
from rocketstream.broker.config import PERM_READ, PERM_WRITE, REGISTER_BROKER_TIMEOUT_S
from rocketstream.broker.context import BrokerContext
from rocketstream.broker.topic_manager import (
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    TopicConfig,
    validate_topic,
)
from rocketstream.codec import PROPERTY_CLUSTER, HostAddress
from rocketstream.errors import CorruptStoreError, HeaderFieldError
from rocketstream.remoting.channel import Channel
from rocketstream.remoting.codes import RequestCode, ResponseCode
from rocketstream.remoting.command import RemotingCommand
from rocketstream.store.write.messages import Message, PutMessageResult, PutMessageStatus

__all__ = ["SendHeader", "register", "send_message", "born_host_of", "batch_messages", "FAQ_APPLY_TOPIC"]

log = logging.getLogger("rocketstream.broker")

FAQ_APPLY_TOPIC = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
DLQ_NUMS_PER_GROUP = 1                       # MixAll.DLQ_NUMS_PER_GROUP
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"
V3_4_9 = 121                                  # MQVersion.Version.V3_4_9.ordinal()
_HOST_FLAGS = codec.FLAG_BORNHOST_V6 | codec.FLAG_STOREHOST_V6   # the broker sets these from the addresses

# SendMessageRequestHeaderV2 -> SendMessageRequestHeader field names
V2_NAMES = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
            "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
            "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "bname"}
_V1_TO_V2 = {v: k for k, v in V2_NAMES.items()}


@dataclass
class SendHeader:
    """``SendMessageRequestHeader`` (codes 310/320 send the V2 names; a HeaderFieldError names the V2
    field, as the client sent it)."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str | None
    reconsume_times: int | None
    unit_mode: bool
    max_reconsume_times: int | None
    batch: bool

    @classmethod
    def decode(cls, request: RemotingCommand) -> SendHeader:
        v2 = request.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
        ext = request.ext_fields
        if v2 and ext is not None:
            # the usual V2 header, read straight from the dict; anything missing or not a plain number
            # goes through the general reading below, which names the field at fault
            try:
                get = ext.get
                rt, mrt = get("j"), get("l")
                return cls(producer_group=ext["a"], topic=ext["b"], default_topic=ext["c"],
                           default_topic_queue_nums=int(ext["d"]), queue_id=int(ext["e"]), sys_flag=int(ext["f"]),
                           born_timestamp=int(ext["g"]), flag=int(ext["h"]), properties=get("i"),
                           reconsume_times=None if rt is None else int(rt),
                           unit_mode=(get("k") or "").lower() == "true",
                           max_reconsume_times=None if mrt is None else int(mrt),
                           batch=(get("m") or "").lower() == "true")
            except (KeyError, ValueError):
                pass

        def name(v1: str) -> str:
            return _V1_TO_V2[v1] if v2 else v1

        def opt_int(v1: str) -> int | None:
            return request.int_field(name(v1), required=False)

        return cls(producer_group=request.field(name("producerGroup")), topic=request.field(name("topic")),
                   default_topic=request.field(name("defaultTopic")),
                   default_topic_queue_nums=request.int_field(name("defaultTopicQueueNums")),
                   queue_id=request.int_field(name("queueId")), sys_flag=request.int_field(name("sysFlag")),
                   born_timestamp=request.int_field(name("bornTimestamp")), flag=request.int_field(name("flag")),
                   properties=request.field(name("properties"), required=False),
                   reconsume_times=opt_int("reconsumeTimes"), unit_mode=bool(request.bool_field(name("unitMode"))),
                   max_reconsume_times=opt_int("maxReconsumeTimes"), batch=bool(request.bool_field(name("batch"))))


def born_host_of(channel: Channel) -> HostAddress:
    """The client's socket address (``channel.remoteAddress()``), as the record's BORNHOST."""
    return _parse_peer(channel.addr)


@lru_cache(maxsize=4096)
def _parse_peer(addr: str) -> HostAddress:
    try:
        return HostAddress.parse(addr)
    except Exception:   # a peer address we cannot parse (not TCP): record it as unknown, never fail the send
        return HostAddress("127.0.0.1", 0)


def _decode_props(text: str | None, field_name: str) -> dict[str, str]:
    if not text:
        return {}
    try:
        return codec.decode_properties(text.encode("utf-8", "surrogatepass"))
    except CorruptStoreError as exc:
        raise HeaderFieldError(field_name, f"is not a properties string: {exc}") from exc


def _response(controller: BrokerContext, request: RemotingCommand, code: int, remark: str | None = None,
              fields: dict[str, object] | None = None) -> RemotingCommand:
    """Every send response carries MSG_REGION and TRACE_ON (the producer reads them without a null check)."""
    ext: dict[str, object] = dict(fields or {})
    ext[PROPERTY_MSG_REGION] = controller.config.region_id
    ext[PROPERTY_TRACE_SWITCH] = True   # BrokerConfig.traceOn defaults to true
    return request.response(code, remark, fields=ext)


def _msg_check(controller: BrokerContext, channel: Channel, request: RemotingCommand,
               header: SendHeader) -> tuple[TopicConfig | None, RemotingCommand | None]:
    """``AbstractSendMessageProcessor.msgCheck``: the topic config, or the error response."""
    cfg = controller.config
    topics = controller.topics
    if not cfg.broker_permission & PERM_WRITE and topics.is_order_topic(header.topic):
        return None, _response(controller, request, ResponseCode.NO_PERMISSION,
                               f"the broker[{cfg.broker_ip1}] sending message is forbidden")
    problem = validate_topic(header.topic)
    if problem is not None:
        return None, _response(controller, request, ResponseCode.SYSTEM_ERROR, problem)
    if header.topic in NOT_ALLOWED_SEND_TOPICS:
        return None, _response(controller, request, ResponseCode.NO_PERMISSION,
                               f"Sending message to topic[{header.topic}] is forbidden.")
    tc = topics.get(header.topic)
    if tc is None:
        # TopicSysFlag.buildSysFlag: FLAG_UNIT 1 for unit-mode topics, FLAG_UNIT_SUB 2 for their retry topics
        sys_flag = 0
        if header.unit_mode:
            sys_flag = 2 if header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else 1
        tc = topics.create_in_send(header.topic, header.default_topic, channel.addr, header.default_topic_queue_nums,
                                   sys_flag)
        if tc is None and header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            tc = topics.create_in_send_back(header.topic, 1, PERM_WRITE | PERM_READ, sys_flag)
        if tc is None:
            return None, _response(controller, request, ResponseCode.TOPIC_NOT_EXIST,
                                   f"topic[{header.topic}] not exist, apply first please!{FAQ_APPLY_TOPIC}")
    valid = max(tc.write_queue_nums, tc.read_queue_nums)
    if header.queue_id >= valid:
        return None, _response(controller, request, ResponseCode.SYSTEM_ERROR,
                               f"request queueId[{header.queue_id}] is illegal, {tc} Producer: {channel.addr}")
    return tc, None


def _retry_and_dlq(controller: BrokerContext, request: RemotingCommand, header: SendHeader,
                   msg: Message) -> tuple[int | None, RemotingCommand | None]:
    """``handleRetryAndDLQ`` for ``%RETRY%<group>`` topics: at ``maxReconsumeTimes`` (the header's when
    the client is >= V3_4_9, else the group's ``retryMaxTimes``) the message goes to ``%DLQ%<group>``.
    Returns (queue id to use or None, error response or None)."""
    if not header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return None, None
    group = header.topic[len(RETRY_GROUP_TOPIC_PREFIX):]
    sgc = controller.subscription_groups.find_or_create(group, controller.config.auto_create_subscription_group)
    if sgc is None:
        return None, _response(controller, request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                               f"subscription group not exist, {group}{FAQ_APPLY_TOPIC}")
    max_times = sgc.retry_max_times
    if request.version >= V3_4_9 and header.max_reconsume_times is not None:
        max_times = header.max_reconsume_times
    times = header.reconsume_times or 0
    if times < max_times:
        return None, None
    dlq = DLQ_GROUP_TOPIC_PREFIX + group
    controller.topics.create_in_send_back(dlq, DLQ_NUMS_PER_GROUP, PERM_WRITE | PERM_READ)
    msg.topic = dlq
    msg.delay_level = 0
    msg.properties[codec.PROPERTY_DELAY] = "0"   # MessageExt.setDelayTimeLevel(0)
    return random.randrange(99999999) % DLQ_NUMS_PER_GROUP, None


def _put_response(controller: BrokerContext, request: RemotingCommand, result: PutMessageResult,
                  queue_id: int) -> RemotingCommand:
    """``handlePutMessageResult``."""
    status = result.status
    if status is PutMessageStatus.PUT_OK or status is PutMessageStatus.FLUSH_DISK_TIMEOUT:
        code = ResponseCode.SUCCESS if status is PutMessageStatus.PUT_OK else ResponseCode.FLUSH_DISK_TIMEOUT
        controller.stats.on_put(request.field("b", required=False) or request.field("topic", required=False) or "",
                                result.count, result.wrote_bytes)
        return _response(controller, request, code, None, {
            "msgId": ",".join(result.offset_msg_ids), "queueId": queue_id, "queueOffset": result.queue_offset})
    reason = f" ({result.reason})" if result.reason else ""
    controller.stats.on_put_failed(request.field("b", required=False) or request.field("topic", required=False) or "")
    if status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED:
        return _response(controller, request, ResponseCode.SYSTEM_ERROR,
                         "create mapped file failed, server is busy or broken." + reason)
    if status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
        return _response(controller, request, ResponseCode.MESSAGE_ILLEGAL,
                         "the message is illegal, maybe msg body or properties length not matched. msg body "
                         "length limit 128k, msg properties length limit 32k." + reason)
    if status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
        return _response(controller, request, ResponseCode.SERVICE_NOT_AVAILABLE,
                         "service not available now. It may be caused by one of the following reasons: the broker's "
                         "disk is full, messages are put to the slave, message store has been shut down, etc."
                         + reason)
    return _response(controller, request, ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR" + reason)


def _wait_store_msg_ok(props: dict[str, str]) -> bool:
    """``Message.isWaitStoreMsgOK``: the ``WAIT`` property, true when absent."""
    wait = props.get(codec.PROPERTY_WAIT)
    return wait is None or wait.lower() == "true"


def _answer(controller: BrokerContext, request: RemotingCommand, result: PutMessageResult, queue_id: int,
            wait: bool) -> RemotingCommand | Awaitable[RemotingCommand]:
    """The response now, or - SYNC_FLUSH, a put that waits for the store (``handleDiskFlush``) - once the
    flush thread has synced the put's bytes (flush.py; the loop serves other requests meanwhile)."""
    flusher = controller.flusher
    if (wait and flusher is not None and result.status is PutMessageStatus.PUT_OK
            and controller.store.config.sync_flush):
        return _answer_when_durable(controller, request, result, queue_id)
    return _put_response(controller, request, result, queue_id)


async def _answer_when_durable(controller: BrokerContext, request: RemotingCommand, result: PutMessageResult,
                               queue_id: int) -> RemotingCommand:
    if not await controller.flusher.wait_durable(result.physical_offset + result.wrote_bytes):
        result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
    return _put_response(controller, request, result, queue_id)


def send_message(controller: BrokerContext, channel: Channel,
                 request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
    """Codes 10 and 310 (one message) and 320 (a batch). A send that created its topic answers after the topic's
    registration with the name servers (``createTopicInSendMessageMethod`` registers before the send goes
    on), so a producer's or consumer's route query that follows the answer finds the topic."""
    header = SendHeader.decode(request)
    tc, error = _msg_check(controller, channel, request, header)
    if error is not None:
        return error
    assert tc is not None
    registration = controller.topics.announce_created()
    answer = _send_checked(controller, channel, request, header, tc)
    if registration is None:
        return answer
    return _answer_after(registration, answer)


async def _answer_after(registration: Awaitable[Any], answer: RemotingCommand | Awaitable[RemotingCommand]
                        ) -> RemotingCommand:
    """``answer`` once ``registration`` (the controller's task, which logs its own failures) has ended, or
    after REGISTER_BROKER_TIMEOUT_S (``registerBrokerAll`` waits as long for its name servers)."""
    await asyncio.wait((asyncio.ensure_future(registration),), timeout=REGISTER_BROKER_TIMEOUT_S)
    return await answer if inspect.isawaitable(answer) else answer


def _send_checked(controller: BrokerContext, channel: Channel, request: RemotingCommand, header: SendHeader,
                  tc: TopicConfig) -> RemotingCommand | Awaitable[RemotingCommand]:
    """:func:`send_message` after ``msgCheck``."""
    queue_id = header.queue_id
    if queue_id < 0:
        queue_id = random.randrange(99999999) % max(tc.write_queue_nums, 1)
    sys_flag = header.sys_flag & ~_HOST_FLAGS
    if tc.topic_filter_type == "MULTI_TAG":
        sys_flag |= codec.FLAG_MULTI_TAGS
    props_field = "i" if request.code != RequestCode.SEND_MESSAGE else "properties"
    props = _decode_props(header.properties, props_field)
    if request.code == RequestCode.SEND_BATCH_MESSAGE:
        return _send_batch(controller, channel, request, header, tc, queue_id, sys_flag, props)
    if props.get(codec.PROPERTY_TRAN_MSG, "").lower() == "true":   # Boolean.parseBoolean(TRAN_MSG)
        return _send_half(controller, channel, request, header, queue_id, sys_flag, props)
    props[PROPERTY_CLUSTER] = controller.config.broker_cluster_name
    # 4.9.8 stores no WAIT for single messages (9 bytes saved) - but a delayed message's properties string is
    # rebuilt from the map, WAIT included, when CommitLog.putMessage rewrites it to SCHEDULE_TOPIC_XXXX
    # (seen in stores the real broker wrote: SCHEDULE_TOPIC_XXXX records carry WAIT=true, others none)
    wait = _wait_store_msg_ok(props)
    delay_text = props.get(codec.PROPERTY_DELAY, "0").strip()
    if not (delay_text.isdigit() and int(delay_text) > 0):
        props.pop(codec.PROPERTY_WAIT, None)
    msg = Message(topic=header.topic, body=request.body or b"", properties=props, flag=header.flag,
                  born_timestamp=header.born_timestamp, born_host=born_host_of(channel), sys_flag=sys_flag,
                  reconsume_times=header.reconsume_times or 0, as_sent=True)
    dlq_queue, error = _retry_and_dlq(controller, request, header, msg)
    if error is not None:
        return error
    if dlq_queue is not None:
        queue_id = dlq_queue
    result = controller.store.put_message(msg, queue_id)
    return _answer(controller, request, result, queue_id, wait)


def _send_half(controller: BrokerContext, channel: Channel, request: RemotingCommand, header: SendHeader,
               queue_id: int, sys_flag: int, props: dict[str, str]) -> RemotingCommand | Awaitable[RemotingCommand]:
    """A transactional send (``TRAN_MSG=true``): refused under ``rejectTransactionMessage``, else stored as a
    half message (``TransactionalMessageService.asyncPrepareMessage``, broker/transaction.py); the answer
    names the real queue id with the half record's offsetMsgId and half-queue offset."""
    if controller.config.reject_transaction_message:
        return _response(controller, request, ResponseCode.NO_PERMISSION,
                         f"the broker[{controller.config.broker_ip1}] sending transaction message is forbidden")
    msg = transaction.half_message(header.topic, queue_id, props, body=request.body or b"", flag=header.flag,
                                   sys_flag=sys_flag, born_timestamp=header.born_timestamp,
                                   born_host=born_host_of(channel), reconsume_times=header.reconsume_times or 0,
                                   cluster=controller.config.broker_cluster_name)
    # no topic config for the half topic here: the check service makes it (1 queue), as 4.9.8's does
    result = controller.store.put_message(msg, 0, create_topic=False)
    return _answer(controller, request, result, queue_id, _wait_store_msg_ok(props))


def _send_batch(controller: BrokerContext, channel: Channel, request: RemotingCommand, header: SendHeader,
                tc: TopicConfig, queue_id: int, sys_flag: int,
                batch_props: dict[str, str]) -> RemotingCommand | Awaitable[RemotingCommand]:
    """``sendBatchMessage``: the body is ``MessageDecoder.encodeMessages``' concatenation; the batch's own
    properties (header ``i``: ``WAIT``) and ``CLUSTER`` are appended to each inner message's
    (``MessageExtEncoder.encode(MessageExtBatch)``). The store takes the body as a whole when it can
    (``MessageStore.put_raw_batch``); otherwise - and to word a refusal - one ``Message`` per inner message."""
    if len(header.topic) > 127:
        return _response(controller, request, ResponseCode.MESSAGE_ILLEGAL,
                         f"message topic length too long {len(header.topic)}")
    if header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return _response(controller, request, ResponseCode.MESSAGE_ILLEGAL,
                         f"batch request does not support retry group {header.topic}")
    batch_props = dict(batch_props)
    batch_props[PROPERTY_CLUSTER] = controller.config.broker_cluster_name
    born_host = born_host_of(channel)
    sys_flag = sys_flag & ~codec.TRANSACTION_MASK & ~codec.FLAG_COMPRESSED & ~codec.COMPRESSION_TYPE_MASK
    wait = _wait_store_msg_ok(batch_props)
    result = controller.store.put_raw_batch(header.topic, queue_id, request.body or b"", batch_properties=batch_props,
                                            sys_flag=sys_flag, born_timestamp=header.born_timestamp,
                                            born_host=born_host, reconsume_times=header.reconsume_times or 0)
    if result is not None:
        return _answer(controller, request, result, queue_id, wait)
    msgs = batch_messages(header.topic, request.body or b"", batch_props, sys_flag=sys_flag,
                          born_timestamp=header.born_timestamp, born_host=born_host,
                          reconsume_times=header.reconsume_times or 0)
    if isinstance(msgs, str):
        return _response(controller, request, ResponseCode.MESSAGE_ILLEGAL, msgs)
    result = controller.store.put_messages(msgs, queue_id)
    return _answer(controller, request, result, queue_id, wait)


def batch_messages(topic: str, body: bytes, batch_props: dict[str, str], *, sys_flag: int, born_timestamp: int,
                   born_host: HostAddress, reconsume_times: int) -> list[Message] | str:
    """The general path's messages of a batch body (each inner message's properties, then ``batch_props``),
    or the reason the batch is refused."""
    try:
        entries = codec.decode_batch_body(body)
    except CorruptStoreError as exc:
        return f"the batch body does not decode: {exc}"
    if not entries:
        return "the batch body holds no message"
    msgs = []
    for entry in entries:
        props = dict(entry.properties)
        props.update(batch_props)
        if int(props.get(codec.PROPERTY_DELAY, "0") or 0) > 0:
            return "TimeDelayLevel is not supported for batch"
        msgs.append(Message(topic=topic, body=entry.body, properties=props, flag=entry.flag,
                            born_timestamp=born_timestamp, born_host=born_host, sys_flag=sys_flag,
                            reconsume_times=reconsume_times, as_sent=True))
    return msgs


def register(controller: BrokerContext) -> None:
    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        controller.server.register(code, lambda ch, req: send_message(controller, ch, req))
