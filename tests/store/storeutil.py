"""Helpers shared by the store tests: tiny file sizes and messages of an exact record size."""

from __future__ import annotations

from pathlib import Path

from rocketstream.store import Message, MessageStore, StoreConfig
from rocketstream.store import format as fmt

CL_SIZE = 4096
CQ_SIZE = 20 * 16
UNIQ = "AB" * 16


def small_config(root: Path, **kw) -> StoreConfig:
    kw.setdefault("mapped_file_size_commit_log", CL_SIZE)
    kw.setdefault("mapped_file_size_consume_queue", CQ_SIZE)
    return StoreConfig(root, **kw)


def open_small(root: Path, **kw) -> MessageStore:
    return MessageStore.open(root, config=small_config(root, **kw))


def overhead(topic: str = "T", tags: str | None = None) -> int:
    """Record size of a message with an empty body built by ``sized``."""
    props = {fmt.PROPERTY_UNIQ_KEY: UNIQ, fmt.PROPERTY_WAIT: "true"}
    if tags:
        props[fmt.PROPERTY_TAGS] = tags
    return fmt.record_size(0, len(topic), len(fmt.encode_properties(props)))


def sized(record_size: int, topic: str = "T", tags: str | None = None, **kw) -> Message:
    """A message whose commit-log record is exactly ``record_size`` bytes."""
    body = b"x" * (record_size - overhead(topic, tags))
    return Message(topic, body, tags=tags, properties={fmt.PROPERTY_UNIQ_KEY: UNIQ}, **kw)
