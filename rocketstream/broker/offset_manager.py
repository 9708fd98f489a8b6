"""``BrokerOffsetManager``: the broker's committed consumer offsets (``ConsumerOffsetManager``),
``config/consumerOffset.json`` keyed ``topic@group``.

MINIMAL VERSION (core): an in-memory table loaded at start and written back on ``persist()`` through
store/meta/offsets.py, with no merge of what other processes changed on disk. The "offsets" helper
writes the real one (same interface) and it replaces this file at merge.
"""

from __future__ import annotations

from pathlib import Path

from rocketstream.store.meta.offsets import ConsumerOffsetManager

__all__ = ["BrokerOffsetManager"]

TOPIC_GROUP_SEPARATOR = "@"


class BrokerOffsetManager:
    def __init__(self, store_root: Path) -> None:
        self.store_root = Path(store_root)
        self._file = ConsumerOffsetManager(self.store_root)
        self._table: dict[str, dict[int, int]] = {}

    def load(self) -> None:
        self._table = self._file.table()

    def commit_offset(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._table.setdefault(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {})[queue_id] = offset

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self._table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}).get(queue_id, -1)

    def persist(self) -> None:
        updates = {}
        for key, queues in self._table.items():
            topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
            updates[(group, topic)] = dict(queues)
        if updates:
            self._file.commit_many(updates)

    def table(self) -> dict[str, dict[int, int]]:
        return {k: dict(v) for k, v in self._table.items()}

    def topics_of_group(self, group: str) -> set[str]:
        out = set()
        for key in self._table:
            topic, _, g = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if g == group:
                out.add(topic)
        return out

    def groups_of_topic(self, topic: str) -> set[str]:
        out = set()
        for key in self._table:
            t, _, g = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if t == topic:
                out.add(g)
        return out

    def remove_offset(self, group: str) -> None:
        for key in [k for k in self._table if k.rpartition(TOPIC_GROUP_SEPARATOR)[2] == group]:
            del self._table[key]

    def clone_offset(self, src_group: str, dst_group: str, topic: str) -> None:
        offsets = self._table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{src_group}")
        if offsets is not None:
            self._table[f"{topic}{TOPIC_GROUP_SEPARATOR}{dst_group}"] = dict(offsets)

    def query_min_offset_in_all_group(self, topic: str, filter_groups: str | None) -> dict[int, int]:
        skip = {g.strip() for g in (filter_groups or "").split(",") if g.strip()}
        out: dict[int, int] = {}
        for key, queues in self._table.items():
            t, _, g = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if t != topic or g in skip:
                continue
            for q, off in queues.items():
                out[q] = min(off, out.get(q, off))
        return out
