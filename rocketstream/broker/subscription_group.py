"""``SubscriptionGroupManager``: consumer-group settings (``config/subscriptionGroup.json``).

MINIMAL VERSION (core): groups live in memory, auto-created with RocketMQ's defaults, written to
``config/subscriptionGroup.json`` on ``persist()`` in RocketMQ's layout. The "offsets" helper writes
the real one (same interface) and it replaces this file at merge.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocketstream.codec.fastjson import dump_fastjson, parse_fastjson
from rocketstream.fsutil import write_atomic

__all__ = ["SubscriptionGroupConfig", "SubscriptionGroupManager"]


@dataclass
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"brokerId": self.broker_id, "consumeBroadcastEnable": self.consume_broadcast_enable,
                "consumeEnable": self.consume_enable, "consumeFromMinEnable": self.consume_from_min_enable,
                "groupName": self.group_name, "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
                "retryMaxTimes": self.retry_max_times, "retryQueueNums": self.retry_queue_nums,
                "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly}


class SubscriptionGroupManager:
    def __init__(self, store_root: Path) -> None:
        self.path = Path(store_root) / "config" / "subscriptionGroup.json"
        self._table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = {"counter": 0, "timestamp": 0}

    def load(self) -> None:
        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            return
        doc = parse_fastjson(text, path=self.path)
        table = doc.get("subscriptionGroupTable", {}) if isinstance(doc, dict) else {}
        for name, entry in (table or {}).items():
            if not isinstance(entry, dict):
                continue
            self._table[str(name)] = SubscriptionGroupConfig(
                group_name=str(entry.get("groupName", name)),
                consume_enable=bool(entry.get("consumeEnable", True)),
                consume_from_min_enable=bool(entry.get("consumeFromMinEnable", True)),
                consume_broadcast_enable=bool(entry.get("consumeBroadcastEnable", True)),
                retry_queue_nums=int(entry.get("retryQueueNums", 1)),
                retry_max_times=int(entry.get("retryMaxTimes", 16)),
                broker_id=int(entry.get("brokerId", 0)),
                which_broker_when_consume_slowly=int(entry.get("whichBrokerWhenConsumeSlowly", 1)),
                notify_consumer_ids_changed_enable=bool(entry.get("notifyConsumerIdsChangedEnable", True)))

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self._table.get(group)

    def find_or_create(self, group: str, auto_create: bool) -> SubscriptionGroupConfig | None:
        cfg = self._table.get(group)
        if cfg is None and auto_create:
            cfg = SubscriptionGroupConfig(group)
            self.update(cfg)
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        self._table[cfg.group_name] = cfg
        self.data_version = {"counter": self.data_version["counter"] + 1, "timestamp": time.time_ns() // 1_000_000}

    def delete(self, group: str) -> None:
        if self._table.pop(group, None) is not None:
            self.data_version = {"counter": self.data_version["counter"] + 1,
                                 "timestamp": time.time_ns() // 1_000_000}

    def all(self) -> dict[str, SubscriptionGroupConfig]:
        return dict(self._table)

    def persist(self) -> None:
        doc = {"dataVersion": self.data_version,
               "subscriptionGroupTable": {name: cfg.to_json() for name, cfg in sorted(self._table.items())}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, dump_fastjson(doc).encode("utf-8"))
