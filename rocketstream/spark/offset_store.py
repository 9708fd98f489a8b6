"""Where a consumer group's committed offsets live, by message model (``ConsumerOffsetManager`` on the
broker, ``LocalFileOffsetStore`` in the client).

* CLUSTERING: each broker's ``config/consumerOffset.json`` (``topic@group -> {queueId: offset}``); a queue's
  offset lives on the broker that hosts it, so the store needs each broker's store root.
* BROADCASTING: the client-side ``<base_dir>/<clientId>/<group>/offsets.json``.

Offsets are next-to-consume queue offsets; ``read`` answers -1 for a queue the group never committed,
as RocketMQ's ``readOffset(READ_FROM_STORE)`` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from rocketstream.client.offset_store import LocalOffsetStore, default_local_offset_dir
from rocketstream.errors import (
    OptionError,
    ReadOnlyStoreError,
    RocketStreamError,
    StoreError,
)
from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.store.meta.offsets import ConsumerOffsetManager

CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"
MESSAGE_MODELS = (CLUSTERING, BROADCASTING)


class OffsetStore:
    """Read and commit a group's offsets through the broker tables or the local offsets.json."""

    def __init__(
        self,
        message_model: str,
        *,
        store_roots: Mapping[str, str | Path] | None = None,
        base_dir: str | Path | None = None,
        client_id: str | None = None,
        read_only: bool = False,
    ) -> None:
        if message_model not in MESSAGE_MODELS:
            raise OptionError("messageModel", f"must be one of {', '.join(MESSAGE_MODELS)}", message_model)
        self.message_model = message_model
        self.read_only = read_only
        if message_model == CLUSTERING:
            if not store_roots:
                raise OptionError("messageModel", "CLUSTERING needs the store root of each broker")
            self._brokers = {
                name: ConsumerOffsetManager(root, read_only=read_only) for name, root in store_roots.items()
            }
        else:
            if not client_id:
                raise OptionError("messageModel", "BROADCASTING needs a client id (offsets.json lives under it)")
            self.base_dir = Path(base_dir) if base_dir is not None else default_local_offset_dir()
            self.client_id = client_id

    @classmethod
    def clustering(cls, store_roots: Mapping[str, str | Path], *, read_only: bool = False) -> OffsetStore:
        """Broker tables; ``store_roots`` maps broker name to that broker's store root."""
        return cls(CLUSTERING, store_roots=store_roots, read_only=read_only)

    @classmethod
    def broadcasting(
        cls, client_id: str, base_dir: str | Path | None = None, *, read_only: bool = False
    ) -> OffsetStore:
        return cls(BROADCASTING, client_id=client_id, base_dir=base_dir, read_only=read_only)

    def read(self, group: str, queues: Iterable[QueueKey]) -> dict[QueueKey, int]:
        """Committed offset of each queue (queue order), -1 when the group has none for it."""
        queues = sorted(set(queues))
        if self.message_model == BROADCASTING:
            local = {(k.topic, k.broker_name, k.queue_id): o for k, o in self._local(group).read().items()}
            return {q: local.get((q.topic, q.broker_name, q.queue_id), -1) for q in queues}
        per_topic: dict[tuple[str, str], dict[int, int]] = {}  # one file read per (broker, topic)
        result = {}
        for q in queues:
            key = (q.broker_name, q.topic)
            if key not in per_topic:
                per_topic[key] = self._broker(q.broker_name).offsets_of(group, q.topic)
            result[q] = per_topic[key].get(q.queue_id, -1)
        return result

    def commit(self, group: str, offsets: Mapping[QueueKey, int]) -> None:
        """Store ``offsets``; other queues' entries are kept. One atomic rewrite per broker file."""
        bad = {str(q): o for q, o in offsets.items() if o < 0}
        if bad:
            raise RocketStreamError(f"cannot commit negative offsets for group {group!r}: {bad}")
        if self.read_only:
            raise ReadOnlyStoreError(f"offsets of group {group!r} cannot be committed: the offset store is read-only")
        if self.message_model == BROADCASTING:
            if offsets:
                self._local(group).persist({q: o for q, o in offsets.items()})
            return
        by_broker: dict[str, dict[tuple[str, str], dict[int, int]]] = {}
        for q in sorted(offsets):
            by_broker.setdefault(q.broker_name, {}).setdefault((group, q.topic), {})[q.queue_id] = offsets[q]
        managers = {name: self._broker(name) for name in by_broker}  # every broker known before writing any
        for name, updates in by_broker.items():
            managers[name].commit_many(updates)

    def _broker(self, broker_name: str) -> ConsumerOffsetManager:
        try:
            return self._brokers[broker_name]
        except KeyError:
            known = ", ".join(sorted(self._brokers))
            raise StoreError(f"no store root known for broker {broker_name!r} (known: {known})") from None

    def _local(self, group: str) -> LocalOffsetStore:
        return LocalOffsetStore(self.base_dir, self.client_id, group)
