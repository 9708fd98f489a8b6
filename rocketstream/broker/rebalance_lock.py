"""``RebalanceLockManager``: the queue locks of orderly consumers (locks.py answers LOCK_BATCH_MQ /
UNLOCK_BATCH_MQ with it).

A lock is (group, MessageQueue) -> (clientId, last update). A client gets a queue that is free, that it
already holds (the timestamp is refreshed) or whose holder has not renewed for 60 s
(``rocketmq.broker.rebalance.lockMaxLiveTime``). Unlock removes only the caller's own locks. Locks are not
released when a connection closes; they expire.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from rocketstream.errors import BodyError

__all__ = ["MessageQueue", "RebalanceLockManager", "LOCK_MAX_LIVE_TIME_MS"]

log = logging.getLogger("rocketstream.broker")

LOCK_MAX_LIVE_TIME_MS = 60_000


class MessageQueue(NamedTuple):
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, doc: object, what: str) -> MessageQueue:
        if not isinstance(doc, Mapping):
            raise BodyError(f"{what}: a MessageQueue is not an object: {doc!r:.80}")
        topic, broker, qid = doc.get("topic"), doc.get("brokerName"), doc.get("queueId")
        if not isinstance(topic, str) or not isinstance(broker, str) or isinstance(qid, bool) \
                or not isinstance(qid, int):
            raise BodyError(f"{what}: MessageQueue needs topic, brokerName (strings) and queueId (int): {doc!r:.120}")
        return cls(topic, broker, qid)


@dataclass
class LockEntry:
    client_id: str
    last_update_ms: int

    def expired(self, now_ms: int, max_live_ms: int) -> bool:
        return now_ms - self.last_update_ms > max_live_ms


class RebalanceLockManager:
    def __init__(self, max_live_ms: int = LOCK_MAX_LIVE_TIME_MS) -> None:
        self.max_live_ms = max_live_ms
        self.table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str,
                       now_ms: int | None = None) -> set[MessageQueue]:
        """``tryLockBatch``: the queues now locked by ``client_id``."""
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        locks = self.table.setdefault(group, {})
        locked: set[MessageQueue] = set()
        for mq in mqs:
            entry = locks.get(mq)
            if entry is None:
                locks[mq] = LockEntry(client_id, now)
                log.info("tryLockBatch, message queue not locked, I got it. Group: %s NewClientId: %s %s",
                         group, client_id, mq)
            elif entry.client_id == client_id:
                entry.last_update_ms = now
            elif entry.expired(now, self.max_live_ms):
                log.warning("tryLockBatch, message queue lock expired, I got it. Group: %s OldClientId: %s "
                            "NewClientId: %s %s", group, entry.client_id, client_id, mq)
                locks[mq] = LockEntry(client_id, now)
            else:
                log.warning("tryLockBatch, message queue locked by other client. Group: %s OtherClientId: %s "
                            "NewClientId: %s %s", group, entry.client_id, client_id, mq)
                continue
            locked.add(mq)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """``unlockBatch``: only the caller's own locks go."""
        locks = self.table.get(group)
        if not locks:
            return
        for mq in mqs:
            entry = locks.get(mq)
            if entry is None:
                log.warning("unlockBatch, but mq not locked. %s: %s", group, mq)
            elif entry.client_id == client_id:
                del locks[mq]
            else:
                log.warning("unlockBatch, but mq locked by other client: %s, Group: %s NewClientId: %s %s",
                            entry.client_id, group, client_id, mq)
        if not locks:
            self.table.pop(group, None)

    def is_locked(self, group: str, mq: MessageQueue, client_id: str, now_ms: int | None = None) -> bool:
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        entry = self.table.get(group, {}).get(mq)
        return entry is not None and entry.client_id == client_id and not entry.expired(now, self.max_live_ms)
