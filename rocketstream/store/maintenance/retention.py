"""Expired-file deletion (spec 2.8): commit-log files by age, then consume-queue files whose last
unit points below the new commit-log minimum, then correctMinOffset on every queue.

Differences from RocketMQ: runs when called (no ``deleteWhen`` hour, no disk-ratio trigger) and
deletes every expired file in one call (no 10-file batch limit). Queue minimums are not persisted:
like RocketMQ we recompute them at start-up with correctMinOffset.

``fileReservedTime`` is a broker setting, not part of a store (spec 2.9). Our own stores use 72 h when
nothing is configured; a foreign store (written by a real broker) needs the hours given explicitly, by
its broker.conf or by the caller, and a call without them is refused (StoreConfigError) rather than
guessing a policy that would delete most of a broker that keeps files for a week.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rocketstream.errors import StoreConfigError, StoreError
from rocketstream.store.files.consume_queue import UNIT, units_of

if TYPE_CHECKING:
    from rocketstream.store.message_store import MessageStore


def delete_expired_files(store: MessageStore, now_ms: int | None = None,
                         reserved_hours: float | None = None) -> list[Path]:
    """Delete commit-log files with ``mtime + reserved <= now`` oldest first, never the last file
    and never leaving a hole; then the consume-queue files they made useless. Returns the paths."""
    store._check_writable()
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if reserved_hours is None and store.foreign and not store.config.retention_configured:
        raise StoreConfigError("this store was written by another broker and carries no retention policy: give "
                               "the hours to keep (reserved_hours, CLI --reserved-hours) or fileReservedTime in "
                               "the broker.conf of this store", path=store.root)
    hours = store.config.reserved_hours if reserved_hours is None else reserved_hours
    reserved_ms = int(hours * 3_600_000)
    deleted: list[Path] = []
    with store._lock:
        queue = store.commit_log.queue
        while len(queue.files) > 1:
            path = queue.files[0].path
            try:
                mtime_ms = os.stat(path).st_mtime_ns // 1_000_000
            except OSError as exc:
                raise StoreError(f"cannot stat commit-log file: {exc}", path=path) from exc
            if mtime_ms + reserved_ms > now:
                break
            deleted += queue.delete_first()
        if not deleted:
            return deleted
        cl_min = queue.min_offset()
        for cq in store._queues.values():
            files = cq.queue.files
            while len(files) > 1 and int(units_of(files[0])[cq.file_size // UNIT - 1]["offset"]) < cl_min:
                deleted += cq.queue.delete_first()
            cq.correct_min_offset(cl_min)
    return deleted
