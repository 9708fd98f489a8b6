"""Writer start-up and shutdown discipline (spec 4): the ``lock`` file, the ``abort`` marker, and
commit-log recovery (normal from the third-to-last file; abnormal from the file the checkpoint
points at, re-dispatching every record), then consume-queue truncation to the recovered end.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
from collections.abc import Iterable
from pathlib import Path

from rocketstream.errors import CorruptStoreError, StoreLockedError
from rocketstream.store import format as fmt
from rocketstream.store.checkpoint import StoreCheckpoint
from rocketstream.store.commit_log import CommitLog
from rocketstream.store.consume_queue import ConsumeQueue
from rocketstream.store.dispatch import Dispatcher, is_dispatchable

_held_locks: set[str] = set()
_held_guard = threading.Lock()
_II = struct.Struct(">ii")
_Q = struct.Struct(">q")


class StoreLock:
    """Exclusive writer lock: POSIX record lock on byte 0 of ``lock`` (what RocketMQ's
    FileChannel.lock takes, so a Java broker and we exclude each other), plus an in-process
    registry because POSIX locks do not conflict within one process."""

    def __init__(self, root: Path) -> None:
        self.path = root / "lock"
        self._key = os.path.realpath(self.path)
        self._fd: int | None = None

    def acquire(self) -> None:
        with _held_guard:
            if self._key in _held_locks:
                raise StoreLockedError("store is already open for writing in this process", path=self.path)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError as exc:
                os.close(fd)
                raise StoreLockedError("another process holds the store's writer lock (Lock failed, MQ already "
                                       "started)", path=self.path) from exc
            os.pwrite(fd, b"lock", 0)
            os.fsync(fd)
            self._fd = fd
            _held_locks.add(self._key)

    def release(self) -> None:
        with _held_guard:
            if self._fd is None:
                return
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)
            finally:
                os.close(self._fd)
                self._fd = None
                _held_locks.discard(self._key)


def _first_record_ok_for_abnormal(cl: CommitLog, index: int, min_timestamp: int) -> bool:
    """Spec 4.5 step 1 probe: V1/V2 magic, non-zero STORETIMESTAMP <= checkpoint minimum."""
    mf = cl.queue.files[index]
    _, magic = _II.unpack_from(mf.mm, 0)
    if magic not in (fmt.MAGIC_V1, fmt.MAGIC_V2):
        return False
    ts = cl.store_timestamp_at(mf.file_from_offset)
    return ts != 0 and ts <= min_timestamp


def _repair_tail(cq: ConsumeQueue) -> bool:
    """Repeat ConsumeQueue.repair_tail while it removes whole files (the new last file is checked too)."""
    cut = False
    while cq.repair_tail():
        cut = True
    return cut


def recover(cl: CommitLog, queues: Iterable[ConsumeQueue], dispatcher: Dispatcher, checkpoint: StoreCheckpoint,
            *, abnormal: bool, check_crc: bool) -> int:
    """Recover the commit log and the consume queues; returns the commit-log end offset.

    Beyond spec 4.4/4.5, consume queues are treated as derived data that must agree with the commit
    log whatever the shutdown: each queue's last file is checked unit by unit against the record
    headers (a disagreeing unit and everything after it is cut), and a queue whose units stop short
    of the last record the scan saw for it is re-dispatched from its own end — so a damaged or lost
    consume-queue tail is rebuilt after a clean shutdown too.
    """
    queues = list(queues)
    for cq in queues:
        cq.recover()
    files = cl.queue.files
    if not files:
        for cq in queues:          # no commit log at all: every unit would dangle
            cq.queue.truncate_dirty(-1)
            cq.min_logic_offset = cq.max_physic_offset = 0
        return 0
    repaired = [cq for cq in queues if _repair_tail(cq)]
    max_cq_phys = max((cq.max_physic_offset for cq in queues), default=0)
    if abnormal:
        min_ts = checkpoint.min_timestamp()
        start_index = next((i for i in range(len(files) - 1, -1, -1)
                            if _first_record_ok_for_abnormal(cl, i, min_ts)), 0)
    else:
        start_index = max(len(files) - 3, 0)
    scan_start = process = files[start_index].file_from_offset
    last_seen: dict[tuple[str, int], int] = {}   # (topic, queue) -> last queue offset in the scan
    try:
        for offset, rec in cl.iter_records(process, check_crc=check_crc):
            if rec is None:
                process = cl.queue.find(offset).end_offset
                continue
            if abnormal:
                dispatcher.dispatch_record(rec)
            elif is_dispatchable(rec.sys_flag):
                last_seen[rec.topic, rec.queue_id] = rec.queue_offset
            process = offset + rec.total_size
            cl.last_store_timestamp = max(cl.last_store_timestamp, rec.store_timestamp)
    except CorruptStoreError:
        pass   # a torn or damaged tail: everything from ``process`` on is cut (spec 4.4 step 3)
    cl.queue.truncate_dirty(process)
    if max_cq_phys >= process or abnormal or repaired:
        for cq in queues:
            cq.truncate_dirty_logic_files(process)
    # 4.x reput catch-up: records beyond every CQ's end get their units now; queues whose tail was
    # cut or lost (they end before the last record of theirs the scan saw) are replayed from their end.
    reput = max(max((cq.max_physic_offset for cq in queues), default=0), cl.queue.min_offset())
    if abnormal:
        reput = max(reput, process)     # the scan dispatched everything from scan_start on
        lagging = [cq for cq in repaired if cq.max_physic_offset < scan_start]
    else:
        lagging = [cq for cq in queues if cq in repaired
                   or last_seen.get((cq.topic, cq.queue_id), -1) >= cq.max_offset()]
    for cq in lagging:
        reput = min(reput, max(cq.max_physic_offset, cl.queue.min_offset()))
    if reput < process:
        for _, rec in cl.iter_records(reput, check_crc=False):
            if rec is None:
                continue
            if rec.physical_offset >= process:
                break
            dispatcher.dispatch_record(rec)
    return process
