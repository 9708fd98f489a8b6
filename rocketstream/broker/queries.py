"""Offset and message queries: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32),
VIEW_MESSAGE_BY_ID (33) and QUERY_MESSAGE (12) — RocketMQ 4.9.8's ``ConsumerManageProcessor``,
``AdminBrokerProcessor`` (29-32) and ``QueryMessageProcessor`` (12, 33).

Bodies of 12 and 33 are stored records as they are in the commit log (``MessageDecoder.decodes`` reads
them on the client).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from rocketstream.broker import acl
from rocketstream.broker.context import BrokerContext
from rocketstream.codec import names
from rocketstream.errors import HeaderFieldError, StoreError
from rocketstream.remoting.channel import Channel
from rocketstream.remoting.codes import RequestCode, ResponseCode
from rocketstream.remoting.command import RemotingCommand
from rocketstream.store.files.index_file import MAX_TIMESTAMP

__all__ = ["register"]

log = logging.getLogger("rocketstream.broker")

UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"   # MixAll.UNIQUE_MSG_QUERY_FLAG
DEFAULT_QUERY_MAX_NUM = 32                     # MessageStoreConfig.defaultQueryMaxNum


def query_consumer_offset(controller: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    """A committed offset; else 0 for a queue that still holds its first message (minOffset <= 0:
    ``checkInDiskByConsumeOffset`` is false, every message counts as in memory here); else 22."""
    group, topic, queue_id = req.field("consumerGroup"), req.field("topic"), req.int_field("queueId")
    offset = controller.offsets.query_offset(group, topic, queue_id)
    if offset >= 0:
        return req.response(ResponseCode.SUCCESS, fields={"offset": offset})
    if controller.store.min_offset(topic, queue_id) <= 0:
        return req.response(ResponseCode.SUCCESS, fields={"offset": 0})
    return req.response(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")


def update_consumer_offset(controller: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    """Usually oneway (the client's 5-s persist): the channel never answers a oneway request."""
    group, topic = req.field("consumerGroup"), req.field("topic")
    queue_id, offset = req.int_field("queueId"), req.int_field("commitOffset")
    # consumerOffset.json keys topic@group: only legal names are kept (codec/names.py)
    for name, problem in (("topic", names.topic_problem(topic)), ("consumerGroup", names.group_problem(group))):
        if problem is not None:
            raise HeaderFieldError(name, problem)
    controller.offsets.commit_offset(channel.addr, group, topic, queue_id, offset)
    return req.response(ResponseCode.SUCCESS)


def search_offset_by_timestamp(controller: BrokerContext, channel: Channel,
                               req: RemotingCommand) -> RemotingCommand:
    """4.9.8: ``getOffsetInQueueByTime`` (exact match, else the nearer neighbour). A 5.x client's
    ``boundaryType`` (LOWER / UPPER) selects 5.x's boundary search instead."""
    topic, queue_id, ts = req.field("topic"), req.int_field("queueId"), req.int_field("timestamp")
    boundary = req.field("boundaryType", required=False)
    if boundary is not None:
        offset = controller.store.search_offset(topic, queue_id, ts,
                                                "upper" if boundary.strip().upper() == "UPPER" else "lower")
    else:
        offset = controller.store.get_offset_in_queue_by_time(topic, queue_id, ts)
    return req.response(ResponseCode.SUCCESS, fields={"offset": offset})


def get_max_offset(controller: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    offset = controller.store.max_offset(req.field("topic"), req.int_field("queueId"))
    return req.response(ResponseCode.SUCCESS, fields={"offset": offset})


def get_min_offset(controller: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    offset = controller.store.min_offset(req.field("topic"), req.int_field("queueId"))
    return req.response(ResponseCode.SUCCESS, fields={"offset": offset})


def get_earliest_msg_storetime(controller: BrokerContext, channel: Channel,
                               req: RemotingCommand) -> RemotingCommand:
    ts = controller.store.earliest_store_time(req.field("topic"), req.int_field("queueId"))
    return req.response(ResponseCode.SUCCESS, fields={"timestamp": ts})


def view_message_by_id(controller: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    """The one record at the commit-log ``offset`` (decoded from an offsetMsgId), bytes as stored. With
    an ACL the record's topic needs SUB before its bytes are returned (4.9.8 checks nothing for 33)."""
    offset = req.int_field("offset")
    raw = controller.store.raw_record(offset)
    if raw is None:
        return req.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
    refused = acl.refuse_unless(controller, channel, req, lambda: {acl.record_topic(raw, offset): acl.Perm.SUB})
    if refused is not None:
        return refused
    return req.response(ResponseCode.SUCCESS, body=raw)


def query_message(controller: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    """``QueryMessageProcessor.queryMessage``: the records of ``topic`` with ``key`` (a UNIQ_KEY when
    the request carries ``_UNIQUE_KEY_QUERY=true``, then at most ``defaultQueryMaxNum``) stored in
    [beginTimestamp, endTimestamp], concatenated; 22 when there is none."""
    topic, key = req.field("topic"), req.field("key")
    max_num = req.int_field("maxNum")
    begin, end = req.int_field("beginTimestamp"), req.int_field("endTimestamp")
    unique = (req.field(UNIQUE_MSG_QUERY_FLAG, required=False) or "") == "true"
    if unique:
        max_num = DEFAULT_QUERY_MAX_NUM
    store = controller.store
    header: dict[str, object] = {"indexLastUpdateTimestamp": store.commit_log.last_store_timestamp,
              "indexLastUpdatePhyoffset": store.commit_log_max_offset()}
    records = []
    if max_num > 0 and key:
        try:
            records = store.query_message(topic, key, max_num=max_num, begin_ms=max(begin, 0),
                                          end_ms=min(end, MAX_TIMESTAMP), uniq_key=unique)
        except StoreError as exc:
            log.warning("queryMessage %s/%s failed: %s", topic, key, exc)
            return req.response(ResponseCode.SYSTEM_ERROR, f"query message failed: {exc}", fields=header)
    bodies = [raw for raw in (store.raw_record(r.physical_offset) for r in records) if raw is not None]
    if not bodies:
        return req.response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct",
                            fields=header)
    return req.response(ResponseCode.SUCCESS, fields=header, body=b"".join(bodies))


def register(controller: BrokerContext) -> None:
    table: dict[int, Callable[[BrokerContext, Channel, RemotingCommand], RemotingCommand]] = {
        RequestCode.QUERY_CONSUMER_OFFSET: query_consumer_offset,
        RequestCode.UPDATE_CONSUMER_OFFSET: update_consumer_offset,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: search_offset_by_timestamp,
        RequestCode.GET_MAX_OFFSET: get_max_offset,
        RequestCode.GET_MIN_OFFSET: get_min_offset,
        RequestCode.GET_EARLIEST_MSG_STORETIME: get_earliest_msg_storetime,
        RequestCode.VIEW_MESSAGE_BY_ID: view_message_by_id,
        RequestCode.QUERY_MESSAGE: query_message,
    }
    for code, fn in table.items():
        controller.server.register(code, functools.partial(_call, fn, controller))


def _call(fn: Callable[[BrokerContext, Channel, RemotingCommand], RemotingCommand], controller: BrokerContext,
          channel: Channel, request: RemotingCommand) -> RemotingCommand:
    return fn(controller, channel, request)
