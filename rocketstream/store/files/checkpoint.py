"""The 4 KiB ``checkpoint`` file (``StoreCheckpoint``): three big-endian int64 timestamps at 0, 8 and 16.

* physicMsgTimestamp: store time of the last commit-log message known flushed;
* logicsMsgTimestamp: store time of the last message written to a consume queue;
* indexMsgTimestamp: end time of the last full index file, set when it rolls over (index_writer.py).

RocketMQ 5.x adds masterFlushedOffset (24) and confirmPhyOffset (32); we write single fields in place
through the mapping, so every other byte of the page, those fields included, is left as found.
A file of another length is taken as ``StoreCheckpoint`` (4.9.8 and 5.x) takes it: mapped 4 KiB long
(a shorter file is extended with zeros, a reader sees zeros; a longer one keeps its tail).

Abnormal recovery starts from the newest commit-log file whose first message is older than
``min_timestamp()`` (3 s safety margin). ``freeze_recovery_point`` stops a writer from moving
physicMsgTimestamp / logicsMsgTimestamp on, so a later abnormal start re-dispatches from there.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from rocketstream.codec import INT64
from rocketstream.errors import StoreError
from rocketstream.fsutil import write_atomic
from rocketstream.store.files.durable import os_errors
from rocketstream.store.files.mapped_file import datasync_path

CHECKPOINT_SIZE = 4096
PHYSIC, LOGICS, INDEX = 0, 8, 16


class StoreCheckpoint:
    """Writer: mapped read-write, created when missing. Reader: a snapshot, never creates the file."""

    def __init__(self, path: Path, *, read_only: bool) -> None:
        self.path = path
        self.read_only = read_only
        self._mm: mmap.mmap | None = None
        self._values = [0, 0, 0]
        self._frozen = False
        with os_errors("cannot open checkpoint", path):
            if read_only:
                self._load_snapshot()
            else:
                self._open_writable()

    def _load_snapshot(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        data = data[:INDEX + 8].ljust(INDEX + 8, b"\0")
        self._values = [INT64.unpack_from(data, pos)[0] for pos in (PHYSIC, LOGICS, INDEX)]

    def _open_writable(self) -> None:
        if not self.path.exists():
            write_atomic(self.path, bytes(CHECKPOINT_SIZE))
        with open(self.path, "r+b") as f:
            if os.fstat(f.fileno()).st_size < CHECKPOINT_SIZE:   # FileChannel.map extends it the same way
                os.ftruncate(f.fileno(), CHECKPOINT_SIZE)
            self._mm = mmap.mmap(f.fileno(), CHECKPOINT_SIZE)

    def _get(self, pos: int) -> int:
        if self._mm is not None:
            value: int = INT64.unpack_from(self._mm, pos)[0]
            return value
        return self._values[pos // 8]

    def _set(self, pos: int, value: int) -> None:
        if self._mm is None:
            raise StoreError("checkpoint is read-only", path=self.path)
        if self._frozen and pos != INDEX:
            return
        INT64.pack_into(self._mm, pos, value)

    def freeze_recovery_point(self, below: int | None = None) -> None:
        """Keep physicMsgTimestamp / logicsMsgTimestamp: later assignments are ignored until the writer
        closes. ``below``: first lower each of them to ``below - 1`` unless it is already lower."""
        if self._mm is None:
            raise StoreError("checkpoint is read-only", path=self.path)
        self._frozen = True
        if below is not None:
            for pos in (PHYSIC, LOGICS):
                if self._get(pos) >= below:
                    INT64.pack_into(self._mm, pos, below - 1)
            self.flush()

    @property
    def physic_msg_timestamp(self) -> int:
        return self._get(PHYSIC)

    @physic_msg_timestamp.setter
    def physic_msg_timestamp(self, value: int) -> None:
        self._set(PHYSIC, value)

    @property
    def logics_msg_timestamp(self) -> int:
        return self._get(LOGICS)

    @logics_msg_timestamp.setter
    def logics_msg_timestamp(self, value: int) -> None:
        self._set(LOGICS, value)

    @property
    def index_msg_timestamp(self) -> int:
        return self._get(INDEX)

    @index_msg_timestamp.setter
    def index_msg_timestamp(self, value: int) -> None:
        self._set(INDEX, value)

    def min_timestamp(self) -> int:
        """min(physic, logics) - 3000, at least 0 (``StoreCheckpoint.getMinTimestamp``)."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()

    def datasync(self) -> None:
        """``flush`` with the GIL released (fdatasync of the file; see ``MappedFile.datasync``): for a
        thread that syncs while the writer goes on."""
        if self._mm is not None:
            datasync_path(self.path)

    def close(self) -> None:
        if self._mm is not None:
            self._mm.flush()
            self._mm.close()
            self._mm = None
