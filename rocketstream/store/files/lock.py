"""The store's writer lock: RocketMQ's ``lock`` file, locked the way ``DefaultMessageStore.start()``
locks it, and the check a reader makes that someone else holds it."""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
from pathlib import Path

from rocketstream.errors import StoreError, StoreLockedError
from rocketstream.store.files.durable import os_errors

log = logging.getLogger(__name__)
_held_locks: set[str] = set()
_held_guard = threading.Lock()


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
            with os_errors("cannot open lock file", self.path):
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
            try:
                with os_errors("cannot write lock file", self.path):
                    os.pwrite(fd, b"lock", 0)
                    os.fsync(fd)
            except StoreError:
                os.close(fd)
                raise
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


def lock_holder(root: Path) -> int | None:
    """The pid of another process holding ``root``'s ``lock`` (a live broker or writer), else None; a lock
    this process holds counts as free (see ``warn_if_locked``)."""
    path = root / "lock"
    with _held_guard:
        if os.path.realpath(path) in _held_locks:
            return None
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            return _holder(fd)
        finally:
            os.close(fd)


# how a broker's command line reads: Apache RocketMQ's launcher class, or our `rocketstream broker` / `serve`
_JAVA_BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"


def is_broker_process(pid: int) -> bool:
    """Whether process ``pid`` is a broker (Java's BrokerStartup, or ``rocketstream broker``/``serve``) rather
    than a plain writer (``rocketstream produce``, a Spark sink, a script using MessageStore). A process whose
    command line cannot be read (another user's, or no /proc) counts as a broker: the caller must then not
    assume its file commits survive."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True
    words = [a.decode("utf-8", "replace") for a in argv if a]
    if _JAVA_BROKER_MAIN in words:
        return True
    for i, word in enumerate(words):
        if word.endswith("rocketstream") or word in ("rocketstream.cli", "rocketstream.cli:main"):
            rest = words[i + 1:i + 2]
            return bool(rest) and rest[0] in ("broker", "serve")
    return False


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
