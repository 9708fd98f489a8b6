"""Writer start-up and shutdown discipline (spec 4): the ``lock`` file, the ``abort`` marker, and
commit-log recovery (normal from the third-to-last file; abnormal from the file the checkpoint
points at, re-dispatching every record), then consume-queue truncation to the recovered end.
"""

from __future__ import annotations

import fcntl
import logging
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

log = logging.getLogger(__name__)
_held_locks: set[str] = set()
_held_guard = threading.Lock()
_II = struct.Struct(">ii")
_Q = struct.Struct(">q")


class StoreLock:
    """Writer lock: a POSIX record lock on byte 0 of ``lock`` (what RocketMQ's
    ``FileChannel.tryLock(0, 1, false)`` takes), plus an in-process registry because POSIX locks do not
    conflict within one process.

    Exclusion with a Java broker is one-sided. ``DefaultMessageStore.load()`` recovers the store
    (truncates the commit log, rewrites consume queues) *before* ``start()`` tries the lock, so a broker
    started over a store we have open rewrites files under us and only then fails with "Lock failed,MQ
    already started". The lock does stop us from opening a store a running broker has started, and
    two rocketstream writers from sharing one. Readers take no lock; ``warn_if_locked`` logs when one
    opens a store another process holds.
    """

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
                pid = _holder(fd)
                os.close(fd)
                who = f"process {pid}" if pid else "another process"
                raise StoreLockedError(
                    f"{who} holds the store's lock: a running RocketMQ broker (it takes the lock when it "
                    "starts) or another rocketstream writer owns this store. Stop it before writing, or open "
                    "the store read-only", path=self.path) from exc
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


_FLOCK = struct.Struct("hhqqi4x")   # struct flock on 64-bit Linux: type, whence, start, len, pid


def _holder(fd: int) -> int | None:
    """The pid holding a lock on byte 0 of ``fd``'s file (F_GETLK: tests, takes nothing), else None."""
    try:
        got = fcntl.fcntl(fd, fcntl.F_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0))
    except OSError:
        return None
    l_type, _, _, _, pid = _FLOCK.unpack(got)
    return pid if l_type != fcntl.F_UNLCK else None


def warn_if_locked(root: Path) -> int | None:
    """Log a warning when another process holds ``root``'s ``lock``; returns its pid (None: free).

    Opening the lock file read-only and closing it again would drop a lock this process holds on it
    (POSIX close semantics), so a lock registered in this process is never touched."""
    path = root / "lock"
    with _held_guard:
        if os.path.realpath(path) in _held_locks:
            return None
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None   # no lock file: no broker ever started here
        try:
            pid = _holder(fd)
        finally:
            os.close(fd)
    if pid is not None:
        log.warning("%s is locked by process %s: a broker or a rocketstream writer is running on this store; "
                    "reading is safe, but what is read may change under the reader", path, pid)
    return pid


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
