"""Client registries of the broker: ``ConsumerManager`` / ``ConsumerGroupInfo`` (consumer groups with
their members and subscriptions), ``ProducerManager``, ``SubscriptionData`` and ``FilterAPI.build``.

Members are registered per group by clientID and connection; they leave when they unregister, when the
connection closes, or when no heartbeat came for ``channelExpiredTimeout`` (120 s) — the scan then closes
their connection. A change of members or subscribed topics sends NOTIFY_CONSUMER_IDS_CHANGED (40,
oneway) to every member (``DefaultConsumerIdsChangeListener``, ``Broker2Client``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocketstream.broker.config import BrokerConfig
from rocketstream.broker.subscription_group import SubscriptionGroupManager
from rocketstream.codec import java_hash
from rocketstream.errors import BodyError, RemotingError
from rocketstream.remoting.channel import Channel
from rocketstream.remoting.codes import RequestCode
from rocketstream.remoting.command import RemotingCommand

__all__ = ["ClientChannelInfo", "SubscriptionData", "ConsumerGroupInfo", "ConsumerManager", "ProducerManager",
           "build_subscription", "subscription_from_json", "SUB_ALL"]

log = logging.getLogger("rocketstream.broker")

SUB_ALL = "*"                         # SubscriptionData.SUB_ALL

def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class ClientChannelInfo:
    channel: Channel
    client_id: str
    language: str = "JAVA"
    version: int = 0
    last_update_ms: int = field(default_factory=_now_ms)


@dataclass
class SubscriptionData:
    """``SubscriptionData``: one topic's filter (TAG: ``tags_set`` and their Java hash codes)."""

    topic: str
    sub_string: str = SUB_ALL
    tags_set: set[str] = field(default_factory=set)
    code_set: set[int] = field(default_factory=set)
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    @property
    def matches_all(self) -> bool:
        return self.sub_string == SUB_ALL or not self.code_set and not self.tags_set

    def tags_codes(self) -> frozenset[int] | None:
        """The codes the store's tags-code filter keeps; None = every message."""
        if self.class_filter_mode or self.expression_type.upper() != "TAG" or self.matches_all:
            return None
        return frozenset(self.code_set)

    def to_json(self) -> dict[str, Any]:
        return {"classFilterMode": self.class_filter_mode, "codeSet": sorted(self.code_set),
                "expressionType": self.expression_type, "subString": self.sub_string,
                "subVersion": self.sub_version, "tagsSet": sorted(self.tags_set), "topic": self.topic}


def build_subscription(topic: str, sub_string: str | None, expression_type: str | None = "TAG",
                       sub_version: int = 0) -> SubscriptionData:
    """``FilterAPI.build``: a TAG expression split on "||" into tags and their ``String.hashCode()``s;
    empty or "*" subscribes to everything. A non-TAG expression is kept as text."""
    etype = expression_type or "TAG"
    if etype.upper() != "TAG":
        return SubscriptionData(topic, sub_string or "", sub_version=sub_version, expression_type=etype)
    if sub_string is None or not sub_string.strip() or sub_string.strip() == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL, sub_version=sub_version, expression_type=etype)
    tags = [t.strip() for t in sub_string.split("||") if t.strip()]
    if not tags:
        raise ValueError(f"subString split error: {sub_string!r}")
    return SubscriptionData(topic, sub_string, set(tags), {java_hash(t) for t in tags}, sub_version, etype)


def subscription_from_json(doc: object) -> SubscriptionData:
    if not isinstance(doc, Mapping):
        raise BodyError("subscriptionData is not an object")
    topic = doc.get("topic")
    if not isinstance(topic, str):
        raise BodyError(f"subscriptionData.topic is not a string: {topic!r:.60}")
    tags = doc.get("tagsSet") or []
    codes = doc.get("codeSet") or []
    if not isinstance(tags, list) or not isinstance(codes, list):
        raise BodyError(f"subscriptionData of {topic}: tagsSet/codeSet are not arrays")
    try:
        code_set = {int(c) for c in codes}
        version = int(doc.get("subVersion") or 0)
    except (TypeError, ValueError):
        raise BodyError(f"subscriptionData of {topic}: codeSet/subVersion are not numbers") from None
    return SubscriptionData(topic=topic, sub_string=str(doc.get("subString") or SUB_ALL),
                            tags_set={str(t) for t in tags}, code_set=code_set, sub_version=version,
                            expression_type=str(doc.get("expressionType") or "TAG"),
                            class_filter_mode=bool(doc.get("classFilterMode", False)))


@dataclass
class ConsumerGroupInfo:
    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[str, ClientChannelInfo] = field(default_factory=dict)     # clientId -> info
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)  # topic -> subscription
    last_update_ms: int = field(default_factory=_now_ms)

    def client_ids(self) -> list[str]:
        return list(self.channels)

    def find_subscription(self, topic: str) -> SubscriptionData | None:
        return self.subscriptions.get(topic)

    def update_channel(self, info: ClientChannelInfo, consume_type: str, message_model: str,
                       consume_from_where: str) -> bool:
        """``ConsumerGroupInfo.updateChannel``: True when the client (or its connection) is new."""
        self.consume_type, self.message_model, self.consume_from_where = consume_type, message_model, \
            consume_from_where
        old = self.channels.get(info.client_id)
        self.channels[info.client_id] = info
        if old is None or old.channel is not info.channel:
            log.info("new consumer connected, group: %s %s %s channel: %s", self.group_name, consume_type,
                     message_model, info.channel.addr)
            return True
        return False

    def update_subscriptions(self, subs: Iterable[SubscriptionData]) -> bool:
        """``ConsumerGroupInfo.updateSubscription``: a topic's subscription is replaced only by a newer
        subVersion; topics absent from the heartbeat are dropped. True when the topic set changed."""
        changed = False
        seen = set()
        for sub in subs:
            seen.add(sub.topic)
            old = self.subscriptions.get(sub.topic)
            if old is None:
                self.subscriptions[sub.topic] = sub
                changed = True
            elif sub.sub_version > old.sub_version:
                self.subscriptions[sub.topic] = sub
        for topic in [t for t in self.subscriptions if t not in seen]:
            del self.subscriptions[topic]
            changed = True
        self.last_update_ms = _now_ms()
        return changed

    def remove_channel(self, channel: Channel) -> bool:
        gone = [cid for cid, info in self.channels.items() if info.channel is channel]
        for cid in gone:
            del self.channels[cid]
        return bool(gone)


class ConsumerManager:
    """Consumer groups by name; ``notify(group)`` sends NOTIFY_CONSUMER_IDS_CHANGED to its members."""

    def __init__(self, config: BrokerConfig, groups: Callable[[], SubscriptionGroupManager | None],
                 spawn: Callable[[Coroutine[Any, Any, Any], str], object]) -> None:
        self.config = config
        self._groups = groups
        self._spawn = spawn
        self.table: dict[str, ConsumerGroupInfo] = {}

    def group_info(self, group: str) -> ConsumerGroupInfo | None:
        return self.table.get(group)

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.table.get(group)
        return info.find_subscription(topic) if info is not None else None

    def groups_of_topic(self, topic: str) -> set[str]:
        return {g for g, info in self.table.items() if topic in info.subscriptions}

    def register(self, group: str, info: ClientChannelInfo, consume_type: str, message_model: str,
                 consume_from_where: str, subs: list[SubscriptionData], notify: bool) -> bool:
        """``ConsumerManager.registerConsumer``."""
        ginfo = self.table.get(group)
        if ginfo is None:
            ginfo = self.table[group] = ConsumerGroupInfo(group)
        r1 = ginfo.update_channel(info, consume_type, message_model, consume_from_where)
        r2 = ginfo.update_subscriptions(subs)
        if (r1 or r2) and notify:
            self.notify(group)
        return r1 or r2

    def unregister(self, group: str, client_id: str, channel: Channel, notify: bool) -> None:
        """``ConsumerManager.unregisterConsumer``."""
        ginfo = self.table.get(group)
        if ginfo is None:
            return
        info = ginfo.channels.get(client_id)
        if info is not None and info.channel is channel:
            del ginfo.channels[client_id]
        if not ginfo.channels:
            self.table.pop(group, None)
            log.info("unregister consumer ok, no any connection, and remove consumer group, %s", group)
        if notify:
            self.notify(group)

    def channel_closed(self, channel: Channel) -> None:
        """``doChannelCloseEvent``: the connection's clients leave every group; the rest are told."""
        for group, ginfo in list(self.table.items()):
            if ginfo.remove_channel(channel):
                if not ginfo.channels:
                    self.table.pop(group, None)
                    log.info("unregister consumer ok, no any connection, and remove consumer group, %s", group)
                self.notify(group)

    def scan_not_active(self, expiry_ms: int) -> None:
        """``scanNotActiveChannel``: clients silent for ``expiry_ms`` are dropped and their connection closed."""
        now = _now_ms()
        for group, ginfo in list(self.table.items()):
            expired = [info for info in ginfo.channels.values() if now - info.last_update_ms > expiry_ms]
            for info in expired:
                log.warning("SCAN: remove expired channel from ConsumerManager consumerTable. channel=%s, "
                            "consumerGroup=%s", info.channel.addr, group)
                del ginfo.channels[info.client_id]
                info.channel.close("consumer heartbeat expired")
            if not ginfo.channels:
                self.table.pop(group, None)
            if expired:
                self.notify(group)

    def notify(self, group: str) -> None:
        """``DefaultConsumerIdsChangeListener`` CHANGE: NOTIFY_CONSUMER_IDS_CHANGED (oneway) to every
        member (``Broker2Client.notifyConsumerIdsChanged``), when the broker and the group allow it."""
        if not self.config.notify_consumer_ids_changed_enable:
            return
        ginfo = self.table.get(group)
        if ginfo is None:
            return
        groups = self._groups()
        sgc = groups.get(group) if groups is not None else None
        if sgc is not None and not sgc.notify_consumer_ids_changed_enable:
            return
        for info in list(ginfo.channels.values()):
            self._spawn(_notify_one(info.channel, group), f"notify-{group}")


async def _notify_one(channel: Channel, group: str) -> None:
    try:
        await channel.invoke_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                            {"consumerGroup": group}))
    except RemotingError as exc:   # the client is gone; its close event unregisters it
        log.info("notifyConsumerIdsChanged to %s failed: %s", channel.addr, exc)


class ProducerManager:
    """Producer groups: group -> {clientId: ClientChannelInfo} (``ProducerManager``)."""

    def __init__(self) -> None:
        self.table: dict[str, dict[str, ClientChannelInfo]] = {}

    def register(self, group: str, info: ClientChannelInfo) -> None:
        members = self.table.setdefault(group, {})
        old = members.get(info.client_id)
        if old is None or old.channel is not info.channel:
            log.info("new producer connected, group: %s channel: %s", group, info.channel.addr)
        members[info.client_id] = info

    def unregister(self, group: str, client_id: str, channel: Channel) -> None:
        members = self.table.get(group)
        if members is None:
            return
        info = members.get(client_id)
        if info is not None and info.channel is channel:
            del members[client_id]
        if not members:
            del self.table[group]

    def channel_closed(self, channel: Channel) -> None:
        for group, members in list(self.table.items()):
            for cid in [c for c, i in members.items() if i.channel is channel]:
                del members[cid]
            if not members:
                del self.table[group]

    def scan_not_active(self, expiry_ms: int) -> None:
        now = _now_ms()
        for group, members in list(self.table.items()):
            for cid, info in list(members.items()):
                if now - info.last_update_ms > expiry_ms:
                    log.warning("SCAN: remove expired channel[%s] from ProducerManager groupChannelTable, "
                                "producer group name: %s", info.channel.addr, group)
                    del members[cid]
                    info.channel.close("producer heartbeat expired")
            if not members:
                del self.table[group]
