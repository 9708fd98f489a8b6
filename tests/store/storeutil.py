"""Helpers shared by the store tests: tiny file sizes and messages of an exact record size."""

from __future__ import annotations

from pathlib import Path

from rocketstream import codec
from rocketstream.store import Message, MessageStore, StoreConfig

CL_SIZE = 4096
CQ_SIZE = 20 * 16
UNIQ = "AB" * 16
# small index files (RocketMQ's default ones are 420 MB, sparse): tests that read every file stay fast
# (store_bytes read a default one in 0.75 s)
SMALL_INDEX = {"max_hash_slot_num": 1000, "max_index_num": 4000}


def small_config(root: Path, **kw) -> StoreConfig:
    kw.setdefault("mapped_file_size_commit_log", CL_SIZE)
    kw.setdefault("mapped_file_size_consume_queue", CQ_SIZE)
    for k, v in SMALL_INDEX.items():
        kw.setdefault(k, v)
    return StoreConfig(root, **kw)


def open_small(root: Path, **kw) -> MessageStore:
    return MessageStore.open(root, config=small_config(root, **kw))


def overhead(topic: str = "T", tags: str | None = None) -> int:
    """Record size of a message with an empty body built by ``sized``."""
    props = {codec.PROPERTY_UNIQ_KEY: UNIQ, codec.PROPERTY_WAIT: "true"}
    if tags:
        props[codec.PROPERTY_TAGS] = tags
    return codec.record_size(0, len(topic), len(codec.encode_properties(props)))


def sized(record_size: int, topic: str = "T", tags: str | None = None, **kw) -> Message:
    """A message whose commit-log record is exactly ``record_size`` bytes."""
    body = b"x" * (record_size - overhead(topic, tags))
    return Message(topic, body, tags=tags, properties={codec.PROPERTY_UNIQ_KEY: UNIQ}, **kw)


def count_uniq_keys_from_zero(m) -> None:
    """Monkeypatch (``m``) every UNIQ_KEY generator to count from 0, so two stores written through
    different put paths can be compared byte for byte."""
    import itertools

    import numpy as np

    counter = itertools.count()

    def keys(n):
        return [f"{next(counter):032X}" for _ in range(n)]

    m.setattr(codec, "new_uniq_key", lambda: keys(1)[0])
    m.setattr(codec, "new_uniq_key_block",
              lambda n: np.frombuffer("".join(keys(n)).encode(), dtype=np.uint8).reshape(n, 32).copy())


def store_bytes(root: Path) -> dict[str, bytes]:
    """Commit-log and consume-queue file contents by relative path (no config, lock, abort, checkpoint)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.parent.name != "config"
                   and p.name not in ("lock", "abort", "checkpoint"))
    return {str(p.relative_to(root)): p.read_bytes() for p in files}
