"""SQL92 property filters on the pull path (``enablePropertyFilter``): RocketMQ 4.9.8's
``ConsumerFilterManager`` (compiled filter per group and topic) and the commit-log half of
``ExpressionMessageFilter`` (``isMatchedByCommitLog``: decode a candidate's properties, evaluate).

pull.py reads records raw with the tags-code filter off (a SQL92 subscription has no tags codes, so
``isMatchedByConsumeQueue`` passes every unit: RocketMQ's bloom-filter pre-check needs the consume-queue
extension, which 4.9.8 leaves off by default) and hands the store :func:`record_filter` as its per-record
check, so the store's loop (``DefaultMessageStore.getMessage`` with a filter) skips the records whose
properties do not match and reads on while the batch is short and fewer than ``maxFilterMessageCount``
units (16,000 bytes of consume queue = 800 units, or ``maxMsgNums`` × 20 bytes) were examined. No record
matched: NO_MATCHED_MESSAGE (the consumer re-pulls at once from the offset after the examined units).

The TAG path never comes here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rocketstream.broker.consumer_manager import SubscriptionData
from rocketstream.codec.sql92 import SqlFilter, compile_sql92, record_properties
from rocketstream.errors import FilterExpressionError

__all__ = ["compile_request_filter", "registered_filter", "record_filter"]

log = logging.getLogger("rocketstream.broker")


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


def record_filter(flt: SqlFilter) -> Callable[[memoryview], bool]:
    """``isMatchedByCommitLog`` for the store's per-record loop (``get_message_raw(record_filter=...)``):
    decode a candidate's properties only and evaluate the compiled filter on them."""
    matches = flt.matches

    def check(record: memoryview) -> bool:
        return matches(record_properties(record))

    return check
