"""STOPGAP admin codes the Java smoke program needs: UPDATE_AND_CREATE_TOPIC (17) and GET_CONSUME_STATS
(208), as RocketMQ 4.9.8's ``AdminBrokerProcessor`` answers them.

The controller registers these only when ``rocketstream.broker.admin`` (the "admin" helper's module,
which owns every admin code) cannot be imported; once it is merged this file can go.
"""

from __future__ import annotations

from rocketstream.broker.context import BrokerContext
from rocketstream.broker.topic_manager import SYSTEM_TOPICS, TopicConfig, validate_topic
from rocketstream.codec.fastjson import FrozenObject
from rocketstream.remoting import json_body
from rocketstream.remoting.channel import Channel
from rocketstream.remoting.codes import RequestCode, ResponseCode
from rocketstream.remoting.command import RemotingCommand

__all__ = ["register"]


async def update_and_create_topic(controller: BrokerContext, channel: Channel,
                                  req: RemotingCommand) -> RemotingCommand:
    topic = req.field("topic")
    if topic == controller.config.broker_cluster_name:
        return req.response(ResponseCode.SYSTEM_ERROR, f"the topic[{topic}] is conflict with system reserved words.")
    problem = validate_topic(topic)
    if problem is not None:
        return req.response(ResponseCode.SYSTEM_ERROR, problem)
    if topic in SYSTEM_TOPICS:
        return req.response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
    tc = TopicConfig(topic, req.int_field("readQueueNums"), req.int_field("writeQueueNums"), req.int_field("perm"),
                     topic_filter_type=req.field("topicFilterType"),
                     topic_sys_flag=req.int_field("topicSysFlag", required=False, default=0),
                     order=bool(req.bool_field("order")))
    controller.topics.update(tc)
    await controller.register_now()   # registerIncrementBrokerData: routes exist when we answer
    return req.response(ResponseCode.SUCCESS)


def get_consume_stats(controller: BrokerContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    group = req.field("consumerGroup")
    topic = req.field("topic", required=False)
    topics = [topic] if topic else sorted(controller.offsets.topics_of_group(group))
    store = controller.store
    table: dict[object, object] = {}
    for t in topics:
        tc = controller.topics.get(t)
        if tc is None:
            continue
        ginfo = controller.consumers.group_info(group)
        if ginfo is not None and ginfo.subscriptions and t not in ginfo.subscriptions:
            continue
        for q in range(tc.read_queue_nums):
            broker_offset = max(store.max_offset(t, q), 0)
            consumer_offset = max(controller.offsets.query_offset(group, t, q), 0)
            last = store.store_time_at(t, q, consumer_offset - 1) if consumer_offset > 0 else 0
            key = FrozenObject({"brokerName": controller.config.broker_name, "queueId": q, "topic": t})
            table[key] = {"brokerOffset": broker_offset, "consumerOffset": consumer_offset,
                          "lastTimestamp": max(last, 0)}
    return req.response(ResponseCode.SUCCESS, body=json_body.dumps({"consumeTps": 0.0, "offsetTable": table}))


def register(controller: BrokerContext) -> None:
    controller.server.register(RequestCode.UPDATE_AND_CREATE_TOPIC,
                               lambda ch, req: update_and_create_topic(controller, ch, req))
    controller.server.register(RequestCode.GET_CONSUME_STATS, lambda ch, req: get_consume_stats(controller, ch, req))
