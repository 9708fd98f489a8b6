"""The answer to GET_TOPIC_STATS_INFO (202; ``MQClientAPIImpl.getTopicStatsInfo``): a ``TopicStatsTable``.

A broker answers it in ``AdminBrokerProcessor.getTopicStatsInfo``: for each queue ``0 .. writeQueueNums-1``
of the topic, ``getMinOffsetInQueue`` / ``getMaxOffsetInQueue`` (what GET_MIN_OFFSET / GET_MAX_OFFSET answer
one queue at a time) and the last message's store time, keyed by ``MessageQueue``. The body is fastjson
(``RemotingSerializable.encode``): a map with object keys, so not strictly JSON.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from rocketstream.errors import BodyError
from rocketstream.remoting import json_body

__all__ = ["TopicStats", "parse_topic_stats"]


class TopicStats(NamedTuple):
    """The queues of one topic in a TopicStatsTable: ``queue_ids`` and their ``min_offsets`` / ``max_offsets``
    (int64 arrays of one length, in the body's order)."""

    queue_ids: np.ndarray
    min_offsets: np.ndarray
    max_offsets: np.ndarray


def empty_topic_stats() -> TopicStats:
    return TopicStats(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))


# One TopicStatsTable entry as fastjson writes it (RemotingSerializable.encode: bean fields sorted by name).
_STATS_ENTRY = re.compile(rb'\{"brokerName":"[^"\\]*","queueId":(\d+),"topic":"([^"\\]*)"\}:'
                          rb'\{"lastUpdateTimestamp":-?\d+,"maxOffset":(-?\d+),"minOffset":(-?\d+)\}')
_STATS_HEAD = b'{"offsetTable":{'


def parse_topic_stats(body: bytes, topic: str, addr: str | None = None) -> TopicStats:
    """The queues of ``topic`` in a TopicStatsTable body (entries of other topics are left out). The compact
    form brokers write is matched entry by entry, when every entry of the body matched; anything else goes
    through the fastjson reader. A body that is not a TopicStatsTable is a :class:`BodyError` naming ``addr``."""
    stripped = body.strip()
    if stripped.startswith(_STATS_HEAD) and stripped.endswith(b"}}"):
        entries = _STATS_ENTRY.findall(stripped)
        n = len(entries)
        if n and stripped.count(b'"brokerName"') == n and stripped.count(b",") == 5 * n - 1:
            cols = np.array(entries)
            keep = cols[:, 1] == topic.encode("utf-8")
            return TopicStats(cols[keep, 0].astype(np.int64), cols[keep, 3].astype(np.int64),
                              cols[keep, 2].astype(np.int64))
    found = _parse_topic_stats_slow(body, topic, addr)
    ids = sorted(found)
    return TopicStats(np.array(ids, dtype=np.int64), np.array([found[q][0] for q in ids], dtype=np.int64),
                      np.array([found[q][1] for q in ids], dtype=np.int64))


def _parse_topic_stats_slow(body: bytes, topic: str, addr: str | None) -> dict[int, tuple[int, int]]:
    """queueId -> (minOffset, maxOffset) of ``topic``'s entries, through the fastjson reader."""
    doc = json_body.loads(body, what="GET_TOPIC_STATS_INFO body", addr=addr)
    table = doc.get("offsetTable") if isinstance(doc, Mapping) else None
    if not isinstance(table, Mapping):
        raise BodyError("GET_TOPIC_STATS_INFO body has no offsetTable object", addr=addr)
    found: dict[int, tuple[int, int]] = {}
    for mq, offsets in table.items():
        if not isinstance(mq, Mapping) or not isinstance(offsets, Mapping):
            raise BodyError(f"GET_TOPIC_STATS_INFO: entry {mq!r}: {offsets!r} is not MessageQueue: TopicOffset",
                            addr=addr)
        if mq.get("topic") != topic:
            continue
        qid, low, high = mq.get("queueId"), offsets.get("minOffset"), offsets.get("maxOffset")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (qid, low, high)):
            raise BodyError(f"GET_TOPIC_STATS_INFO: entry {dict(mq)}: {dict(offsets)} lacks integer queueId, "
                            f"minOffset or maxOffset", addr=addr)
        assert isinstance(qid, int) and isinstance(low, int) and isinstance(high, int)
        found[qid] = (low, high)
    return found
