"""The 4 KiB ``checkpoint`` file (spec 4.1): three big-endian int64 timestamps at 0, 8 and 16.

* physicMsgTimestamp: store time of the last commit-log message known flushed;
* logicsMsgTimestamp: store time of the last message written to a consume queue;
* indexMsgTimestamp: unused here (we keep no index files), preserved as found.

Abnormal recovery starts from the newest commit-log file whose first message is older than
``min_timestamp()`` (3 s safety margin).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from rocketstream.errors import CorruptStoreError, StoreError

CHECKPOINT_SIZE = 4096
_Q = struct.Struct(">q")
PHYSIC, LOGICS, INDEX = 0, 8, 16


class StoreCheckpoint:
    """Writer: mapped read-write, created when missing. Reader: a snapshot, never creates the file."""

    def __init__(self, path: Path, *, read_only: bool) -> None:
        self.path = path
        self.read_only = read_only
        self._mm: mmap.mmap | None = None
        self._values = [0, 0, 0]
        try:
            if read_only:
                self._load_snapshot()
            else:
                self._open_writable()
        except OSError as exc:
            raise StoreError(f"cannot open checkpoint: {exc}", path=path) from exc

    def _load_snapshot(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        self._check_length(len(data))
        self._values = [_Q.unpack_from(data, pos)[0] for pos in (PHYSIC, LOGICS, INDEX)]

    def _open_writable(self) -> None:
        if not self.path.exists():
            tmp = self.path.with_name(self.path.name + ".tmp")
            with open(tmp, "wb") as f:
                f.write(bytes(CHECKPOINT_SIZE))
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, self.path)
        with open(self.path, "r+b") as f:
            self._check_length(os.fstat(f.fileno()).st_size)
            self._mm = mmap.mmap(f.fileno(), CHECKPOINT_SIZE)

    def _check_length(self, n: int) -> None:
        if n != CHECKPOINT_SIZE:
            raise CorruptStoreError(f"checkpoint has length {n}, expected {CHECKPOINT_SIZE}", path=self.path)

    def _get(self, pos: int) -> int:
        if self._mm is not None:
            return _Q.unpack_from(self._mm, pos)[0]
        return self._values[pos // 8]

    def _set(self, pos: int, value: int) -> None:
        if self._mm is None:
            raise StoreError("checkpoint is read-only", path=self.path)
        _Q.pack_into(self._mm, pos, value)

    physic_msg_timestamp = property(lambda self: self._get(PHYSIC), lambda self, v: self._set(PHYSIC, v))
    logics_msg_timestamp = property(lambda self: self._get(LOGICS), lambda self, v: self._set(LOGICS, v))
    index_msg_timestamp = property(lambda self: self._get(INDEX), lambda self, v: self._set(INDEX, v))

    def min_timestamp(self) -> int:
        """min(physic, logics) - 3000, at least 0 (spec 4.1 derived values)."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()

    def close(self) -> None:
        if self._mm is not None:
            self._mm.flush()
            self._mm.close()
            self._mm = None
