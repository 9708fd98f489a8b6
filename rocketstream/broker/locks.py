"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42) for orderly consumers (``AdminBrokerProcessor.lockBatchMQ`` /
``unlockBatchMQ`` over ``RebalanceLockManager``, rebalance_lock.py): 60-s locks per (group, queue)."""

from __future__ import annotations

from collections.abc import Mapping

from rocketstream.broker.context import BrokerContext
from rocketstream.broker.rebalance_lock import MessageQueue
from rocketstream.errors import BodyError
from rocketstream.remoting import json_body
from rocketstream.remoting.channel import Channel
from rocketstream.remoting.codes import RequestCode, ResponseCode
from rocketstream.remoting.command import RemotingCommand

__all__ = ["register", "lock_batch_mq", "unlock_batch_mq"]


def _lock_body(request: RemotingCommand, what: str) -> tuple[str, str, list[MessageQueue]]:
    doc = json_body.loads(request.body or b"", what=what)
    if not isinstance(doc, Mapping):
        raise BodyError(f"{what} is not a JSON object")
    group, client_id, mq_set = doc.get("consumerGroup"), doc.get("clientId"), doc.get("mqSet")
    if not isinstance(group, str) or not group:
        raise BodyError(f"{what}: consumerGroup is missing or not a string")
    if not isinstance(client_id, str) or not client_id:
        raise BodyError(f"{what}: clientId is missing or not a string")
    if mq_set is None:
        mq_set = []
    if not isinstance(mq_set, list):
        raise BodyError(f"{what}: mqSet is not an array")
    return group, client_id, [MessageQueue.from_json(m, what) for m in mq_set]


def lock_batch_mq(controller: BrokerContext, channel: Channel, request: RemotingCommand) -> RemotingCommand:
    group, client_id, mqs = _lock_body(request, "LockBatchRequestBody")
    locked = controller.locks.try_lock_batch(group, mqs, client_id)
    body = json_body.dumps({"lockOKMQSet": [mq.to_json() for mq in sorted(locked)]})
    return request.response(ResponseCode.SUCCESS, body=body)


def unlock_batch_mq(controller: BrokerContext, channel: Channel, request: RemotingCommand) -> RemotingCommand:
    group, client_id, mqs = _lock_body(request, "UnlockBatchRequestBody")
    controller.locks.unlock_batch(group, mqs, client_id)
    return request.response(ResponseCode.SUCCESS)


def register(controller: BrokerContext) -> None:
    controller.server.register(RequestCode.LOCK_BATCH_MQ, lambda ch, req: lock_batch_mq(controller, ch, req))
    controller.server.register(RequestCode.UNLOCK_BATCH_MQ, lambda ch, req: unlock_batch_mq(controller, ch, req))
