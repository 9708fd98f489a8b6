"""The consumers' settings: RocketMQ's ``ClientConfig`` / ``DefaultMQPushConsumer`` / ``DefaultLitePullConsumer``
fields (4.9.8) in snake_case, with RocketMQ's defaults, each checked once in ``__post_init__``.

* :class:`ClientConfig`: what every client of a cluster needs (``ClientConfig``: ``namesrvAddr``,
  ``instanceName``). The keywords of a secured cluster (``credentials``, ``tls``, ``namespace``, DESIGN.md
  "Names the outside world sees") belong here, so that both consumers take them without further change.
* :class:`ConsumerConfig`: what both consumers share (message model, where to start, allocation, pull size and
  per-queue flow control, the local offset directory, the long-polling hold).
* :class:`PushConsumerConfig` and :class:`LitePullConsumerConfig`: the rest of each consumer's fields.

A consumer takes one of these (``PushConsumer(group, PushConsumerConfig(...))``) or the same names as keywords
(``PushConsumer(group, namesrv=..., consume_thread_max=8)``); see :meth:`ClientConfig.from_options`. A bad value
raises OptionError naming the field.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from rocketstream.client.allocate import STRATEGIES
from rocketstream.client.credentials import Credentials
from rocketstream.client.namespace import check_namespace
from rocketstream.client.process_queue import REBALANCE_LOCK_INTERVAL_S, REBALANCE_LOCK_MAX_LIVE_TIME_S
from rocketstream.client.pull_service import BROKER_SUSPEND_MAX_TIME_MS, PULL_TIME_DELAY_WHEN_EXCEPTION_S
from rocketstream.client.queue_change import TOPIC_METADATA_CHECK_INTERVAL_S
from rocketstream.client.rebalance import (
    BROADCASTING,
    CLUSTERING,
    CONSUME_FROM_LAST_OFFSET,
    CONSUME_FROM_TIMESTAMP,
    CONSUME_FROM_WHERE,
    parse_consume_timestamp,
)
from rocketstream.client.tls import TlsConfig, tls_config
from rocketstream.errors import OptionError

__all__ = [
    "ClientConfig",
    "ConsumerConfig",
    "PushConsumerConfig",
    "LitePullConsumerConfig",
    "UNLOCK_DELAY_TIME_S",
    "AUTO_COMMIT_INTERVAL_S",
    "PULL_THRESHOLD_FOR_ALL",
    "LITE_PULL_BATCH_SIZE",
    "POLL_TIMEOUT_S",
    "LITE_BROKER_SUSPEND_MAX_TIME_MS",
    "CONSUME_TIMESTAMP_DEFAULT_AGO_S",
    "CONSUME_TIMEOUT_MINUTES",
]

UNLOCK_DELAY_TIME_S = 20.0            # RebalancePushImpl.UNLOCK_DELAY_TIME_MILLS (rocketmq.client.unlockDelayTimeMills)
AUTO_COMMIT_INTERVAL_S = 5.0          # DefaultLitePullConsumer.autoCommitIntervalMillis
PULL_THRESHOLD_FOR_ALL = 10_000       # DefaultLitePullConsumer.pullThresholdForAll (messages cached for poll)
LITE_PULL_BATCH_SIZE = 10             # DefaultLitePullConsumer.pullBatchSize
POLL_TIMEOUT_S = 5.0                  # DefaultLitePullConsumer.pollTimeoutMillis
LITE_BROKER_SUSPEND_MAX_TIME_MS = 20_000   # DefaultLitePullConsumer.brokerSuspendMaxTimeMillis
CONSUME_TIMESTAMP_DEFAULT_AGO_S = 30 * 60  # consumeTimestamp's default: half an hour before the consumer is made
CONSUME_TIMEOUT_MINUTES = 15.0        # DefaultMQPushConsumer.consumeTimeout (cleanExpireMsg's period too)

C = TypeVar("C", bound="ClientConfig")


def _check_int(name: str, value: object, lo: int, hi: int | None = None, *, minus_one: bool = False) -> None:
    if minus_one and value == -1 and not isinstance(value, bool):
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        bounds = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise OptionError(name, f"must be {'-1 or ' if minus_one else ''}an int {bounds}", value)


def _check_seconds(name: str, value: object, *, positive: bool = False, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (positive and value == 0):
        raise OptionError(name, f"must be a number {'> 0' if positive else '>= 0'}{' or None' if optional else ''}",
                          value)


@dataclass(kw_only=True)
class ClientConfig:
    """``ClientConfig``: ``namesrv`` is ``namesrvAddr`` (``host:port;host:port``); clients of one
    ``instance_name`` in a process share one client instance (``MQClientInstance``, one client id).
    ``credentials`` signs every request for a cluster with ACL on (``AclClientRPCHook``); its repr hides
    the secret key and token. ``namespace`` (``ClientConfig.namespace``): the consumer's group and topics are
    ``namespace%name`` on the broker (client/namespace.py); messages and queues handed back show the names
    without it. ``tls`` (a :class:`~rocketstream.client.tls.TlsConfig` or True) makes every
    connection TLS; True is kept as ``TlsConfig()``."""

    namesrv: str
    instance_name: str = "DEFAULT"
    credentials: Credentials | None = None
    namespace: str | None = None
    tls: TlsConfig | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.namesrv, str) or not self.namesrv.strip(";, "):
            raise OptionError("namesrv", "must be 'host:port' or 'host:port;host:port'", self.namesrv)
        if not isinstance(self.instance_name, str) or not self.instance_name:
            raise OptionError("instance_name", "must be a non-empty string", self.instance_name)
        if self.credentials is not None and not isinstance(self.credentials, Credentials):
            raise OptionError("credentials", "must be a rocketstream.client.Credentials or None, not "
                              + type(self.credentials).__name__)
        self.namespace = check_namespace(self.namespace)
        self.tls = tls_config(self.tls)

    @classmethod
    def field_names(cls) -> list[str]:
        """The names a consumer takes as keywords, in declaration order."""
        return [f.name for f in dataclasses.fields(cls) if f.init]

    @classmethod
    def from_options(cls: type[C], config: C | None, options: Mapping[str, Any]) -> C:
        """The consumer's own copy: ``config`` (or the defaults) with ``options`` (field names as keywords)
        replacing fields; an unknown name raises OptionError listing the valid ones."""
        names = cls.field_names()
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise OptionError(unknown[0], f"is not a {cls.__name__} field; valid: {', '.join(names)}",
                              options[unknown[0]])
        if config is None:
            return cls(**options)
        if not isinstance(config, cls):
            raise OptionError("config", f"must be a {cls.__name__}", config)
        return dataclasses.replace(config, **options)


@dataclass(kw_only=True)
class ConsumerConfig(ClientConfig):
    """What both consumers share (``DefaultMQPushConsumer`` / ``DefaultLitePullConsumer`` fields).

    ``consume_timestamp`` (``consumeTimestamp``, for CONSUME_FROM_TIMESTAMP): ms since the epoch, a datetime or
    ``yyyyMMddHHmmss``; unset, half an hour before the config is made. ``allocate_strategy``: one of
    :data:`rocketstream.client.allocate.STRATEGIES` (``MACHINE_ROOM_NEARBY-<strategy>`` too), ``allocate_args``
    its keyword arguments. ``pull_threshold_size_for_queue`` is in MiB as in RocketMQ. ``offset_store_dir``: the
    BROADCASTING offsets directory (``rocketmq.client.localOffsetStoreDir``). ``rebalance_interval_s`` lowers the
    shared client instance's rebalance period (``rocketmq.client.rebalance.waitInterval``).
    ``broker_suspend_max_time_ms``: how long the broker holds a pull that finds nothing (long polling)."""

    # field: (lo, hi), hi None for unbounded; the push consumer's are DefaultMQPushConsumerImpl.checkConfig's
    INT_RANGES: ClassVar[dict[str, tuple[int, int | None]]] = {
        "pull_batch_size": (1, None), "pull_threshold_for_queue": (1, None),
        "pull_threshold_size_for_queue": (1, None), "broker_suspend_max_time_ms": (0, None)}

    message_model: str = CLUSTERING
    consume_from_where: str = CONSUME_FROM_LAST_OFFSET
    consume_timestamp: int | str | datetime | None = None
    allocate_strategy: str = "AVG"
    allocate_args: dict[str, Any] | None = None
    pull_batch_size: int = 32
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = 100
    offset_store_dir: str | Path | None = None
    rebalance_interval_s: float | None = None
    broker_suspend_max_time_ms: int = BROKER_SUSPEND_MAX_TIME_MS
    consume_timestamp_ms: int | None = field(init=False, default=None)
    """``consume_timestamp`` in ms since the epoch (None unless given or CONSUME_FROM_TIMESTAMP)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.message_model not in (CLUSTERING, BROADCASTING):
            raise OptionError("message_model", f"must be {CLUSTERING} or {BROADCASTING}", self.message_model)
        if self.consume_from_where not in CONSUME_FROM_WHERE:
            raise OptionError("consume_from_where", f"must be one of {', '.join(CONSUME_FROM_WHERE)}",
                              self.consume_from_where)
        strategy = self.allocate_strategy
        if isinstance(strategy, str) and strategy.startswith("MACHINE_ROOM_NEARBY-"):
            strategy = "MACHINE_ROOM_NEARBY"
        if strategy not in STRATEGIES:
            raise OptionError("allocate_strategy", f"must be one of {', '.join(STRATEGIES)}", self.allocate_strategy)
        if self.allocate_args is not None and not isinstance(self.allocate_args, dict):
            raise OptionError("allocate_args", "must be a dict of the strategy's keyword arguments",
                              self.allocate_args)
        for name, (lo, hi) in self.INT_RANGES.items():
            _check_int(name, getattr(self, name), lo, hi)
        _check_seconds("rebalance_interval_s", self.rebalance_interval_s, positive=True, optional=True)
        ts = self.consume_timestamp
        self.consume_timestamp_ms = parse_consume_timestamp(ts) if ts is not None else None
        if self.consume_from_where == CONSUME_FROM_TIMESTAMP and self.consume_timestamp_ms is None:
            self.consume_timestamp_ms = int((time.time() - CONSUME_TIMESTAMP_DEFAULT_AGO_S) * 1000)


@dataclass(kw_only=True)
class PushConsumerConfig(ConsumerConfig):
    """``DefaultMQPushConsumer``'s fields. ``max_reconsume_times`` -1 means 16 (concurrent) or unlimited
    (orderly). ``pull_threshold_for_topic`` / ``pull_threshold_size_for_topic`` (-1: unset) override the per-queue
    thresholds, divided among the queues assigned (MiB for the size). ``consume_timeout_minutes``
    (``consumeTimeout``): every that many minutes, messages whose listener call started longer ago go back to the
    broker. ``lock_interval_s`` / ``lock_max_live_time_s`` / ``unlock_delay_s``: orderly CLUSTERING's broker
    locks (``rocketmq.client.rebalance.lockInterval``, ``lockMaxLiveTime``, ``unlockDelayTimeMills``).
    ``pull_delay_on_exception_s``: the re-pull delay after a failed pull (``pullTimeDelayMillsWhenException``).
    ``await_termination_s``: how long ``shutdown`` waits for running listener calls
    (``awaitTerminationMillisWhenShutdown``)."""

    INT_RANGES: ClassVar[dict[str, tuple[int, int | None]]] = {
        # DefaultMQPushConsumerImpl.checkConfig's ranges
        "consume_thread_min": (1, 1000), "consume_thread_max": (1, 1000), "pull_batch_size": (1, 1024),
        "consume_message_batch_max_size": (1, 1024), "pull_threshold_for_queue": (1, 65535),
        "pull_threshold_size_for_queue": (1, 1024), "consume_concurrently_max_span": (1, 65535),
        "pull_interval_ms": (0, 65535),
        # not checked by RocketMQ: a negative time is meaningless
        "suspend_current_queue_time_millis": (0, None), "broker_suspend_max_time_ms": (0, None)}

    consume_thread_min: int = 20
    consume_thread_max: int = 20
    consume_message_batch_max_size: int = 1
    pull_threshold_for_topic: int = -1
    pull_threshold_size_for_topic: int = -1
    consume_concurrently_max_span: int = 2000
    max_reconsume_times: int = -1
    suspend_current_queue_time_millis: int = 1000
    pull_interval_ms: int = 0
    consume_timeout_minutes: float = CONSUME_TIMEOUT_MINUTES
    lock_interval_s: float = REBALANCE_LOCK_INTERVAL_S
    lock_max_live_time_s: float = REBALANCE_LOCK_MAX_LIVE_TIME_S
    unlock_delay_s: float = UNLOCK_DELAY_TIME_S
    pull_delay_on_exception_s: float = PULL_TIME_DELAY_WHEN_EXCEPTION_S
    await_termination_s: float = 5.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.consume_thread_min > self.consume_thread_max:
            raise OptionError("consume_thread_min", "must not be larger than consume_thread_max",
                              self.consume_thread_min)
        _check_int("pull_threshold_for_topic", self.pull_threshold_for_topic, 1, 6553500, minus_one=True)
        _check_int("pull_threshold_size_for_topic", self.pull_threshold_size_for_topic, 1, 102400, minus_one=True)
        _check_int("max_reconsume_times", self.max_reconsume_times, 0, minus_one=True)
        _check_seconds("consume_timeout_minutes", self.consume_timeout_minutes, positive=True)
        self.consume_timeout_minutes = float(self.consume_timeout_minutes)
        _check_seconds("lock_interval_s", self.lock_interval_s, positive=True)
        _check_seconds("lock_max_live_time_s", self.lock_max_live_time_s, positive=True)
        for name in ("unlock_delay_s", "pull_delay_on_exception_s", "await_termination_s"):
            _check_seconds(name, getattr(self, name))

    def effective_max_reconsume_times(self, orderly: bool) -> int:
        """``getMaxReconsumeTimes``: -1 means 16 (concurrent) or unlimited (orderly)."""
        if self.max_reconsume_times == -1:
            return 2**31 - 1 if orderly else 16
        return self.max_reconsume_times


@dataclass(kw_only=True)
class LitePullConsumerConfig(ConsumerConfig):
    """``DefaultLitePullConsumer``'s fields. ``pull_threshold_for_all``: messages cached for ``poll`` over all
    queues; ``consume_max_span`` (``consumeMaxSpan``): the offset span cached per queue. ``auto_commit`` stores
    consumed offsets every ``auto_commit_interval_s`` (checked on poll). ``poll_timeout_s``: ``poll``'s default
    wait. ``topic_metadata_check_interval_s``: how often the queues of topics with a
    TopicMessageQueueChangeListener are compared (``topicMetadataCheckIntervalMillis``)."""

    INT_RANGES: ClassVar[dict[str, tuple[int, int | None]]] = {
        **ConsumerConfig.INT_RANGES, "pull_threshold_for_all": (1, None), "consume_max_span": (1, None)}

    pull_batch_size: int = LITE_PULL_BATCH_SIZE
    broker_suspend_max_time_ms: int = LITE_BROKER_SUSPEND_MAX_TIME_MS
    pull_threshold_for_all: int = PULL_THRESHOLD_FOR_ALL
    consume_max_span: int = 2000
    auto_commit: bool = True
    auto_commit_interval_s: float = AUTO_COMMIT_INTERVAL_S
    poll_timeout_s: float = POLL_TIMEOUT_S
    topic_metadata_check_interval_s: float = TOPIC_METADATA_CHECK_INTERVAL_S

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.auto_commit, bool):
            raise OptionError("auto_commit", "must be True or False", self.auto_commit)
        _check_seconds("auto_commit_interval_s", self.auto_commit_interval_s)
        _check_seconds("poll_timeout_s", self.poll_timeout_s)
        _check_seconds("topic_metadata_check_interval_s", self.topic_metadata_check_interval_s, positive=True)
        self.topic_metadata_check_interval_s = float(self.topic_metadata_check_interval_s)
