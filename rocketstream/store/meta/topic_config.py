"""``config/topics.json``: RocketMQ's TopicConfig table (queue counts per topic)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rocketstream.errors import StoreConfigError
from rocketstream.fsutil import write_atomic
from rocketstream.store.files.durable import os_errors

PERM_READ_WRITE = 6


class TopicConfigTable:
    def __init__(self, root: Path, *, read_only: bool) -> None:
        self.path = root / "config" / "topics.json"
        self.read_only = read_only
        self.table: dict[str, dict[str, Any]] = {}   # topicName -> TopicConfig fields as JSON
        self.data_version = {"counter": 0, "timestamp": 0}

    def load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        try:
            doc = json.loads(text)
        except ValueError:
            from rocketstream.store.meta.offsets import (
                parse_fastjson,  # fastjson output is not always JSON
            )

            doc = parse_fastjson(text, path=self.path)
        try:
            self.table = {str(k): dict(v) for k, v in dict(doc.get("topicConfigTable", {})).items()}
            self.data_version = dict(doc.get("dataVersion", self.data_version))
        except (AttributeError, TypeError, ValueError) as exc:
            raise StoreConfigError(f"topics.json has an unexpected shape: {exc}", path=self.path) from exc

    def queue_nums(self, topic: str) -> int | None:
        entry = self.table.get(topic)
        if entry is None:
            return None
        value = entry.get("writeQueueNums", entry.get("readQueueNums", 0))
        if isinstance(value, (int, float, str)):   # not JSON null, an object or an array
            try:
                return int(value)
            except ValueError:
                pass
        raise StoreConfigError(f"topic {topic!r}: writeQueueNums is not a number", path=self.path)

    def ensure(self, topic: str, queue_nums: int) -> bool:
        """Register ``topic`` with at least ``queue_nums`` queues; True when the table changed."""
        have = self.queue_nums(topic)
        if have is not None and have >= queue_nums:
            return False
        self.table[topic] = {"order": False, "perm": PERM_READ_WRITE, "readQueueNums": queue_nums,
                             "topicFilterType": "SINGLE_TAG", "topicName": topic, "topicSysFlag": 0,
                             "writeQueueNums": queue_nums}
        self.data_version = {"counter": int(self.data_version.get("counter", 0)) + 1,
                             "timestamp": time.time_ns() // 1_000_000}
        self.save()
        return True

    def put(self, topic: str, entry: dict[str, Any]) -> None:
        """Set the TopicConfig fields of ``topic`` (a broker's ``updateTopicConfig``), bump the data
        version and save."""
        self.table[topic] = dict(entry)
        self._bump_and_save()

    def remove(self, topic: str) -> bool:
        """Drop ``topic`` (``deleteTopicConfig``); True when it was there."""
        if self.table.pop(topic, None) is None:
            return False
        self._bump_and_save()
        return True

    def _bump_and_save(self) -> None:
        self.data_version = {"counter": int(self.data_version.get("counter", 0)) + 1,
                             "timestamp": time.time_ns() // 1_000_000}
        self.save()

    def save(self) -> None:
        text = json.dumps({"dataVersion": self.data_version, "topicConfigTable": self.table}, indent="\t",
                          sort_keys=True)
        with os_errors("cannot write topic config", self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, text.encode("utf-8"))
