"""QUERY_CONSUME_QUEUE (321): RocketMQ 4.9.8's ``AdminBrokerProcessor.queryConsumeQueue`` (``mqadmin queryCq``).

Request header ``QueryConsumeQueueRequestHeader`` {topic, queueId, index, count, consumerGroup} (no field is
checked: a missing int is 0). The answer, as the real 4.9.8 broker gives it (tests/broker/test_query_cq.py):

* the queue does not exist (``getConsumeQueue`` is null: no such topic or queue id) -> SYSTEM_ERROR,
  remark ``"<queueId>@<topic> is not exist!"``;
* ``index`` below the queue's min, at or past its max (``getIndexBuffer`` is null) -> SUCCESS with no body,
  remark ``"Index <index> of <queueId>@<topic> is not exist!"``;
* else SUCCESS with a ``QueryConsumeQueueResponseBody`` (fastjson: properties sorted, nulls left out):
  ``maxQueueIndex`` / ``minQueueIndex``, ``queueData`` = one ``ConsumeQueueData`` {eval, physicOffset,
  physicSize, tagsCode} per unit from ``index`` — at most ``count`` units and never past the end of the
  consume-queue file holding ``index`` (``getIndexBuffer`` maps one file: a caller pages file by file).
  ``count`` is multiplied by the unit size in Java ``int`` arithmetic, so a count above 107,374,182 wraps
  (2^31-1 gives no unit at all) and a count <= 0 gives ``queueData: []``.
* ``consumerGroup`` given: ``subscriptionData`` of the group's registration for the topic and
  ``filterData`` = ``JSON.toJSONString(ConsumerFilterManager.get(topic, group), true)`` — ``"null"`` for a
  TAG subscription (a SQL92 group's ``ConsumerFilterData`` is not reproduced: ``"null"`` too) — or, for a
  group not registered, ``"<group>@<topic> is not online!"``.
* A tags code at an extension address (``ConsumeQueueExt.isExtAddr``: <= Integer.MIN_VALUE - 1) gets
  ``msg = "Cq extend not exist!addr: <tagsCode>"`` — this store keeps no consume-queue extension (4.9.8's
  ``enableConsumeQueueExt`` is off by default), so ``extendDataJson``, ``bitMap`` and ``eval`` stay unset.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rocketstream.codec import CQ_UNIT_SIZE
from rocketstream.remoting import json_body as _json
from rocketstream.remoting.codes import ResponseCode
from rocketstream.remoting.command import RemotingCommand

__all__ = ["query_consume_queue", "java_int_units"]

NOT_SET_REMARK = "not set any response code"   # RemotingCommand.createResponseCommand(Class) leaves it
_EXT_ADDR_MAX = -(1 << 31) - 1                  # ConsumeQueueExt.MAX_ADDR = Integer.MIN_VALUE - 1L


def java_int_units(count: int) -> int:
    """How many units ``for (i = 0; ...; i < count * CQ_STORE_UNIT_SIZE; i += 20)`` admits: the product is a
    Java ``int`` (wraps at 2^31), a non-positive bound admits none."""
    bound = (count * CQ_UNIT_SIZE + (1 << 31)) % (1 << 32) - (1 << 31)
    return 0 if bound <= 0 else -(-bound // CQ_UNIT_SIZE)


def queue_data_json(units: np.ndarray) -> str:
    """The ``queueData`` array of ``ConsumeQueueData`` beans for consume-queue units (CQ_DTYPE)."""
    offsets = units["offset"].tolist()
    sizes = units["size"].tolist()
    codes = units["tags_code"].tolist()
    parts = []
    for off, size, code in zip(offsets, sizes, codes, strict=True):
        msg = f',"msg":"Cq extend not exist!addr: {code}"' if code <= _EXT_ADDR_MAX else ""
        parts.append(f'{{"eval":false{msg},"physicOffset":{off},"physicSize":{size},"tagsCode":{code}}}')
    return "[" + ",".join(parts) + "]"


def query_consume_queue(controller: Any, subscription_json: Any, req: RemotingCommand) -> RemotingCommand:
    """The 321 answer (module docstring). ``subscription_json(group, topic)`` gives the group's
    ``SubscriptionData`` JSON object for the topic, or None when the group is not online."""
    topic = req.field("topic")
    queue_id = req.int_field("queueId", required=False, default=0)
    index = req.int_field("index", required=False, default=0)
    count = req.int_field("count", required=False, default=0)
    group = req.field("consumerGroup", required=False)
    found = controller.store.index_buffer(topic, queue_id, index, java_int_units(count))
    if found is None:
        return req.response(ResponseCode.SYSTEM_ERROR, f"{queue_id}@{topic} is not exist!")
    low, high, units = found
    sub = filter_data = None
    if group is not None:
        sub = subscription_json(group, topic)
        # ConsumerFilterManager.get is null for a TAG subscription: JSON.toJSONString(null, true) is "null"
        # (a SQL92 group's ConsumerFilterData is not reproduced: "null" too)
        filter_data = f"{group}@{topic} is not online!" if sub is None else "null"
    if units is None:
        return req.response(ResponseCode.SUCCESS, f"Index {index} of {queue_id}@{topic} is not exist!")
    # QueryConsumeQueueResponseBody's properties in fastjson's (sorted) order, nulls left out
    parts = ["{"]
    if filter_data is not None:
        parts.append('"filterData":' + _text(filter_data) + ",")
    parts.append(f'"maxQueueIndex":{high},"minQueueIndex":{low},"queueData":{queue_data_json(units)}')
    if sub is not None:
        parts.append(',"subscriptionData":' + _text(sub))
    parts.append("}")
    body = "".join(parts).encode("utf-8", "surrogatepass")
    return req.response(ResponseCode.SUCCESS, NOT_SET_REMARK, body=body)


def _text(value: object) -> str:
    return _json.dumps(value).decode("utf-8", "surrogatepass")
