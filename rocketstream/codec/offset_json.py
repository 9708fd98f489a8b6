"""The two consumer offset documents' shared shape, and the client's ``offsets.json`` format.

Both ``config/consumerOffset.json`` (broker) and ``offsets.json`` (a BROADCASTING client's
``LocalFileOffsetStore``) are written by fastjson's pretty printer (spec section 7, dialect in
:mod:`rocketstream.codec.fastjson`) as ``{"offsetTable": {...}}``. This module holds what both sides of the
layering need: the store (the broker's file, :mod:`rocketstream.store.meta.offsets`) and the client (the local
offset store, :mod:`rocketstream.client.offset_store`). Pure: no I/O.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any, NamedTuple, SupportsIndex

from rocketstream.codec.fastjson import FastjsonParser, FrozenObject, decode_text, dump_fastjson
from rocketstream.errors import OptionError

__all__ = [
    "INT32_BOUNDS",
    "INT64_BOUNDS",
    "MessageQueueKey",
    "as_int",
    "check_int",
    "dump_local_offsets",
    "load_local_offsets",
    "mq_key",
    "offset_table_of",
    "position_of",
]

INT32_BOUNDS = (-(2**31), 2**31 - 1)
INT64_BOUNDS = (-(2**63), 2**63 - 1)


class MessageQueueKey(NamedTuple):
    topic: str
    broker_name: str
    queue_id: int


def as_int(value: object, bounds: tuple[int, int]) -> int | None:
    """``value`` when it is a (non-bool) int within ``bounds``, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
        return None
    return value


def check_int(name: str, value: object, bounds: tuple[int, int]) -> int:
    """An integer option within ``bounds`` (numpy integers accepted), else OptionError naming ``name``."""
    if type(value) is int and bounds[0] <= value <= bounds[1]:
        return value   # the usual case, without the (slow) runtime Protocol check below
    if not isinstance(value, SupportsIndex):   # has no __index__: floats, strings, None ...
        raise OptionError(name, "must be an integer", value)
    try:
        number = operator.index(value)  # accepts numpy integers, refuses floats and strings
    except TypeError:
        raise OptionError(name, "must be an integer", value) from None
    if isinstance(value, bool) or not bounds[0] <= number <= bounds[1]:
        raise OptionError(name, f"must be an integer in [{bounds[0]}, {bounds[1]}]", value)
    return number


def position_of(p: FastjsonParser, container: object, key: object, which: int) -> int:
    """Where ``container[key]`` was in the text: ``which`` 0 = the key, 1 = the value."""
    return p.positions[(id(container), key)][which]


def offset_table_of(text: str | bytes, path: object) -> tuple[FastjsonParser, dict[Any, Any], dict[Any, Any]]:
    """Parse a document of either offset file and return (parser, document, its ``offsetTable``)."""
    p = FastjsonParser(decode_text(text, path), path)
    doc = p.document()
    if not isinstance(doc, dict):
        p.fail("the document is not an object", 0)
    raw = doc.get("offsetTable", {})
    if not isinstance(raw, dict):
        p.fail("'offsetTable' is not an object", position_of(p, doc, "offsetTable", 1))
    return p, doc, raw


def mq_key(mq: object) -> MessageQueueKey:
    """Accept MessageQueueKey, a (topic, broker, queue) tuple, or anything with those attributes."""
    if isinstance(mq, tuple) and len(mq) == 3:
        topic, broker, qid = mq
    else:
        topic, broker, qid = (getattr(mq, a, None) for a in ("topic", "broker_name", "queue_id"))
    if not isinstance(topic, str) or not isinstance(broker, str):
        raise OptionError("offsets", "keys must carry topic and broker_name strings", mq)
    return MessageQueueKey(topic, broker, check_int("offsets", qid, INT32_BOUNDS))


def load_local_offsets(text: str | bytes, *, path: object = None) -> dict[MessageQueueKey, int]:
    """Parse a broadcasting-mode offsets.json (object keys with brokerName, queueId, topic)."""
    p, _, raw = offset_table_of(text, path)
    result: dict[MessageQueueKey, int] = {}
    for key, offset in raw.items():
        at = position_of(p, raw, key, 0)
        if not isinstance(key, FrozenObject):
            p.fail(f"offset table key {key!r} is not a MessageQueue object", at)
        topic, broker = key.get("topic"), key.get("brokerName")
        qid = as_int(key.get("queueId"), INT32_BOUNDS)
        if not isinstance(topic, str) or not isinstance(broker, str) or qid is None:
            p.fail("MessageQueue key needs string topic, string brokerName and int queueId", at)
        if as_int(offset, INT64_BOUNDS) is None:
            p.fail(f"offset {offset!r} is not an int64", position_of(p, raw, key, 1))
        result[MessageQueueKey(topic, broker, qid)] = offset
    return result


def dump_local_offsets(offsets: Mapping[MessageQueueKey, int]) -> str:
    """offsets.json text exactly as the 4.9.8 client writes it, entries in the mapping's order."""
    table = {
        FrozenObject({"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}): off
        for mq, off in offsets.items()
    }
    return dump_fastjson({"offsetTable": table})
