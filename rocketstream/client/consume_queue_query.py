"""The answer to QUERY_CONSUME_QUEUE (321; ``MQClientAPIImpl.queryConsumeQueue``): a queue's consume-queue
units from an index, as columns.

What a 4.9.8 broker answers (``AdminBrokerProcessor.queryConsumeQueue``; rocketstream/broker/query_cq.py
gives the same): SUCCESS with a ``QueryConsumeQueueResponseBody`` — ``minQueueIndex``, ``maxQueueIndex``
and ``queueData``, one ``ConsumeQueueData`` {physicOffset, physicSize, tagsCode, ...} per unit from the
asked index, at most ``count`` and never past the end of the consume-queue file holding the index (a
caller pages); SUCCESS with no body when the index is below the queue's min or at / past its max
(remark ``"Index <i> of <q>@<topic> is not exist!"``); SYSTEM_ERROR when the queue does not exist.
The Java client decodes the missing body into a NullPointerException; here it is an answer with
``found`` False.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from rocketstream.errors import BodyError
from rocketstream.remoting import json_body

__all__ = ["ConsumeQueueAnswer", "MAX_QUERY_COUNT", "parse_query_consume_queue"]

# The largest count a 4.9.8 broker honours: it multiplies count by the 20-byte unit size in a Java int,
# so 107,374,183 and above wrap (2^31-1 answers no unit at all).
MAX_QUERY_COUNT = ((1 << 31) - 1) // 20

_EMPTY = np.zeros(0, dtype=np.int64)


class ConsumeQueueAnswer(NamedTuple):
    """Units ``[from_index, from_index + len(sizes))`` of ``topic``:``queue_id`` as int64 columns. ``found``
    False: the broker holds no unit at ``from_index`` (below its min, at or past its max); ``min_index`` / ``max_index``
    are then -1 (the broker's answer has no body to carry them) and ``remark`` says why."""

    topic: str
    queue_id: int
    from_index: int
    found: bool
    min_index: int
    max_index: int
    sizes: np.ndarray
    physic_offsets: np.ndarray
    tags_codes: np.ndarray
    subscription: Mapping[str, object] | None = None
    filter_data: str | None = None
    remark: str | None = None


def not_found(topic: str, queue_id: int, index: int, remark: str | None) -> ConsumeQueueAnswer:
    return ConsumeQueueAnswer(topic, queue_id, index, False, -1, -1, _EMPTY, _EMPTY, _EMPTY, remark=remark)


# One ConsumeQueueData as fastjson writes it for a unit without extension data (RemotingSerializable.encode:
# properties sorted by name, nulls left out) — what 4.9.8 and our broker write for every unit of a consume
# queue without ConsumeQueueExt.
_UNIT = re.compile(rb'\{"eval":false,"physicOffset":(\d+),"physicSize":(\d+),"tagsCode":(-?\d+)\}')
_HEAD = re.compile(rb'\{(?:"filterData":"(?:[^"\\]|\\.)*",)?"maxQueueIndex":(-?\d+),"minQueueIndex":(-?\d+),'
                   rb'"queueData":\[')


def _parse_compact(body: bytes, topic: str, queue_id: int, index: int) -> ConsumeQueueAnswer | None:
    """The compact body without subscription data, unit by unit with one regular expression, when every unit
    of the body matched (a body of 8,192 units: a few ms, where json.loads and a loop take ~100 ms)."""
    head = _HEAD.match(body)
    if head is None or not body.endswith(b"]}"):   # subscriptionData (a group) comes last: the slow path
        return None
    units = _UNIT.findall(body, head.end())
    n = len(units)
    if body.count(b'"physicSize"') != n or (n and body.count(b"},{") != n - 1):
        return None
    cols = np.array(units, dtype=np.bytes_).astype(np.int64).reshape(n, 3) if n else np.zeros((0, 3), np.int64)
    return ConsumeQueueAnswer(topic, queue_id, index, True, int(head.group(2)), int(head.group(1)),
                              cols[:, 1].copy(), cols[:, 0].copy(), cols[:, 2].copy())


def parse_query_consume_queue(body: bytes, topic: str, queue_id: int, index: int, *,
                              addr: str | None = None) -> ConsumeQueueAnswer:
    """A ``QueryConsumeQueueResponseBody``; anything but its shape is a :class:`BodyError` naming the broker,
    topic and queue."""
    where = f"QUERY_CONSUME_QUEUE {topic}:{queue_id} from index {index}"
    fast = _parse_compact(body, topic, queue_id, index)
    if fast is not None:
        return fast
    try:
        doc = json.loads(body)   # fastjson writes this bean as standard JSON (no map keys): the C parser
    except (ValueError, UnicodeDecodeError):
        doc = json_body.loads(body, what=f"{where}: QueryConsumeQueueResponseBody", addr=addr)
    if not isinstance(doc, dict):
        raise BodyError(f"{where}: the body is not a QueryConsumeQueueResponseBody object", addr=addr)
    low, high, units = doc.get("minQueueIndex", 0), doc.get("maxQueueIndex", 0), doc.get("queueData")
    if not _is_int(low) or not _is_int(high):
        raise BodyError(f"{where}: minQueueIndex / maxQueueIndex are not integers ({low!r}, {high!r})", addr=addr)
    if units is None:
        units = []
    if not isinstance(units, list):
        raise BodyError(f"{where}: queueData is not an array", addr=addr)
    try:
        cols = np.array([(u["physicOffset"], u["physicSize"], u["tagsCode"]) for u in units],
                        dtype=np.int64).reshape(len(units), 3)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise BodyError(f"{where}: a queueData entry lacks an integer physicOffset, physicSize or tagsCode "
                        f"({type(exc).__name__}: {exc})", addr=addr) from None
    if len(units) and not all(isinstance(u["physicSize"], int) for u in units):
        raise BodyError(f"{where}: a queueData physicSize is not an integer", addr=addr)
    sub = doc.get("subscriptionData")
    filt = doc.get("filterData")
    return ConsumeQueueAnswer(topic, queue_id, index, True, int(low), int(high), cols[:, 1].copy(),
                              cols[:, 0].copy(), cols[:, 2].copy(),
                              sub if isinstance(sub, dict) else None, filt if isinstance(filt, str) else None)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
