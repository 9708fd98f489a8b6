"""Expired-file deletion (``DefaultMessageStore.CleanCommitLogService`` / ``CleanConsumeQueueService``):
commit-log files by age, then consume-queue files whose last unit points below the new commit-log minimum,
then correctMinOffset on every queue.

Differences from RocketMQ: runs when called (no ``deleteWhen`` hour, no disk-ratio trigger) and
deletes every expired file in one call (no 10-file batch limit). Queue minimums are not persisted:
like RocketMQ we recompute them at start-up with correctMinOffset.

``fileReservedTime`` is a broker setting, not part of a store (docs/store-format.md). Our own stores use 72 h when
nothing is configured; a foreign store (written by a real broker) needs the hours given explicitly, by
its broker.conf or by the caller, and a call without them is refused (StoreConfigError) rather than
guessing a policy that would delete most of a broker that keeps files for a week.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from rocketstream.store.files.consume_queue import UNIT, units_of
from rocketstream.store.files.durable import os_errors

if TYPE_CHECKING:
    from rocketstream.store.files.commit_log import CommitLog
    from rocketstream.store.files.consume_queue import ConsumeQueue


def delete_expired_files(commit_log: CommitLog, queues: Iterable[ConsumeQueue], reserved_hours: float,
                         now_ms: int | None = None) -> list[Path]:
    """Delete commit-log files with ``mtime + reserved <= now`` oldest first, never the last file
    and never leaving a hole; then the consume-queue files they made useless. Returns the paths.
    The caller holds the store's write lock and has checked that the store is writable."""
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    reserved_ms = int(reserved_hours * 3_600_000)
    deleted: list[Path] = []
    queue = commit_log.queue
    while len(queue.files) > 1:
        path = queue.files[0].path
        with os_errors("cannot stat commit-log file", path):
            mtime_ms = os.stat(path).st_mtime_ns // 1_000_000
        if mtime_ms + reserved_ms > now:
            break
        deleted += queue.delete_first()
    if not deleted:
        return deleted
    cl_min = queue.min_offset()
    for cq in queues:
        files = cq.queue.files
        while len(files) > 1 and int(units_of(files[0])[cq.file_size // UNIT - 1]["offset"]) < cl_min:
            deleted += cq.queue.delete_first()
        cq.correct_min_offset(cl_min)
    return deleted
