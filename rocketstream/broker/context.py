"""``BrokerContext``: what request processors may use of the broker (the contract of broker-plan's
"Interfaces"; ``BrokerController`` implements it). Processor modules type their ``controller`` argument
with this Protocol instead of importing controller.py, which imports them (no import cycle)."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol

from rocketstream.broker.config import BrokerConfig
from rocketstream.broker.consumer_manager import ConsumerManager, ProducerManager
from rocketstream.broker.hold import PullRequestHoldService
from rocketstream.broker.offset_manager import BrokerOffsetManager
from rocketstream.broker.rebalance_lock import RebalanceLockManager
from rocketstream.broker.stats import BrokerStats
from rocketstream.broker.subscription_group import SubscriptionGroupManager
from rocketstream.broker.topic_manager import TopicConfigManager
from rocketstream.remoting.server import RemotingServer, RequestHook
from rocketstream.store.message_store import MessageStore
from rocketstream.store.write.messages import Message, PutMessageResult

__all__ = ["BrokerContext"]


class BrokerContext(Protocol):
    config: BrokerConfig
    server: RemotingServer
    request_hooks: list[RequestHook]
    store: MessageStore
    topics: TopicConfigManager
    offsets: BrokerOffsetManager
    subscription_groups: SubscriptionGroupManager
    consumers: ConsumerManager
    producers: ProducerManager
    locks: RebalanceLockManager
    pull_holds: PullRequestHoldService
    schedule: Any
    stats: BrokerStats
    flusher: Any   # flush.FlushService once started

    @property
    def broker_addr(self) -> str: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> Any: ...

    def add_service(self, fn: Any, name: str) -> None: ...

    def put_message(self, msg: Message, queue_id: int) -> PutMessageResult: ...

    def on_put(self, topic: str, queue_id: int, max_offset: int) -> None: ...

    def request_register(self) -> object: ...

    async def register_now(self) -> None: ...
