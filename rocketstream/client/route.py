"""Topic routes (``TopicRouteData``) and what the client derives from them
(``MQClientInstance.topicRouteData2TopicPublishInfo`` / ``topicRouteData2TopicSubscribeInfo``,
``TopicPublishInfo.selectOneMessageQueue``; spec §2.20.3, §5.8).

The body is read with the tolerant fastjson reader (``remoting.json_body``): ``brokerAddrs`` keys may be
bare numbers (``{0:"..."}``) or quoted (``{"0":"..."}``).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from rocketstream.client.common import MessageQueue
from rocketstream.errors import BodyError
from rocketstream.remoting import json_body

__all__ = [
    "PERM_PRIORITY", "PERM_READ", "PERM_WRITE", "PERM_INHERIT", "MASTER_ID",
    "QueueData", "BrokerData", "TopicRouteData", "TopicPublishInfo", "parse_route",
    "publish_info", "subscribe_queues",
]

# PermName
PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1
MASTER_ID = 0   # MixAll.MASTER_ID


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(frozen=True, slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def select_addr(self) -> str | None:
        """``BrokerData.selectBrokerAddr``: the master, else any address."""
        addr = self.broker_addrs.get(MASTER_ID)
        if addr is None and self.broker_addrs:
            addr = random.choice(list(self.broker_addrs.values()))
        return addr


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    def broker(self, name: str) -> BrokerData | None:
        for b in self.broker_datas:
            if b.broker_name == name:
                return b
        return None


def _int(value: object, what: str, addr: str | None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BodyError(f"route body: {what} is not a number: {value!r:.60}", addr=addr)
    try:
        return int(value)
    except ValueError:
        raise BodyError(f"route body: {what} is not a number: {value!r:.60}", addr=addr) from None


def parse_route(body: bytes, *, addr: str | None = None) -> TopicRouteData:
    """``TopicRouteData.decode``; a body of another shape raises BodyError naming the field."""
    doc = json_body.loads(body, what="TopicRouteData body", addr=addr)
    if not isinstance(doc, dict):
        raise BodyError(f"route body is a {type(doc).__name__}, not an object", addr=addr)
    qds = []
    for i, q in enumerate(doc.get("queueDatas") or []):
        if not isinstance(q, dict) or not isinstance(q.get("brokerName"), str):
            raise BodyError(f"route body: queueDatas[{i}] has no brokerName", addr=addr)
        qds.append(QueueData(q["brokerName"], _int(q.get("readQueueNums", 0), f"queueDatas[{i}].readQueueNums", addr),
                             _int(q.get("writeQueueNums", 0), f"queueDatas[{i}].writeQueueNums", addr),
                             _int(q.get("perm", 0), f"queueDatas[{i}].perm", addr),
                             _int(q.get("topicSysFlag", 0) or 0, f"queueDatas[{i}].topicSysFlag", addr)))
    bds = []
    for i, b in enumerate(doc.get("brokerDatas") or []):
        if not isinstance(b, dict) or not isinstance(b.get("brokerName"), str):
            raise BodyError(f"route body: brokerDatas[{i}] has no brokerName", addr=addr)
        raw = b.get("brokerAddrs") or {}
        if not isinstance(raw, dict):
            raise BodyError(f"route body: brokerDatas[{i}].brokerAddrs is not an object", addr=addr)
        addrs = {_int(k, f"brokerDatas[{i}].brokerAddrs key", addr): str(v) for k, v in raw.items()
                 if v is not None}
        bds.append(BrokerData(str(b.get("cluster") or ""), b["brokerName"], addrs))
    conf = doc.get("orderTopicConf")
    return TopicRouteData(tuple(qds), tuple(bds), conf if isinstance(conf, str) and conf else None)


@dataclass(slots=True)
class TopicPublishInfo:
    """``TopicPublishInfo``: the writable queues and a round-robin index starting at a random place
    (``ThreadLocalIndex``; one counter per topic here)."""

    topic: str
    queues: list[MessageQueue]
    route: TopicRouteData | None = None
    order_topic: bool = False
    _index: itertools.count[int] = field(default_factory=lambda: itertools.count(random.randrange(1 << 16)))

    @property
    def ok(self) -> bool:
        return bool(self.queues)

    def select(self, last_broker_name: str | None = None) -> MessageQueue:
        """``selectOneMessageQueue(lastBrokerName)``: the next queue; on a retry, the next one on another
        broker when there is one."""
        if not self.queues:
            raise IndexError(f"no writable queue for topic {self.topic}")
        n = len(self.queues)
        if last_broker_name is not None:
            for _ in range(n):
                mq = self.queues[next(self._index) % n]
                if mq.broker_name != last_broker_name:
                    return mq
        return self.queues[next(self._index) % n]


def publish_info(topic: str, route: TopicRouteData, *, max_queues: int | None = None) -> TopicPublishInfo:
    """``topicRouteData2TopicPublishInfo``: ``orderTopicConf`` ("broker-a:4;broker-b:4") when set, else
    queue datas sorted by broker name with WRITE permission and a master address. ``max_queues`` caps
    each broker's count (the TBW102 fallback: ``min(defaultTopicQueueNums, readQueueNums)``)."""
    queues: list[MessageQueue] = []
    if route.order_topic_conf:
        for item in route.order_topic_conf.split(";"):
            name, _, count = item.partition(":")
            if name and count.strip().isdigit():
                queues += [MessageQueue(topic, name, i) for i in range(int(count))]
        return TopicPublishInfo(topic, queues, route, order_topic=True)
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if not qd.perm & PERM_WRITE:
            continue
        bd = route.broker(qd.broker_name)
        if bd is None or bd.master_addr() is None:
            continue
        n = qd.write_queue_nums if max_queues is None else min(max_queues, qd.read_queue_nums)
        queues += [MessageQueue(topic, qd.broker_name, i) for i in range(n)]
    return TopicPublishInfo(topic, queues, route)


def subscribe_queues(topic: str, route: TopicRouteData) -> set[MessageQueue]:
    """``topicRouteData2TopicSubscribeInfo``: queues 0..readQueueNums-1 of each queue data with READ."""
    return {MessageQueue(topic, qd.broker_name, i) for qd in route.queue_datas if qd.perm & PERM_READ
            for i in range(qd.read_queue_nums)}
