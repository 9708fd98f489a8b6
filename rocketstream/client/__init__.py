"""A RocketMQ 4.x client in Python over RocketMQ's remoting protocol: :class:`Producer`,
:class:`PushConsumer` and :class:`LitePullConsumer` (README "Python client"), the consumers configured by
keywords or by :class:`PushConsumerConfig` / :class:`LitePullConsumerConfig`.

The names below load on first use, so that ``rocketstream.client.allocate`` (planning maths that the
Spark source imports) does not pull in the network client."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Producer": "rocketstream.client.producer",
    "PushConsumer": "rocketstream.client.push_consumer",
    "LitePullConsumer": "rocketstream.client.lite_pull",
    "ClientConfig": "rocketstream.client.config",
    "PushConsumerConfig": "rocketstream.client.config",
    "LitePullConsumerConfig": "rocketstream.client.config",
    "Message": "rocketstream.client.common",
    "MessageExt": "rocketstream.client.common",
    "SendResult": "rocketstream.client.common",
    "SendStatus": "rocketstream.client.common",
    "MessageQueue": "rocketstream.client.allocate",
    "ConsumeConcurrentlyStatus": "rocketstream.client.consume_service",
    "ConsumeOrderlyStatus": "rocketstream.client.consume_service",
    "CLUSTERING": "rocketstream.client.rebalance",
    "BROADCASTING": "rocketstream.client.rebalance",
    "CONSUME_FROM_LAST_OFFSET": "rocketstream.client.rebalance",
    "CONSUME_FROM_FIRST_OFFSET": "rocketstream.client.rebalance",
    "CONSUME_FROM_TIMESTAMP": "rocketstream.client.rebalance",
    "Credentials": "rocketstream.client.credentials",
    "TlsConfig": "rocketstream.client.tls",
    "TransactionProducer": "rocketstream.client.transaction",
    "TransactionListener": "rocketstream.client.transaction",
    "LocalTransactionState": "rocketstream.client.transaction",
    "TransactionSendResult": "rocketstream.client.transaction",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rocketstream.client' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
