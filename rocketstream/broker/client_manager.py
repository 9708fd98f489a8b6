"""Client management requests: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
CHECK_CLIENT_CONFIG (46) — RocketMQ's ``ClientManageProcessor`` and ``ConsumerManageProcessor`` — and the
``ClientHousekeepingService`` (connection close and the 10-s expiry scan). The registries are in
consumer_manager.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from rocketstream.broker.config import PERM_READ, PERM_WRITE
from rocketstream.broker.consumer_manager import ClientChannelInfo, subscription_from_json
from rocketstream.broker.context import BrokerContext
from rocketstream.broker.topic_manager import RETRY_GROUP_TOPIC_PREFIX
from rocketstream.codec.sql92 import compile_sql92, is_tag_type
from rocketstream.errors import BodyError, FilterExpressionError
from rocketstream.remoting import json_body
from rocketstream.remoting.channel import Channel
from rocketstream.remoting.codes import RequestCode, ResponseCode
from rocketstream.remoting.command import RemotingCommand

__all__ = ["register", "heart_beat", "unregister_client", "get_consumer_list_by_group", "check_client_config",
           "CLIENT_INNER_PRODUCER"]

log = logging.getLogger("rocketstream.broker")

CLIENT_INNER_PRODUCER = "CLIENT_INNER_PRODUCER"
SCAN_NOT_ACTIVE_CHANNEL_S = 10.0      # ClientHousekeepingService: every 10 s, first after 10 s


# ------------------------------------------------------------------------------------ processors
def _body(request: RemotingCommand, what: str) -> Mapping[str, Any]:
    doc = json_body.loads(request.body or b"", what=what)
    if not isinstance(doc, Mapping):
        raise BodyError(f"{what} is not a JSON object")
    return doc


async def heart_beat(controller: BrokerContext, channel: Channel, request: RemotingCommand) -> RemotingCommand:
    """``ClientManageProcessor.heartBeat``: register consumers (creating ``%RETRY%<group>`` and announcing
    it to the name servers at once) and producers; the response carries the broker's version."""
    doc = _body(request, "HeartbeatData")
    client_id = doc.get("clientID")
    if not isinstance(client_id, str) or not client_id:
        raise BodyError(f"HeartbeatData.clientID is missing or not a string: {client_id!r:.60}")
    info = ClientChannelInfo(channel, client_id, request.language, request.version)
    new_topic = False
    for data in doc.get("consumerDataSet") or []:
        if not isinstance(data, Mapping) or not isinstance(data.get("groupName"), str):
            raise BodyError("HeartbeatData.consumerDataSet holds an entry without a groupName")
        group = data["groupName"]
        sgc = controller.subscription_groups.find_or_create(group, controller.config.auto_create_subscription_group)
        notify = True
        if sgc is not None:
            notify = sgc.notify_consumer_ids_changed_enable
            sys_flag = 2 if data.get("unitMode") else 0   # TopicSysFlag.buildSysFlag(false, true)
            retry = RETRY_GROUP_TOPIC_PREFIX + group
            if controller.topics.get(retry) is None:
                controller.topics.create_in_send_back(retry, sgc.retry_queue_nums, PERM_READ | PERM_WRITE, sys_flag)
                new_topic = True
        subs = [subscription_from_json(s) for s in data.get("subscriptionDataSet") or []]
        changed = controller.consumers.register(
            group, info, str(data.get("consumeType") or "CONSUME_PASSIVELY"),
            str(data.get("messageModel") or "CLUSTERING"),
            str(data.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"), subs, notify)
        if changed:
            log.info("registerConsumer info changed %s %s", group, channel.addr)
    for data in doc.get("producerDataSet") or []:
        if not isinstance(data, Mapping) or not isinstance(data.get("groupName"), str):
            raise BodyError("HeartbeatData.producerDataSet holds an entry without a groupName")
        controller.producers.register(data["groupName"], info)
    if new_topic:   # registerBrokerAll before answering: the retry topic is routable when the client asks
        await controller.register_now()
    return request.response(ResponseCode.SUCCESS)


def unregister_client(controller: BrokerContext, channel: Channel, request: RemotingCommand) -> RemotingCommand:
    """``ClientManageProcessor.unregisterClient``."""
    client_id = request.field("clientID")
    producer_group = request.field("producerGroup", required=False)
    consumer_group = request.field("consumerGroup", required=False)
    if producer_group:
        controller.producers.unregister(producer_group, client_id, channel)
    if consumer_group:
        sgc = controller.subscription_groups.get(consumer_group)
        notify = sgc.notify_consumer_ids_changed_enable if sgc is not None else True
        controller.consumers.unregister(consumer_group, client_id, channel, notify)
    return request.response(ResponseCode.SUCCESS)


def get_consumer_list_by_group(controller: BrokerContext, channel: Channel,
                               request: RemotingCommand) -> RemotingCommand:
    """``ConsumerManageProcessor.getConsumerListByGroup``."""
    group = request.field("consumerGroup")
    ginfo = controller.consumers.group_info(group)
    if ginfo is not None and ginfo.channels:
        return request.response(ResponseCode.SUCCESS, body=json_body.dumps({"consumerIdList": ginfo.client_ids()}))
    log.warning("getConsumerGroupInfo failed, %s %s", group, channel.addr)
    return request.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")


def check_client_config(controller: BrokerContext, channel: Channel, request: RemotingCommand) -> RemotingCommand:
    """``ClientManageProcessor.checkClientConfig``: TAG subscriptions pass; SQL92 needs
    ``enablePropertyFilter`` (else 1) and an expression that compiles (else 23 with the parse error)."""
    doc = _body(request, "CheckClientRequestBody")
    sub = doc.get("subscriptionData")
    if isinstance(sub, Mapping):
        etype = sub.get("expressionType")
        if not is_tag_type(etype if isinstance(etype, str) else None):
            if not controller.config.enable_property_filter:
                return request.response(ResponseCode.SYSTEM_ERROR,
                                        f"The broker does not support consumer to filter message by {etype}")
            try:
                compile_sql92(str(sub.get("subString") or ""))
            except FilterExpressionError as exc:
                log.warning("Client %s@%s filter message, but failed to compile expression! sub=%s, error=%s",
                            doc.get("clientId"), doc.get("group"), sub, exc)
                return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"Invalid MessageSelector. {exc}")
    return request.response(ResponseCode.SUCCESS)


def register(controller: BrokerContext) -> None:
    server = controller.server
    server.register(RequestCode.HEART_BEAT, lambda ch, req: heart_beat(controller, ch, req))
    server.register(RequestCode.UNREGISTER_CLIENT, lambda ch, req: unregister_client(controller, ch, req))
    server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                    lambda ch, req: get_consumer_list_by_group(controller, ch, req))
    server.register(RequestCode.CHECK_CLIENT_CONFIG, lambda ch, req: check_client_config(controller, ch, req))

    def closed(channel: Channel) -> None:   # ClientHousekeepingService.onChannelClose
        controller.consumers.channel_closed(channel)
        controller.producers.channel_closed(channel)

    server.close_listeners.append(closed)

    async def scan() -> None:
        while True:
            await asyncio.sleep(SCAN_NOT_ACTIVE_CHANNEL_S)
            try:
                expiry = controller.config.channel_expired_timeout
                controller.producers.scan_not_active(expiry)
                controller.consumers.scan_not_active(expiry)
            except Exception:   # the scan must go on; logged with its traceback
                log.exception("scanNotActiveChannel failed")

    controller.add_service(scan, "client-housekeeping")
