"""The broker: RocketMQ's request processors over ``MessageStore`` (send, pull with long polling,
offsets, heartbeats and groups, locks, queries), and registration with name servers, all run by
``BrokerController`` (controller.py)."""

from rocketstream.broker.config import BrokerConfig
from rocketstream.broker.controller import BrokerController

__all__ = ["BrokerConfig", "BrokerController"]
