"""The RocketMQ-4.9-compatible store: commit log, consume queues, recovery, retention.

Public entry point: ``MessageStore.open(root, read_only=...)``.
"""

from rocketstream.store.config import StoreConfig, default_broker_conf, default_broker_name
from rocketstream.codec import HostAddress, MessageRecord
from rocketstream.store.message_store import MessageStore
from rocketstream.store.messages import (GetMessageResult, GetMessageStatus, Message, PutMessageResult,
                                         PutMessageStatus)

__all__ = ["GetMessageResult", "GetMessageStatus", "HostAddress", "Message", "MessageRecord", "MessageStore",
           "PutMessageResult", "PutMessageStatus", "StoreConfig", "default_broker_conf",
           "default_broker_name"]
