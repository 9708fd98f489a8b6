"""CONSUMER_SEND_MSG_BACK (36): a consumer hands a message back for a later retry
(RocketMQ 4.9.8 ``SendMessageProcessor.asyncConsumerSendMsgBack``; docs/remoting-protocol.md).

Request header ``ConsumerSendMsgBackRequestHeader``: ``offset`` (the consumed record's **commit-log**
offset, required), ``group`` (required), ``delayLevel`` (required; 0 = let the broker choose, < 0 = straight
to the DLQ), ``originMsgId``, ``originTopic``, ``unitMode``, ``maxReconsumeTimes`` (the push consumer's
limit; honoured from clients of V3_4_9 on, as Java does).

Steps, in Java's order and with its response codes and remarks:

0. the group must be a legal group name whose ``%RETRY%`` / ``%DLQ%`` topics are legal topic names
   (codec/names.py; our check, before anything is created): else SYSTEM_ERROR naming the group;
1. the subscription group must exist (or be auto-created): else SUBSCRIPTION_GROUP_NOT_EXIST (26);
2. the broker must be writable: else NO_PERMISSION (16) "the broker[<ip>] sending message is forbidden";
3. ``retryQueueNums <= 0``: SUCCESS and nothing stored;
4. ``%RETRY%<group>`` is created (``retryQueueNums`` queues, perm 6, unit-sub flag in unit mode) and must be
   writable (16 "the topic[...] sending message is forbidden");
5. the record is read at ``offset``: else SYSTEM_ERROR "look message by offset failed, <offset>";
6. a copy is built: ``RETRY_TOPIC`` = the record's topic when absent, ``WAIT=false``, reconsumeTimes + 1,
   ``ORIGIN_MESSAGE_ID`` = the existing one, else the record's **offset** msgId (MessageDecoder gives a
   stored record that id); body, flag, sysFlag, born host/timestamp, the other properties as they are;
7. reconsumeTimes >= max (group ``retryMaxTimes``, or the header's) or ``delayLevel < 0``: to
   ``%DLQ%<group>`` (1 queue, perm 6) queue 0 with ``DELAY=0`` (not delayed); otherwise to a random retry
   queue with delay level ``delayLevel``, or ``3 + reconsumeTimes`` when 0 - the store turns that into
   ``SCHEDULE_TOPIC_XXXX`` with REAL_TOPIC/REAL_QID (clamped to the highest level), and
   ScheduleMessageService delivers it to the retry topic when due;
8. the copy is put through ``controller.put_message``: PUT_OK -> SUCCESS, else SYSTEM_ERROR with the put
   status name as remark.

Missing or malformed header fields raise HeaderFieldError naming the field (the channel answers
SYSTEM_ERROR with that remark, like Java's RemotingCommandException).
"""

from __future__ import annotations

import logging
import random
from functools import partial
from typing import Any, Protocol

from rocketstream import codec
from rocketstream.broker import acl
from rocketstream.codec import names
from rocketstream.errors import HeaderFieldError, StoreError
from rocketstream.remoting.codes import RequestCode, ResponseCode
from rocketstream.remoting.command import RemotingCommand
from rocketstream.store.write.messages import Message, PutMessageResult

__all__ = ["send_back", "retry_topic", "dlq_topic", "RETRY_GROUP_TOPIC_PREFIX", "DLQ_GROUP_TOPIC_PREFIX",
           "PROPERTY_RETRY_TOPIC", "PROPERTY_ORIGIN_MESSAGE_ID", "PERM_READ", "PERM_WRITE", "register"]

log = logging.getLogger(__name__)

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"          # MixAll.RETRY_GROUP_TOPIC_PREFIX
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"              # MixAll.DLQ_GROUP_TOPIC_PREFIX
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"          # MessageConst.PROPERTY_RETRY_TOPIC
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PERM_WRITE = 0x2                              # PermName
PERM_READ = 0x4
TOPIC_FLAG_UNIT_SUB = 0x2                     # TopicSysFlag.buildSysFlag(false, true)
V3_4_9 = 121                                  # MQVersion.Version.V3_4_9.ordinal()
_HOST_BITS = codec.FLAG_BORNHOST_V6 | codec.FLAG_STOREHOST_V6
_INT32 = (-(2**31), 2**31 - 1)


class _Controller(Protocol):
    """What send_back uses of the BrokerController (core)."""

    store: Any            # MessageStore: look_message_by_offset
    config: Any           # BrokerConfig: broker_permission, broker_ip1, auto_create_subscription_group
    topics: Any           # TopicConfigManager: create_in_send_back(topic, queue_nums, perm, sys_flag=)
    subscription_groups: Any  # SubscriptionGroupManager: find_or_create(group, auto_create)

    def put_message(self, msg: Message, queue_id: int) -> PutMessageResult: ...


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def _int32_field(request: RemotingCommand, name: str, *, required: bool) -> int | None:
    value = request.int_field(name, required=required)
    if value is not None and not _INT32[0] <= value <= _INT32[1]:
        raise HeaderFieldError(name, f"is out of the Integer range: {value}")
    return value


def send_back(controller: _Controller, channel: object, request: RemotingCommand) -> RemotingCommand:
    """Answer one CONSUMER_SEND_MSG_BACK request (see the module doc)."""
    offset = request.int_field("offset")
    if not 0 <= offset < 2**63:
        raise HeaderFieldError("offset", f"is not a commit-log offset: {offset}")
    group = request.field("group")
    if not group:
        raise HeaderFieldError("group", "is empty")
    # before anything is created: the group and the %RETRY% / %DLQ% topics named after it must be legal
    # (an 8.5 MB group name once made topics.json 17 MB and every registration fail)
    problem = names.derived_topic_problem(group)
    if problem is not None:
        return request.response(ResponseCode.SYSTEM_ERROR, problem)
    delay_level = _int32_field(request, "delayLevel", required=True)
    assert delay_level is not None   # required
    unit_mode = request.bool_field("unitMode")
    header_max = _int32_field(request, "maxReconsumeTimes", required=False)

    sub = controller.subscription_groups.find_or_create(group, controller.config.auto_create_subscription_group)
    if sub is None:
        return request.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group not exist, {group} "
                                "\nSee http://rocketmq.apache.org/docs/faq/ for further details.")
    if not controller.config.broker_permission & PERM_WRITE:
        return request.response(ResponseCode.NO_PERMISSION,
                                f"the broker[{controller.config.broker_ip1}] sending message is forbidden")
    if sub.retry_queue_nums <= 0:
        return request.response(ResponseCode.SUCCESS)

    topic = retry_topic(group)
    queue_id = random.randrange(sub.retry_queue_nums)
    topic_config = controller.topics.create_in_send_back(topic, sub.retry_queue_nums, PERM_WRITE | PERM_READ,
                                                         sys_flag=TOPIC_FLAG_UNIT_SUB if unit_mode else 0)
    if topic_config is None:
        return request.response(ResponseCode.SYSTEM_ERROR, f"topic[{topic}] not exist")
    if not topic_config.perm & PERM_WRITE:
        return request.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")

    try:
        rec = controller.store.look_message_by_offset(offset)
    except StoreError as exc:
        log.info("CONSUMER_SEND_MSG_BACK from %s, group %s: no record at commit-log offset %d: %s",
                 getattr(channel, "addr", "?"), group, offset, exc)
        return request.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
    # with an ACL, the record copied must be of a topic the account may read (acl.py, beyond 4.9.8)
    refused = acl.refuse_unless(controller, channel, request, lambda: {rec.topic: acl.Perm.SUB})
    if refused is not None:
        return refused

    props = dict(rec.properties)
    if props.get(PROPERTY_RETRY_TOPIC) is None:
        props[PROPERTY_RETRY_TOPIC] = rec.topic
    props[codec.PROPERTY_WAIT] = "false"
    max_times = sub.retry_max_times
    if request.version >= V3_4_9 and header_max is not None:
        max_times = header_max
    if rec.reconsume_times >= max_times or delay_level < 0:
        topic = dlq_topic(group)
        queue_id = 0   # random % 1
        if controller.topics.create_in_send_back(topic, 1, PERM_WRITE | PERM_READ, sys_flag=0) is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"topic[{topic}] not exist")
        delay_level = 0
        props[codec.PROPERTY_DELAY] = "0"   # setDelayTimeLevel(0): stored, and not a delay
    elif delay_level == 0:
        delay_level = 3 + rec.reconsume_times
    if not (props.get(PROPERTY_ORIGIN_MESSAGE_ID) or "").strip():
        props[PROPERTY_ORIGIN_MESSAGE_ID] = rec.offset_msg_id
    msg = Message(topic=topic, body=rec.body, properties=props, flag=rec.flag, delay_level=delay_level,
                  sys_flag=rec.sys_flag & ~_HOST_BITS, born_timestamp=rec.born_timestamp, born_host=rec.born_host,
                  reconsume_times=rec.reconsume_times + 1, broker_copy=True)
    result = controller.put_message(msg, queue_id)
    if result is None:
        return request.response(ResponseCode.SYSTEM_ERROR, "putMessageResult is null")
    if result.ok:
        return request.response(ResponseCode.SUCCESS)
    log.warning("CONSUMER_SEND_MSG_BACK group %s offset %d: put to %s failed: %s %s", group, offset, topic,
                result.status.name, result.reason)
    return request.response(ResponseCode.SYSTEM_ERROR, result.status.name)


def register(controller: Any) -> None:
    """Register CONSUMER_SEND_MSG_BACK (36) on ``controller.server``."""
    controller.server.register(RequestCode.CONSUMER_SEND_MSG_BACK, partial(send_back, controller))
