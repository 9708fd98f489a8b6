"""``TopicConfigManager``: the broker's topic table (perm, read/write queue counts, filter type, sys flag,
order), kept in the store's ``config/topics.json`` (RocketMQ's ``TopicConfigSerializeWrapper`` layout;
the store's own TopicConfigTable reads and writes that file, this class gives it the broker's rules).

At start (``TopicConfigManager``'s constructor in RocketMQ): ``SELF_TEST_TOPIC``, ``TBW102`` (perm 7,
``defaultTopicQueueNums`` queues) when ``autoCreateTopicEnable``, the cluster-name and broker-name topics,
``OFFSET_MOVED_EVENT``, ``SCHEDULE_TOPIC_XXXX`` (one queue per delay level), the trace topic when
``traceTopicEnable``, and ``<cluster>_REPLY_TOPIC``. Topics are created on send from ``TBW102``
(``createTopicInSendMessageMethod``) and for retry / dead-letter queues
(``createTopicInSendMessageBackMethod``); every new topic is announced to the name servers at once
through ``on_change`` (``registerBrokerAll``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rocketstream import codec
from rocketstream.broker.config import PERM_INHERIT, PERM_READ, PERM_WRITE, BrokerConfig
from rocketstream.store.meta.topic_config import TopicConfigTable

__all__ = ["TopicConfig", "TopicConfigManager", "AUTO_CREATE_TOPIC", "RETRY_GROUP_TOPIC_PREFIX",
           "DLQ_GROUP_TOPIC_PREFIX", "SYSTEM_TOPICS", "NOT_ALLOWED_SEND_TOPICS", "validate_topic"]

log = logging.getLogger("rocketstream.broker")

AUTO_CREATE_TOPIC = "TBW102"                  # TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"          # MixAll.RETRY_GROUP_TOPIC_PREFIX
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"              # MixAll.DLQ_GROUP_TOPIC_PREFIX
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
# TopicValidator.SYSTEM_TOPIC_SET (plus the cluster / broker-name / trace topics added at start)
SYSTEM_TOPICS = frozenset({AUTO_CREATE_TOPIC, codec.SCHEDULE_TOPIC, BENCHMARK_TOPIC, TRANS_HALF_TOPIC,
                           TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT})
# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET
NOT_ALLOWED_SEND_TOPICS = frozenset({codec.SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC,
                                     TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT})
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH = 127


def validate_topic(topic: str | None) -> str | None:
    """``TopicValidator.validateTopic``: None when valid, else the remark the Java broker answers."""
    if not topic or not topic.strip():
        return "The specified topic is blank."
    if not _TOPIC_RE.match(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > TOPIC_MAX_LENGTH:
        return "The specified topic is longer than topic max length."
    if topic == AUTO_CREATE_TOPIC:
        return "The specified topic is conflict with AUTO_CREATE_TOPIC_KEY_TOPIC."
    return None


@dataclass
class TopicConfig:
    """``org.apache.rocketmq.common.TopicConfig``."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"order": self.order, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicFilterType": self.topic_filter_type, "topicName": self.topic_name,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_json(cls, name: str, doc: dict[str, Any]) -> TopicConfig:
        def num(key: str, default: int) -> int:
            value = doc.get(key, default)
            return default if value is None else int(value)

        return cls(topic_name=str(doc.get("topicName") or name), read_queue_nums=num("readQueueNums", 16),
                   write_queue_nums=num("writeQueueNums", 16), perm=num("perm", PERM_READ | PERM_WRITE),
                   topic_filter_type=str(doc.get("topicFilterType") or "SINGLE_TAG"),
                   topic_sys_flag=num("topicSysFlag", 0), order=bool(doc.get("order", False)))

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


class TopicConfigManager:
    """The broker's topics over ``table`` (the store's TopicConfigTable, already loaded).
    ``on_change()`` is called after a topic is created or changed (the controller re-registers)."""

    def __init__(self, table: TopicConfigTable, config: BrokerConfig,
                 on_change: Callable[[], None] | None = None) -> None:
        self.table = table
        self.config = config
        self.on_change = on_change
        self._cache: dict[str, TopicConfig] = {}
        self._cache_version: object = None

    # --- start-up --------------------------------------------------------------------------------
    def init_system_topics(self) -> None:
        """The topics ``TopicConfigManager``'s constructor puts in the table (those missing only)."""
        cfg = self.config
        cluster_perm = PERM_INHERIT | ((PERM_READ | PERM_WRITE) if cfg.cluster_topic_enable else 0)
        broker_perm = PERM_INHERIT | ((PERM_READ | PERM_WRITE) if cfg.broker_topic_enable else 0)
        wanted = [TopicConfig(SELF_TEST_TOPIC, 1, 1)]
        if cfg.auto_create_topic_enable:
            n = cfg.default_topic_queue_nums
            wanted.append(TopicConfig(AUTO_CREATE_TOPIC, n, n, PERM_INHERIT | PERM_READ | PERM_WRITE))
        wanted += [TopicConfig(cfg.broker_cluster_name, 16, 16, cluster_perm),
                   TopicConfig(cfg.broker_name, 1, 1, broker_perm),
                   TopicConfig(OFFSET_MOVED_EVENT, 1, 1),
                   TopicConfig(codec.SCHEDULE_TOPIC, len(codec.parse_delay_levels(cfg.message_delay_level)),
                               len(codec.parse_delay_levels(cfg.message_delay_level)))]
        if cfg.trace_topic_enable:
            wanted.append(TopicConfig(cfg.msg_trace_topic_name, 1, 1))
        wanted.append(TopicConfig(f"{cfg.broker_cluster_name}_REPLY_TOPIC", 1, 1))
        for tc in wanted:
            if tc.topic_name not in self.table.table:
                self.table.put(tc.topic_name, tc.to_json())

    # --- reading ---------------------------------------------------------------------------------
    def _refresh(self) -> None:
        version = (id(self.table.table), self.table.data_version.get("counter"), len(self.table.table))
        if version != self._cache_version:
            self._cache = {name: TopicConfig.from_json(name, doc) for name, doc in self.table.table.items()}
            self._cache_version = version

    def get(self, topic: str) -> TopicConfig | None:
        """``selectTopicConfig``."""
        self._refresh()
        return self._cache.get(topic)

    def all(self) -> dict[str, TopicConfig]:
        self._refresh()
        return dict(self._cache)

    @property
    def data_version(self) -> dict[str, int]:
        return {"counter": int(self.table.data_version.get("counter", 0)),
                "timestamp": int(self.table.data_version.get("timestamp", 0))}

    def is_order_topic(self, topic: str) -> bool:
        tc = self.get(topic)
        return tc is not None and tc.order

    def wrapper_json(self) -> dict[str, Any]:
        """``TopicConfigSerializeWrapper`` as registration bodies and GET_ALL_TOPIC_CONFIG carry it."""
        return {"dataVersion": self.data_version,
                "topicConfigTable": {name: tc.to_json() for name, tc in self.all().items()}}

    # --- writing ---------------------------------------------------------------------------------
    def update(self, tc: TopicConfig) -> None:
        """``updateTopicConfig``: put, bump the data version, persist; announce."""
        self.table.put(tc.topic_name, tc.to_json())
        self._changed()

    def create(self, topic: str, read_q: int, write_q: int, perm: int, sys_flag: int = 0) -> TopicConfig:
        tc = TopicConfig(topic, read_q, write_q, perm, topic_sys_flag=sys_flag)
        self.update(tc)
        return tc

    def delete(self, topic: str) -> bool:
        removed = self.table.remove(topic)
        if removed:
            self._changed()
        return removed

    def _changed(self) -> None:
        self._cache_version = None
        if self.on_change is not None:
            self.on_change()

    def create_in_send(self, topic: str, default_topic: str, client_addr: str, client_queue_nums: int,
                       sys_flag: int = 0) -> TopicConfig | None:
        """``createTopicInSendMessageMethod``: a topic inherits from ``default_topic`` (normally TBW102)
        when that topic's perm has INHERIT: min(client's queue count, default's write queues) queues,
        the default's perm without INHERIT. None when the default topic cannot be inherited."""
        existing = self.get(topic)
        if existing is not None:
            return existing
        default = self.get(default_topic)
        if default is None:
            log.warning("Create new topic failed, because the default topic[%s] not exist. producer:[%s]",
                        default_topic, client_addr)
            return None
        if default_topic == AUTO_CREATE_TOPIC and not self.config.auto_create_topic_enable:
            default = TopicConfig(default.topic_name, default.read_queue_nums, default.write_queue_nums,
                                  PERM_READ | PERM_WRITE)
        if not default.perm & PERM_INHERIT:
            log.warning("Create new topic failed, because the default topic[%s] has no perm [%d] producer:[%s]",
                        default_topic, default.perm, client_addr)
            return None
        queue_nums = max(1, min(client_queue_nums, default.write_queue_nums))
        tc = TopicConfig(topic, queue_nums, queue_nums, default.perm & ~PERM_INHERIT, topic_sys_flag=sys_flag)
        log.info("Create new topic by default topic:[%s] config:[%s] producer:[%s]", default_topic, tc, client_addr)
        self.update(tc)
        return tc

    def create_in_send_back(self, topic: str, queue_nums: int, perm: int, sys_flag: int = 0) -> TopicConfig:
        """``createTopicInSendMessageBackMethod``: the topic as it is, else created with these settings
        (retry and dead-letter topics)."""
        existing = self.get(topic)
        if existing is not None:
            return existing
        return self.create(topic, queue_nums, queue_nums, perm, sys_flag)
