"""Consumer group settings: RocketMQ 4.9.8's ``SubscriptionGroupManager`` over ``config/subscriptionGroup.json``.

The file is what the Java broker writes (fastjson's pretty print of the manager; TABs shown as spaces)::

    {
        "dataVersion":{
            "counter":1,
            "timestamp":1795671835730
        },
        "subscriptionGroupTable":{
            "SELF_TEST_C_GROUP":{
                "brokerId":0,
                "consumeBroadcastEnable":true,
                ...
                "whichBrokerWhenConsumeSlowly":1
            },
            ...
        }
    }

Bean fields are sorted by name; the groups come in the iteration order of the Java table, a
``ConcurrentHashMap(1024)``: by bin (``spread(String.hashCode()) & (capacity - 1)``), ties in insertion
order. We write the groups in that order too, so a file we load and persist unchanged is byte for byte
the Java broker's. Fields we do not know (a 5.x broker's ``groupRetryPolicy``, ``attributes`` ...) are
kept and written back. Persisting uses the offsets module's file discipline (``.tmp``, previous
content to ``.bak``, rename); a file that does not parse (and no usable ``.bak``) raises
:class:`OffsetFileError` naming it, and nothing is written.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketstream.codec import names
from rocketstream.codec.fastjson import dump_fastjson, parse_fastjson
from rocketstream.errors import HeaderFieldError, OffsetFileError
from rocketstream.store.files.durable import os_errors
from rocketstream.store.meta.offsets import exclusive_lock, load_with_bak, replace_offset_file

__all__ = ["SubscriptionGroupConfig", "SubscriptionGroupManager", "SUBSCRIPTION_GROUP_FILE",
           "SYS_CONSUMER_GROUP_PREFIX", "is_sys_consumer_group"]

log = logging.getLogger(__name__)

SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"
SYS_CONSUMER_GROUP_PREFIX = "CID_RMQ_SYS_"  # MixAll.CID_RMQ_SYS_PREFIX

# SubscriptionGroupManager.init(): (group, consumeBroadcastEnable set explicitly)
_BUILT_IN_GROUPS = (
    "TOOLS_CONSUMER",         # MixAll.TOOLS_CONSUMER_GROUP
    "FILTERSRV_CONSUMER",     # MixAll.FILTERSRV_CONSUMER_GROUP
    "SELF_TEST_C_GROUP",      # MixAll.SELF_TEST_CONSUMER_GROUP
    "CID_ONS-HTTP-PROXY",     # MixAll.ONS_HTTP_PROXY_GROUP
    "CID_ONSAPI_PULL",        # MixAll.CID_ONSAPI_PULL_GROUP
    "CID_ONSAPI_PERMISSION",  # MixAll.CID_ONSAPI_PERMISSION_GROUP
    "CID_ONSAPI_OWNER",       # MixAll.CID_ONSAPI_OWNER_GROUP
)
_TABLE_CAPACITY = 2048  # ConcurrentHashMap(1024): tableSizeFor(1024 + 512 + 1)

# JSON name -> (attribute, type); SubscriptionGroupConfig's fields in 4.9.8
_FIELDS: dict[str, tuple[str, type]] = {
    "brokerId": ("broker_id", int),
    "consumeBroadcastEnable": ("consume_broadcast_enable", bool),
    "consumeEnable": ("consume_enable", bool),
    "consumeFromMinEnable": ("consume_from_min_enable", bool),
    "groupName": ("group_name", str),
    "notifyConsumerIdsChangedEnable": ("notify_consumer_ids_changed_enable", bool),
    "retryMaxTimes": ("retry_max_times", int),
    "retryQueueNums": ("retry_queue_nums", int),
    "whichBrokerWhenConsumeSlowly": ("which_broker_when_consume_slowly", int),
}


def is_sys_consumer_group(group: str) -> bool:
    """``MixAll.isSysConsumerGroup``: groups the broker creates even without autoCreateSubscriptionGroup."""
    return group.startswith(SYS_CONSUMER_GROUP_PREFIX)


@dataclass
class SubscriptionGroupConfig:
    """``SubscriptionGroupConfig`` with 4.9.8's defaults; ``extra`` holds fields of other versions."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0  # MixAll.MASTER_ID
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The bean as fastjson writes it: every field, sorted by name."""
        doc = dict(self.extra)
        doc.update({name: getattr(self, attr) for name, (attr, _) in _FIELDS.items()})
        return {k: doc[k] for k in sorted(doc)}

    @classmethod
    def from_json(cls, doc: object, *, path: object, key: str) -> SubscriptionGroupConfig:
        if not isinstance(doc, dict):
            raise OffsetFileError(f"subscription group {key!r} is not an object", path=path)
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for name, value in doc.items():
            spec = _FIELDS.get(name) if isinstance(name, str) else None
            if spec is None:
                extra[str(name)] = value
                continue
            attr, kind = spec
            if value is None:  # fastjson leaves a null field at its default
                continue
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise OffsetFileError(f"subscription group {key!r}: {name} is not an integer: {value!r}", path=path)
            if kind is not int and not isinstance(value, kind):
                raise OffsetFileError(f"subscription group {key!r}: {name} is not a {kind.__name__}: {value!r}",
                                      path=path)
            values[attr] = value
        values.setdefault("group_name", key)
        return cls(extra=extra, **values)


def _java_string_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def _chm_bin(key: str, capacity: int) -> int:
    h = _java_string_hash(key)
    return ((h ^ (h >> 16)) & 0x7FFFFFFF) & (capacity - 1)


def java_table_order(keys: list[str]) -> list[str]:
    """Iteration order of a ``ConcurrentHashMap(1024)`` filled with ``keys`` in this order (no resize
    below 1536 entries; beyond that, bins of the doubled table, as after a resize, ties as inserted)."""
    capacity = _TABLE_CAPACITY
    while len(keys) > capacity * 3 // 4:
        capacity *= 2
    return sorted(keys, key=lambda k: _chm_bin(k, capacity))  # stable: ties keep insertion order


class SubscriptionGroupManager:
    """Consumer group settings of one broker, persisted in ``<store_root>/config/subscriptionGroup.json``."""

    def __init__(self, store_root: str | Path) -> None:
        self.config_dir = Path(store_root) / "config"
        self.path = self.config_dir / SUBSCRIPTION_GROUP_FILE
        self.lock_path = self.config_dir / (SUBSCRIPTION_GROUP_FILE + ".lock")
        self._lock = threading.RLock()
        self._table: dict[str, SubscriptionGroupConfig] = {}  # insertion order, as the Java table saw it
        self._extra: dict[str, Any] = {}  # unknown top-level fields
        self.data_version: dict[str, Any] = {"counter": 0, "timestamp": _now_ms()}  # 5.x: + stateVersion
        for group in _BUILT_IN_GROUPS:
            self._table[group] = SubscriptionGroupConfig(group)

    # ------------------------------------------------------------------------------------------- load

    def load(self) -> None:
        """Read the file (else its ``.bak``, as ``ConfigManager.load``); groups in it are added to (or
        replace) the built-in ones, and its ``dataVersion`` is taken. A missing file changes nothing."""
        with self._lock:
            doc, _ = load_with_bak(self.path, self._parse)
            if doc is None:
                return
            table, version, extra = doc
            self._table.update(table)
            if version is not None:
                self.data_version = version
            self._extra = extra

    def _parse(self, text: bytes, *, path: object) -> tuple[dict[str, SubscriptionGroupConfig],
                                                             dict[str, Any] | None, dict[str, Any]]:
        doc = parse_fastjson(text, path=path)
        if not isinstance(doc, dict):
            raise OffsetFileError("the document is not an object", path=path)
        raw = doc.get("subscriptionGroupTable", {})
        if not isinstance(raw, dict):
            raise OffsetFileError("'subscriptionGroupTable' is not an object", path=path)
        table = {}
        for key, cfg in raw.items():
            if not isinstance(key, str):
                raise OffsetFileError(f"subscription group key {key!r} is not a string", path=path)
            table[key] = SubscriptionGroupConfig.from_json(cfg, path=path, key=key)
        version = doc.get("dataVersion")
        checked_version: dict[str, Any] | None = None
        if version is not None:
            if not isinstance(version, dict) or not all(
                    isinstance(version.get(k), int) and not isinstance(version.get(k), bool)
                    for k in ("counter", "timestamp")):
                raise OffsetFileError(f"'dataVersion' is not {{counter, timestamp}}: {version!r}", path=path)
            checked_version = dict(version)
        extra = {str(k): v for k, v in doc.items() if k not in ("subscriptionGroupTable", "dataVersion")}
        return table, checked_version, extra

    # -------------------------------------------------------------------------------------- accessors

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's settings, None when the broker has none (no auto-create: :meth:`find_or_create`)."""
        with self._lock:
            return self._table.get(group)

    def find_or_create(self, group: str, auto_create: bool) -> SubscriptionGroupConfig | None:
        """``findSubscriptionGroupConfig``: the group's settings; an unknown group is created with the
        defaults and persisted when ``auto_create`` (the broker's autoCreateSubscriptionGroup) or when it
        is a system group (``CID_RMQ_SYS_``), else None. A group to be created under an illegal name
        (codec/names.py) raises HeaderFieldError naming the field ``group``."""
        with self._lock:
            cfg = self._table.get(group)
            if cfg is not None or not (auto_create or is_sys_consumer_group(group)):
                return cfg
            _check_name(group)
            cfg = SubscriptionGroupConfig(group)
            self._table[group] = cfg
            log.info("auto create a subscription group, %s", cfg)
            self._next_version()
            self.persist()
            return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        """``updateSubscriptionGroupConfig``: create or replace, next data version, persist."""
        _check_name(cfg.group_name)
        with self._lock:
            old = self._table.get(cfg.group_name)
            self._table[cfg.group_name] = cfg
            log.info("%s subscription group %s", "update" if old is not None else "create new", cfg)
            self._next_version()
            self.persist()

    def delete(self, group: str) -> bool:
        """``deleteSubscriptionGroupConfig``; True when the group existed (then persisted)."""
        with self._lock:
            if self._table.pop(group, None) is None:
                log.warning("delete subscription group failed, subscription groupName: %s not exist", group)
                return False
            self._next_version()
            self.persist()
            return True

    def disable_consume(self, group: str) -> None:
        """``disableConsume``: consumeEnable=false (next data version; not persisted, as in Java)."""
        with self._lock:
            cfg = self._table.get(group)
            if cfg is not None:
                cfg.consume_enable = False
                self._next_version()

    def all(self) -> dict[str, SubscriptionGroupConfig]:
        """group -> settings (a shallow copy of the table, in the Java table's order)."""
        with self._lock:
            return {g: self._table[g] for g in java_table_order(list(self._table))}

    # ----------------------------------------------------------------------------------------- persist

    def encode(self) -> str:
        """The file's text, as the Java broker writes it."""
        with self._lock:
            doc: dict[str, Any] = dict(self._extra)
            doc["dataVersion"] = {k: self.data_version[k] for k in sorted(self.data_version)}
            doc["subscriptionGroupTable"] = {g: c.to_json() for g, c in self.all().items()}
            return dump_fastjson({k: doc[k] for k in sorted(doc)})

    def persist(self) -> None:
        """Write the file atomically (``.tmp``, previous content to ``.bak``, rename)."""
        with self._lock:
            text = self.encode()
            with os_errors("cannot create config directory", self.config_dir):
                self.config_dir.mkdir(parents=True, exist_ok=True)
            with exclusive_lock(self.lock_path):
                previous: bytes | None = None
                with os_errors("cannot read subscription group file", self.path, missing_ok=True):
                    previous = self.path.read_bytes()
                if previous is not None:
                    try:
                        self._parse(previous, path=self.path)
                    except OffsetFileError:
                        previous = None  # a corrupt file never overwrites a good backup
                replace_offset_file(self.path, text, previous)

    def _next_version(self) -> None:
        """``DataVersion.nextVersion``: counter + 1, timestamp now."""
        self.data_version = {**self.data_version, "counter": self.data_version["counter"] + 1,
                             "timestamp": _now_ms()}


def _check_name(group: str) -> None:
    """A group is kept only under a legal name (``Validators.checkGroup``, codec/names.py): the file, the
    registrations and every answer that lists groups carry it."""
    problem = names.group_problem(group)
    if problem is not None:
        raise HeaderFieldError("group", problem)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
