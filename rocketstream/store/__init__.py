"""The RocketMQ-4.9-compatible store: commit log, consume queues, recovery, retention.

Public entry point: ``MessageStore.open(root, read_only=...)``. The folders follow RocketMQ's own
decomposition — ``files/`` (mapped files, commit log, consume queue, checkpoint, lock, index),
``write/`` (messages, batch puts, dispatch), ``read/`` (queries, bulk reads), ``maintenance/``
(recovery, retention, check, layout), ``meta/`` (config, topic config, offset tables) — behind the one
``MessageStore`` facade in ``message_store.py``.

The names below load lazily, so ``import rocketstream.store`` loads neither pyarrow nor the store's
modules until one of them is used. ``MESSAGE_SCHEMA`` and its helpers (the schema of ``read_range``'s
batches) live in ``rocketstream.codec.arrow_records``, where records become Arrow for every reader.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "FIELD_NAMES": "rocketstream.codec.arrow_records",
    "MESSAGE_SCHEMA": "rocketstream.codec.arrow_records",
    "project_schema": "rocketstream.codec.arrow_records",
    "spark_ddl": "rocketstream.codec.arrow_records",
    "GetMessageResult": "rocketstream.store.write.messages",
    "GetMessageStatus": "rocketstream.store.write.messages",
    "HostAddress": "rocketstream.codec",
    "Message": "rocketstream.store.write.messages",
    "MessageRecord": "rocketstream.codec",
    "MessageStore": "rocketstream.store.message_store",
    "PutMessageResult": "rocketstream.store.write.messages",
    "PutMessageStatus": "rocketstream.store.write.messages",
    "StoreConfig": "rocketstream.store.meta.config",
    "default_broker_conf": "rocketstream.store.meta.config",
    "default_broker_name": "rocketstream.store.meta.config",
}

__all__ = [
    "FIELD_NAMES",
    "MESSAGE_SCHEMA",
    "project_schema",
    "spark_ddl",
    "GetMessageResult",
    "GetMessageStatus",
    "HostAddress",
    "Message",
    "MessageRecord",
    "MessageStore",
    "PutMessageResult",
    "PutMessageStatus",
    "StoreConfig",
    "default_broker_conf",
    "default_broker_name",
]

if TYPE_CHECKING:
    from rocketstream.codec import HostAddress, MessageRecord
    from rocketstream.codec.arrow_records import FIELD_NAMES, MESSAGE_SCHEMA, project_schema, spark_ddl
    from rocketstream.store.message_store import MessageStore
    from rocketstream.store.meta.config import (
        StoreConfig,
        default_broker_conf,
        default_broker_name,
    )
    from rocketstream.store.write.messages import (
        GetMessageResult,
        GetMessageStatus,
        Message,
        PutMessageResult,
        PutMessageStatus,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rocketstream.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
