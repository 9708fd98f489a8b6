"""Admin queries a consumer tool needs: a group's progress from the brokers (``mqadmin consumerProgress``).

``consumer_progress`` does what ``ConsumerProgressSubCommand`` / ``DefaultMQAdminExtImpl.examineConsumeStats``
do in 4.9.8: the route of ``%RETRY%<group>`` (or of ``topic`` when given) names the brokers; each is asked
GET_CONSUME_STATS (208) and the per-queue rows are merged: broker offset (max offset), consumer offset (the
group's committed offset on that broker) and their difference.

With ``namespace`` the group and topic are looked up in it (``ns%group``, ``%RETRY%ns%group``, ``ns%topic``,
as a Java admin with ``setNamespace`` wraps them) and the rows name their topics without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rocketstream.client.allocate import MessageQueue
from rocketstream.client.instance import MQClientInstance
from rocketstream.client.namespace import check_namespace, unwrap, wrap
from rocketstream.client.rebalance import retry_topic
from rocketstream.codec.fastjson import FrozenObject
from rocketstream.errors import BodyError, BrokerResponseError, MQClientError
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode, json_body

__all__ = ["QueueProgress", "consume_stats", "consumer_progress"]


@dataclass(frozen=True)
class QueueProgress:
    queue: MessageQueue
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def diff(self) -> int:
        return max(self.broker_offset - self.consumer_offset, 0)


def _int(value: object, what: str, addr: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BodyError(f"ConsumeStats: {what} is not a number: {value!r}", addr=addr)
    return int(value)


async def consume_stats(instance: MQClientInstance, addr: str, group: str, topic: str | None = None,
                        timeout: float = 5.0) -> list[QueueProgress]:
    """GET_CONSUME_STATS (208) to one broker."""
    fields: dict[str, object] = {"consumerGroup": group}
    if topic:
        fields["topic"] = topic
    req = RemotingCommand.request(RequestCode.GET_CONSUME_STATS, fields)
    resp = await instance.api.invoke(addr, req, timeout)
    if resp.code != ResponseCode.SUCCESS:
        raise BrokerResponseError(resp.code, resp.remark, addr=addr, request_code=req.code,
                                  what=f"consume stats of {group}")
    doc = json_body.loads(resp.body or b"{}", what="ConsumeStats", addr=addr)
    table = doc.get("offsetTable") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise BodyError("ConsumeStats has no offsetTable object", addr=addr)
    rows = []
    for key, value in table.items():
        if not isinstance(key, (dict, FrozenObject)) or not isinstance(value, dict):
            raise BodyError(f"ConsumeStats entry is not MessageQueue -> OffsetWrapper: {key!r:.80}", addr=addr)
        k: Any = key
        mq = MessageQueue(str(k.get("topic")), str(k.get("brokerName")), _int(k.get("queueId"), "queueId", addr))
        rows.append(QueueProgress(mq, _int(value.get("brokerOffset", 0), "brokerOffset", addr),
                                  _int(value.get("consumerOffset", 0), "consumerOffset", addr),
                                  _int(value.get("lastTimestamp", 0), "lastTimestamp", addr)))
    return rows


async def consumer_progress(instance: MQClientInstance, group: str, topic: str | None = None, *,
                            namespace: str | None = None) -> list[QueueProgress]:
    """Every broker's rows for ``group`` (optionally one topic), sorted by queue; MQClientError when the group
    has no route (``%RETRY%<group>`` exists once a consumer of the group has sent a heartbeat). ``namespace``:
    ``group`` and ``topic`` are of that namespace; the rows show topics without it."""
    namespace = check_namespace(namespace)
    if namespace:
        wrapped = await consumer_progress(instance, wrap(namespace, group), wrap(namespace, topic) if topic else None)
        return sorted((QueueProgress(MessageQueue(unwrap(namespace, r.queue.topic), r.queue.broker_name,
                                                  r.queue.queue_id), r.broker_offset, r.consumer_offset,
                                     r.last_timestamp) for r in wrapped), key=lambda r: r.queue)
    route_topic = topic or retry_topic(group)
    route = await instance.api.get_route(route_topic)
    if route is None:
        raise MQClientError(f"no route for {route_topic}: the group {group} never connected to a broker "
                            "(CONSUMER_NOT_ONLINE)" if topic is None else f"topic {topic} does not exist")
    rows: list[QueueProgress] = []
    for bd in route.broker_datas:
        addr = bd.master_addr()
        if addr is not None:
            rows += await consume_stats(instance, addr, group, topic)
    return sorted(rows, key=lambda r: r.queue)
