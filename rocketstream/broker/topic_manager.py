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

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rocketstream import codec
from rocketstream.broker.config import PERM_INHERIT, PERM_READ, PERM_WRITE, BrokerConfig
from rocketstream.codec import names
from rocketstream.errors import HeaderFieldError, StoreError
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
TOPIC_MAX_LENGTH = names.TOPIC_MAX_LENGTH
# An auto-created topics' window lasts at least this long per topic in the table: writing topics.json costs
# about 0.01 ms of CPU per topic and registering the whole table 0.08 ms (measured at 3,000 topics: save
# 30 ms, the registration body 94 ms, the name server's parse 141 ms), and a window has at most two of
# those (its first topic's and the rest's), so that work stays a small share of the loop's time however
# large the table grows (3,000 topics: a 3 s window)
FLUSH_S_PER_TOPIC = 0.001


def validate_topic(topic: str | None) -> str | None:
    """``TopicValidator.validateTopic`` (codec/names.py: the whole name must match) and the send path's
    ``AUTO_CREATE_TOPIC_KEY_TOPIC`` conflict: None when valid, else the remark the Java broker answers."""
    problem = names.topic_problem(topic)
    if problem is not None:
        return problem
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
    ``on_change()`` is called after a topic is created or changed (the controller re-registers).

    Names and queue counts are checked before anything is kept (codec/names.py; ``maxTopicQueueNums``).
    Announcing: an admin change re-registers the whole table (``on_change``). Topics auto-created by
    sends, send-backs and heartbeats (:meth:`create_in_send`, :meth:`create_in_send_back`) are in the table
    (so in every registration and answer) at once and, with ``on_new_topics``, announced on the next loop
    turn in an incremental registration carrying only them (``registerIncrementBrokerData``: the name
    server keeps the topics a registration leaves out), so a new topic is routable right away and the cost
    does not grow with the table; the periodic registration carries the whole table. A send that created its
    topic announces it at once (:meth:`announce_created`) and answers after the registration, as
    ``createTopicInSendMessageMethod`` registers before the send goes on.

    Durability: an admin change (:meth:`update`, :meth:`create`, :meth:`delete`) is in topics.json before
    the call returns, as ``updateTopicConfig`` persists. The first topic auto-created after a quiet window
    is written at once; the ones that follow within the window (``topicConfigFlushDelayMills``, or
    FLUSH_S_PER_TOPIC times the topics in the table when that is longer: 3 s at 3,000 topics) are written
    together at its end (without ``on_new_topics``, announced then too), and at :meth:`flush` (the
    controller's stop). A crash inside a window loses only those topics' configs; their messages stay in
    the commit log and consume queues, and the next send (or heartbeat) creates the config again from the
    same default."""

    def __init__(self, table: TopicConfigTable, config: BrokerConfig,
                 on_change: Callable[[], object] | None = None,
                 on_new_topics: Callable[[dict[str, Any]], Awaitable[Any] | None] | None = None) -> None:
        self.table = table
        self.config = config
        self.on_change = on_change
        self.on_new_topics = on_new_topics                   # an incremental registration (see the class doc)
        self._increment: dict[str, TopicConfig] = {}         # auto-created, not yet announced
        self._cache: dict[str, TopicConfig] = {}
        self._cache_version: object = None
        self._dirty = False                                   # auto-created topics not yet in topics.json
        self._flush_handle: asyncio.TimerHandle | None = None
        self._unannounced: set[str] = set()                  # illegal names already logged
        self._last_flush_at = -math.inf                       # time.monotonic() of the last window's write

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
    def _version(self) -> object:
        return (id(self.table.table), self.table.data_version.get("counter"), len(self.table.table))

    def _refresh(self) -> None:
        version = self._version()
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
        """``TopicConfigSerializeWrapper`` as registration bodies carry it: the topics with legal names (and
        the ones named after the cluster and the broker, whatever their names)."""
        cfg = self.config
        builtin = {cfg.broker_cluster_name, cfg.broker_name, f"{cfg.broker_cluster_name}_REPLY_TOPIC",
                   cfg.msg_trace_topic_name}
        table = {}
        for name, tc in self.all().items():
            problem = names.registered_topic_problem(name)
            if problem is None or name in builtin:
                table[name] = tc.to_json()
            elif name not in self._unannounced:   # a table written before names were checked
                self._unannounced.add(name)
                log.warning("topic %s is not announced to the name servers: %s (DELETE_TOPIC removes it)",
                            names.quote_name(name), problem)
        return {"dataVersion": self.data_version, "topicConfigTable": table}

    # --- writing ---------------------------------------------------------------------------------
    def check(self, topic: str, read_q: int, write_q: int) -> None:
        """The name (``TopicValidator``) and the queue counts (``maxTopicQueueNums``) of a topic about to be
        kept; HeaderFieldError naming the field otherwise."""
        problem = names.topic_problem(topic)
        if problem is not None:
            raise HeaderFieldError("topic", f"{problem} {names.quote_name(topic) if topic else ''}".rstrip())
        cap = self.config.max_topic_queue_nums
        for field, value in (("readQueueNums", read_q), ("writeQueueNums", write_q)):
            if not 0 <= value <= cap:
                raise HeaderFieldError(field, f"{value} is out of range: a topic has 0..{cap} queues on this broker "
                                              f"(broker.conf maxTopicQueueNums)")

    def update(self, tc: TopicConfig) -> None:
        """``updateTopicConfig``: check, put, bump the data version, persist; announce."""
        self.check(tc.topic_name, tc.read_queue_nums, tc.write_queue_nums)
        was_valid = self._cache_valid()
        self.table.put(tc.topic_name, tc.to_json())   # saves the whole table, the pending auto-created ones too
        self._saved()
        self._keep_cached(tc, was_valid)
        self._announce()

    def create(self, topic: str, read_q: int, write_q: int, perm: int, sys_flag: int = 0) -> TopicConfig:
        tc = TopicConfig(topic, read_q, write_q, perm, topic_sys_flag=sys_flag)
        self.update(tc)
        return tc

    def delete(self, topic: str) -> bool:
        """``deleteTopicConfig``: any name the table holds, a legal one or not (a table written before
        names were checked may hold one)."""
        removed = self.table.remove(topic)
        if removed:
            self._saved()
            self._cache_version = None
            self._announce()
        return removed

    def _auto_create(self, tc: TopicConfig) -> None:
        """Put an auto-created topic: in the table at once, written and announced with the others of its
        window (see the class doc)."""
        self.check(tc.topic_name, tc.read_queue_nums, tc.write_queue_nums)
        was_valid = self._cache_valid()
        self.table.table[tc.topic_name] = tc.to_json()
        dv = self.table.data_version   # TopicConfigTable.put's bump, without its save
        self.table.data_version = {"counter": int(dv.get("counter", 0)) + 1, "timestamp": time.time_ns() // 1_000_000}
        self._keep_cached(tc, was_valid)
        self._dirty = True
        delay = self.config.topic_config_flush_delay_mills / 1000.0
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:   # no loop (a tool, a test): written now
            loop = None
        if loop is None or delay <= 0:
            self.flush()
            return
        if self.on_new_topics is not None:
            # announced on the next loop turn, with the others created in this one: only the new topics
            # (``registerIncrementBrokerData``), so the cost does not grow with the table
            if not self._increment:
                loop.call_soon(self._announce_increment)
            self._increment[tc.topic_name] = tc
        if self._flush_handle is not None:   # the window's write is already due
            return
        # writing the table and registering it cost O(topics): the window grows with the table
        window = max(delay, FLUSH_S_PER_TOPIC * len(self.table.table))
        wait = self._last_flush_at + window - time.monotonic()
        if wait <= 0:   # the first topic after a quiet window: written and announced at once
            self.flush()
        else:           # more in this window: together at its end
            self._flush_handle = loop.call_later(wait, self._flush_due)

    def _announce_increment(self) -> Awaitable[Any] | None:
        increment, self._increment = self._increment, {}
        if increment and self.on_new_topics is not None:
            return self.on_new_topics({"dataVersion": self.data_version,
                                       "topicConfigTable": {name: tc.to_json() for name, tc in increment.items()}})
        return None

    def announce_created(self) -> Awaitable[Any] | None:
        """The topics auto-created and not announced yet, announced now rather than on the next loop turn:
        what ``on_new_topics`` returned (the controller's registration, to await before a send's answer, as
        ``createTopicInSendMessageMethod`` calls ``registerBrokerAll`` before the send goes on), or None
        when none is pending."""
        if not self._increment:
            return None
        return self._announce_increment()

    def _flush_due(self) -> None:
        """The window is over. A write that fails is logged with its error and tried again a window later
        (the topics stay in the table meanwhile); the stop's :meth:`flush` raises it."""
        self._flush_handle = None
        try:
            self.flush()
        except StoreError:
            log.exception("writing auto-created topics to %s failed; trying again", self.table.path)
            delay = max(self.config.topic_config_flush_delay_mills, 100) / 1000.0
            self._flush_handle = asyncio.get_running_loop().call_later(delay, self._flush_due)

    def flush(self) -> None:
        """Write the auto-created topics still pending to topics.json and announce them (once)."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if not self._dirty:
            return
        self.table.save()
        self._saved()
        self._last_flush_at = time.monotonic()
        if self.on_new_topics is None:   # else each was announced on its own (_announce_increment)
            self._announce()

    def _saved(self) -> None:
        self._dirty = False
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None

    def _cache_valid(self) -> bool:
        return self._cache_version is not None and self._cache_version == self._version()

    def _keep_cached(self, tc: TopicConfig, was_valid: bool) -> None:
        """The cache after our own put: one entry changed, when it was current before the put
        (rebuilding it for every created topic made creating n topics cost O(n^2))."""
        if was_valid:
            self._cache[tc.topic_name] = TopicConfig.from_json(tc.topic_name, self.table.table[tc.topic_name])
            self._cache_version = self._version()
        else:
            self._cache_version = None

    def _announce(self) -> None:
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
        self.check(topic, 0, 0)
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
        queue_nums = max(1, min(client_queue_nums, default.write_queue_nums, self.config.max_topic_queue_nums))
        tc = TopicConfig(topic, queue_nums, queue_nums, default.perm & ~PERM_INHERIT, topic_sys_flag=sys_flag)
        log.info("Create new topic by default topic:[%s] config:[%s] producer:[%s]", default_topic, tc, client_addr)
        self._auto_create(tc)
        return tc

    def create_in_send_back(self, topic: str, queue_nums: int, perm: int, sys_flag: int = 0) -> TopicConfig:
        """``createTopicInSendMessageBackMethod``: the topic as it is, else created with these settings
        (retry and dead-letter topics). The name and the queue count are checked (HeaderFieldError)."""
        existing = self.get(topic)
        if existing is not None:
            return existing
        tc = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=sys_flag)
        log.info("Create new topic in send-back: %s", tc)
        self._auto_create(tc)
        return tc
