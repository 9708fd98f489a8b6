"""SQL92 property filters on the pull path (``enablePropertyFilter``): RocketMQ 4.9.8's
``ConsumerFilterManager`` (compiled filter per group and topic) and the commit-log half of
``ExpressionMessageFilter`` (``isMatchedByCommitLog``: decode a candidate's properties, evaluate).

pull.py reads records raw with the tags-code filter off (a SQL92 subscription has no tags codes, so
``isMatchedByConsumeQueue`` passes every unit: RocketMQ's bloom-filter pre-check needs the consume-queue
extension, which 4.9.8 leaves off by default) and hands the result to :func:`filter_result`, which keeps the
records whose properties match and, like ``DefaultMessageStore.getMessage`` with a filter, reads on while
the batch is short and fewer than ``maxFilterMessageCount`` units (16,000 bytes of consume queue = 800
units, or ``maxMsgNums`` × 20 bytes) were examined. No record matched: NO_MATCHED_MESSAGE (the consumer
re-pulls at once from the offset after the examined units).

The TAG path never comes here.
"""

from __future__ import annotations

import logging
from typing import Protocol

from rocketstream.broker.consumer_manager import SubscriptionData
from rocketstream.codec.sql92 import SqlFilter, compile_sql92, record_properties
from rocketstream.errors import FilterExpressionError
from rocketstream.store.write.messages import GetMessageStatus, RawMessageResult

__all__ = ["compile_request_filter", "registered_filter", "filter_result", "CQ_UNIT_SIZE"]

log = logging.getLogger("rocketstream.broker")

CQ_UNIT_SIZE = 20


class _RawReader(Protocol):
    def get_message_raw(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                        tags_codes: None = None) -> RawMessageResult: ...


def compile_request_filter(topic: str, group: str, expression: str | None) -> SqlFilter | None:
    """``ConsumerFilterManager.build`` for a pull carrying its subscription: the compiled filter, or None
    when the expression does not compile (logged). RocketMQ 4.9.8 then runs the pull without filter data
    (its ``assert consumerFilterData != null`` is off in a production JVM), i.e. every message passes."""
    try:
        return compile_sql92(expression or "")
    except FilterExpressionError as exc:
        log.error("parse error: expr=%s, topic=%s, group=%s, error=%s", expression, topic, group, exc)
        return None


def registered_filter(sub: SubscriptionData) -> SqlFilter | None:
    """The filter of a subscription registered by heartbeat (``ConsumerFilterManager.get``); None when its
    expression does not compile (the pull is then answered FILTER_DATA_NOT_EXIST)."""
    try:
        return compile_sql92(sub.sub_string)
    except FilterExpressionError:
        return None


def filter_result(store: _RawReader, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                  flt: SqlFilter, first: RawMessageResult, *, max_filter_message_bytes: int = 16000,
                  max_transfer_bytes: int = 262144) -> RawMessageResult:
    """Keep the records of ``first`` (read from ``offset`` with no tags filter) that ``flt`` matches; read
    on while fewer than ``max_msg_nums`` matched and the examined units stay within RocketMQ's filter
    window."""
    if first.status is not GetMessageStatus.FOUND:
        return first
    window = max(max_filter_message_bytes, max_msg_nums * CQ_UNIT_SIZE) // CQ_UNIT_SIZE
    kept: list[bytes] = []
    size = 0
    result = first
    examined_end = offset
    while True:
        for buf in result.buffers:
            if flt.matches(record_properties(buf)):
                kept.append(buf)
                size += len(buf)
        examined_end = result.next_begin_offset
        if (len(kept) >= max_msg_nums or size >= max_transfer_bytes or examined_end >= result.max_offset
                or examined_end - offset >= window):
            break
        result = store.get_message_raw(topic, queue_id, examined_end, max_msg_nums - len(kept), None)
        if result.status is not GetMessageStatus.FOUND:
            break
    status = GetMessageStatus.FOUND if kept else GetMessageStatus.NO_MATCHED_MESSAGE
    out = RawMessageResult(status, examined_end, first.min_offset, first.max_offset)
    out.buffers = kept
    out.total_bytes = size
    return out
