"""The broker: RocketMQ's request processors over ``MessageStore`` (send, pull with long polling,
offsets, heartbeats and groups, locks, queries), registration with name servers, and the CLI's
``rocketstream broker`` / ``serve`` loop (controller.py)."""

from rocketstream.broker.config import BrokerConfig
from rocketstream.broker.controller import BrokerController, run_broker

__all__ = ["BrokerConfig", "BrokerController", "run_broker"]
