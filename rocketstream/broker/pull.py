"""PULL_MESSAGE (11; 361 LITE_PULL_MESSAGE is the same request from 5.x lite-pull consumers) and long
polling: RocketMQ 4.9.8's ``PullMessageProcessor`` and ``PullRequestHoldService``.

Checks in the Java order (broker readable, subscription group, topic, readable, queue id, subscription
from the request or from the heartbeat), then ``MessageStore.get_message_raw``: the response body is the
stored records' bytes, never decoded here, filtered by tags code only (the client completes the filter).
The store hands the records as views of the commit log, records adjacent there merged into one view
(the units of the range are examined as numpy arrays); a per-message filter goes to
``get_message_raw(record_filter=...)``, which then takes its per-record loop.
Store status -> response code as ``PullMessageProcessor`` maps it; the four response header fields
(suggestWhichBrokerId, nextBeginOffset, minOffset, maxOffset) are always present.

Long polling: a pull that finds nothing (19) with the SUSPEND bit is not answered; it is held under
(topic, queueId) until a put makes a message available at or after its offset (the store's put
listener calls :meth:`PullRequestHoldService.notify_message_arriving` right after the consume-queue
unit is written: woken at once, no polling) or until its hold time ends — ``suspendTimeoutMillis``
with ``longPollingEnable``, else ``shortPollingTimeMills``. Either way it is re-run without suspension
(``executeRequestWhenWakeup``) and answered with its original opaque. A held pull woken by messages its
filter does not match stays held (``notifyMessageArriving`` checks the new tags code). The commit
offset piggy-backed on a pull (COMMIT_OFFSET bit) is stored on the first run only.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from rocketstream.broker import sql_filter
from rocketstream.broker.config import PERM_READ
from rocketstream.broker.consumer_manager import SubscriptionData, build_subscription
from rocketstream.broker.context import BrokerContext
from rocketstream.broker.hold import PullRequest
from rocketstream.codec.sql92 import SqlFilter, is_tag_type
from rocketstream.errors import RemotingError
from rocketstream.remoting.channel import Channel
from rocketstream.remoting.codes import RequestCode, ResponseCode
from rocketstream.remoting.command import RemotingCommand
from rocketstream.store.write.messages import GetMessageStatus

__all__ = ["PullHeader", "process_pull", "execute_when_wakeup", "register", "FLAG_COMMIT_OFFSET",
           "FLAG_SUSPEND", "FLAG_SUBSCRIPTION", "FLAG_CLASS_FILTER", "FLAG_LITE_PULL"]

log = logging.getLogger("rocketstream.broker")

# PullSysFlag
FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION, FLAG_CLASS_FILTER, FLAG_LITE_PULL = 0x1, 0x2, 0x4, 0x8, 0x10
MASTER_ID = 0
FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

_STATUS_CODE = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


@dataclass(slots=True)
class PullHeader:
    """``PullMessageRequestHeader``."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    subscription: str | None
    sub_version: int
    expression_type: str | None

    @classmethod
    def decode(cls, r: RemotingCommand) -> PullHeader:
        ext = r.ext_fields
        if ext is not None:
            # the usual header, read straight from the dict; anything missing or not a plain number goes
            # through the general reading below, which names the field at fault
            try:
                get = ext.get
                return cls(consumer_group=ext["consumerGroup"], topic=ext["topic"], queue_id=int(ext["queueId"]),
                           queue_offset=int(ext["queueOffset"]), max_msg_nums=int(ext["maxMsgNums"]),
                           sys_flag=int(ext["sysFlag"]), commit_offset=int(ext["commitOffset"]),
                           suspend_timeout_millis=int(ext["suspendTimeoutMillis"]),
                           subscription=get("subscription"), sub_version=int(ext["subVersion"]),
                           expression_type=get("expressionType"))
            except (KeyError, ValueError):
                pass
        return cls(consumer_group=r.field("consumerGroup"), topic=r.field("topic"), queue_id=r.int_field("queueId"),
                   queue_offset=r.int_field("queueOffset"), max_msg_nums=r.int_field("maxMsgNums"),
                   sys_flag=r.int_field("sysFlag"), commit_offset=r.int_field("commitOffset"),
                   suspend_timeout_millis=r.int_field("suspendTimeoutMillis"),
                   subscription=r.field("subscription", required=False), sub_version=r.int_field("subVersion"),
                   expression_type=r.field("expressionType", required=False))


def _header(next_begin: int, lo: int, hi: int, suggest: int = MASTER_ID) -> dict[str, str]:
    """``PullMessageResponseHeader`` as extFields (``makeCustomHeaderToNet``: String.valueOf of each field),
    written as strings at once instead of through RemotingCommand.response's general conversion."""
    return {"suggestWhichBrokerId": str(suggest), "nextBeginOffset": str(next_begin), "minOffset": str(lo),
            "maxOffset": str(hi)}


def _response(request: RemotingCommand, code: int, remark: str, ext_fields: dict[str, str]) -> RemotingCommand:
    """``request.response(code, remark)`` carrying the response header's ``ext_fields`` as they are."""
    response = request.response(code, remark)
    response.ext_fields = ext_fields
    return response


# build_subscription's answers by (topic, subscription, expression type, sub version): a consumer sends the
# same ones with every pull (SubscriptionData is not changed by its users here); cleared when full
_SUBSCRIPTIONS: dict[tuple[str, str | None, str | None, int], tuple[SubscriptionData, frozenset[int] | None]] = {}
_SUBSCRIPTIONS_MAX = 4096


def _request_subscription(h: PullHeader) -> tuple[SubscriptionData, frozenset[int] | None]:
    """The request's subscription (``FilterAPI.build``) and its tags codes; ValueError as build_subscription."""
    key = (h.topic, h.subscription, h.expression_type, h.sub_version)
    found = _SUBSCRIPTIONS.get(key)
    if found is None:
        sub = build_subscription(h.topic, h.subscription, h.expression_type, h.sub_version)
        found = (sub, sub.tags_codes())
        if len(_SUBSCRIPTIONS) >= _SUBSCRIPTIONS_MAX:
            _SUBSCRIPTIONS.clear()
        _SUBSCRIPTIONS[key] = found
    return found


def process_pull(controller: BrokerContext, channel: Channel, request: RemotingCommand,
                 allow_suspend: bool) -> RemotingCommand | None:
    """``PullMessageProcessor.processRequest``; None when the request was held (long polling)."""
    h = PullHeader.decode(request)
    cfg = controller.config
    if not cfg.broker_permission & PERM_READ:
        return request.response(ResponseCode.NO_PERMISSION,
                                f"the broker[{cfg.broker_ip1}] pulling message is forbidden")
    sgc = controller.subscription_groups.find_or_create(h.consumer_group, cfg.auto_create_subscription_group)
    if sgc is None:
        return request.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{h.consumer_group}] does not exist, {FAQ}")
    if not sgc.consume_enable:
        return request.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}")
    has_suspend = bool(h.sys_flag & FLAG_SUSPEND)
    has_commit = bool(h.sys_flag & FLAG_COMMIT_OFFSET)
    has_subscription = bool(h.sys_flag & FLAG_SUBSCRIPTION)
    tc = controller.topics.get(h.topic)
    if tc is None:
        log.error("the topic %s not exist, consumer: %s", h.topic, channel.addr)
        return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please! {FAQ}")
    if not tc.readable:
        return request.response(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden")
    if h.queue_id < 0 or h.queue_id >= tc.read_queue_nums:
        return request.response(ResponseCode.SYSTEM_ERROR,
                                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:"
                                f"[{tc.read_queue_nums}] consumer:[{channel.addr}]")
    sub: SubscriptionData | None
    codes: frozenset[int] | None
    flt: SqlFilter | None = None    # SQL92: the compiled filter (sql_filter.py)
    if has_subscription:
        try:
            sub, codes = _request_subscription(h)
        except ValueError as exc:
            log.warning("Parse the consumer's subscription[%s] failed, group: %s: %s", h.subscription,
                        h.consumer_group, exc)
            return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed")
        if not is_tag_type(sub.expression_type):
            flt = sql_filter.compile_request_filter(h.topic, h.consumer_group, h.subscription)
    else:
        ginfo = controller.consumers.group_info(h.consumer_group)
        if ginfo is None:
            return request.response(ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's group info not exist{FAQ}")
        if not sgc.consume_broadcast_enable and ginfo.message_model == "BROADCASTING":
            return request.response(ResponseCode.NO_PERMISSION,
                                    f"the consumer group[{h.consumer_group}] can not consume by broadcast way")
        sub = ginfo.find_subscription(h.topic)
        if sub is None:
            return request.response(ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's subscription not exist{FAQ}")
        if sub.sub_version < h.sub_version:
            return request.response(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
        if not is_tag_type(sub.expression_type):
            flt = sql_filter.registered_filter(sub)
            if flt is None:
                return request.response(ResponseCode.FILTER_DATA_NOT_EXIST,
                                        "The broker's consumer filter data is not exist!Your expression may be wrong!")
        codes = sub.tags_codes()
    if not cfg.enable_property_filter and not is_tag_type(sub.expression_type):
        return request.response(ResponseCode.SYSTEM_ERROR,
                                f"The broker does not support consumer to filter message by {sub.expression_type}")
    # SQL92: the store's per-record loop checks each candidate's properties (sql_filter.py)
    check = sql_filter.record_filter(flt) if flt is not None else None
    result = controller.store.get_message_raw(h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, codes,
                                              record_filter=check)
    status = result.status
    if status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
        code = ResponseCode.PULL_OFFSET_MOVED if h.queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
        if code == ResponseCode.PULL_OFFSET_MOVED:
            log.info("the broker store no queue data, fix the request offset %d to %d, Topic: %s QueueId: %d "
                     "Consumer Group: %s", h.queue_offset, result.next_begin_offset, h.topic, h.queue_id,
                     h.consumer_group)
    else:
        code = _STATUS_CODE[status]
    fields = _header(result.next_begin_offset, result.min_offset, result.max_offset)
    response: RemotingCommand | None
    if code == ResponseCode.SUCCESS:
        # the segments (views of the commit-log mapping, adjacent records merged) are copied once, straight
        # into the response frame, as the channel encodes it at once (which drops the views)
        response = _response(request, code, status.name, fields)
        response.body_parts = result.buffers
        controller.stats.on_get(h.consumer_group, h.topic, result.message_count)
    elif code == ResponseCode.PULL_NOT_FOUND and allow_suspend and has_suspend:
        hold_ms = h.suspend_timeout_millis if cfg.long_polling_enable else cfg.short_polling_time_mills
        hold_ms = min(hold_ms, cfg.max_pull_suspend_time_mills)   # the client's ask, capped (config.py)
        request.body = None   # a pull carries no body: a held one keeps none
        controller.pull_holds.suspend(PullRequest(channel, request, h.topic, h.queue_id, h.queue_offset,
                                                  codes, time.monotonic() + max(hold_ms, 0) / 1000.0))
        response = None
    else:
        response = _response(request, code, status.name, fields)
    if allow_suspend and has_commit:   # storeOffsetEnable (a master): the first run only
        controller.offsets.commit_offset(_host_of(channel), h.consumer_group, h.topic, h.queue_id, h.commit_offset)
    return response


def _host_of(channel: Channel) -> str:
    return channel.addr


def execute_when_wakeup(controller: BrokerContext, req: PullRequest) -> None:
    """``executeRequestWhenWakeup``: run the held pull again without suspension and answer it with its
    original opaque."""
    try:
        response = process_pull(controller, req.channel, req.request, allow_suspend=False)
    except Exception as exc:   # the held request gets the SYSTEM_ERROR a direct run would have given
        log.exception("executeRequestWhenWakeup run failed for %s", req.channel.addr)
        response = req.request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
    if response is not None:   # a response to req.request: its opaque, RESPONSE flag
        try:
            req.channel.send_nowait(response)
        except RemotingError as exc:   # the consumer went away while its pull was held
            log.debug("could not answer a held pull on %s: %s", req.channel.addr, exc)


def register(controller: BrokerContext) -> None:
    def pull(channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        return process_pull(controller, channel, request, allow_suspend=True)

    controller.server.register(RequestCode.PULL_MESSAGE, pull)
    # 5.x lite-pull consumers: served as PULL_MESSAGE and checked as it (acl.EXTRA_RESOURCES)
    controller.server.register(RequestCode.LITE_PULL_MESSAGE, pull)
