"""One consume queue: dense 20-byte units (commitLogOffset, size, tagsCode) in
``consumequeue/<topic>/<queueId>/`` (RocketMQ's ``ConsumeQueue``; docs/store-format.md).

Writes put every unit of a batch in place except the size field of the batch's first unit, then
that size field (4 aligned bytes). Readers take "size > 0" as "unit present", so a reader that sees
the first unit of a batch sees all of it, and a CQ unit never points at an unwritten record because
the commit-log bytes were copied before ``put`` was called.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from rocketstream.codec import CQ_DTYPE, CQ_UNIT, CQ_UNIT_SIZE, INT32
from rocketstream.errors import CorruptStoreError
from rocketstream.store.files.mapped_file import NAME_LENGTH, FileWriter, MappedFile, MappedFileQueue

PREFILL_SIZE = 0x7FFFFFFF   # size of a pre-fill ("blank") unit (ConsumeQueue.fillPreBlank)
# Batch units reach the file with pwrite: first-touch page faults through the mapping cost several
# times more than the kernel filling the page cache (the mapping sees the same pages).
_PWRITE_MIN = 4096
UNIT = CQ_UNIT_SIZE
_TAIL_CHECK = 16   # units at a queue's end always checked against their records on writer open
log = logging.getLogger(__name__)


def units_of(mf: MappedFile) -> np.ndarray:
    """CQ_DTYPE view over a whole mapped CQ file (no copy)."""
    return mf.array.view(CQ_DTYPE)


_SCAN_FIRST = 1024   # units looked at first by _valid_prefix; later chunks double up to _SCAN_MAX
_SCAN_MAX = 1 << 16
_OFFSET_SIZE = struct.Struct(">qi")   # a unit's commitLogOffset and size (CQ_DTYPE is big-endian)
_SCAN_UNPACKED = 8   # units _valid_prefix unpacks one by one before it turns to numpy


def _valid_prefix(mf: MappedFile, start: int) -> int:
    """Byte position of the first invalid unit at or after ``start`` (file_size if none).

    Scans in growing chunks: a reader refreshes its queues on every call, and a mostly empty
    pre-allocated 6 MB file would otherwise be read to its end each time (about 5 ms)."""
    # the usual answers, "no new unit" or a few new ones, without numpy
    for pos in range(start, min(start + _SCAN_UNPACKED * UNIT, mf.file_size - UNIT + 1), UNIT):
        offset, size = _OFFSET_SIZE.unpack_from(mf.mm, pos)
        if offset < 0 or size <= 0:
            return pos
    units = units_of(mf)
    i, n, chunk = start // UNIT, len(units), _SCAN_FIRST
    while i < n:
        part = units[i:i + chunk]
        valid = (part["offset"] >= 0) & (part["size"] > 0)
        if not valid.all():
            return (i + int(np.argmin(valid))) * UNIT
        i += len(part)
        chunk = min(chunk * 2, _SCAN_MAX)
    return mf.file_size


def _first_invalid(buf: bytes, count: int) -> int:
    """Index of the first of ``count`` units in ``buf`` with commitLogOffset < 0 or size <= 0 (``_valid_prefix``'s
    test); ``count`` when all are valid."""
    for i in range(min(count, _SCAN_UNPACKED)):
        offset, size = _OFFSET_SIZE.unpack_from(buf, i * UNIT)
        if offset < 0 or size <= 0:
            return i
    if count <= _SCAN_UNPACKED:
        return count
    units = np.frombuffer(buf, dtype=CQ_DTYPE, count=count)
    valid = (units["offset"] >= 0) & (units["size"] > 0)
    return count if valid.all() else int(np.argmin(valid))


def _all_readable(buf: bytes, count: int, commit_log_min: int) -> bool:
    """Whether each of ``count`` units in ``buf`` points at a message a reader may return: size > 0 and not a
    pre-fill unit, commitLogOffset at or above the commit log's min (``correct_min_offset``'s test)."""
    if count <= _SCAN_UNPACKED:
        for i in range(count):
            offset, size = _OFFSET_SIZE.unpack_from(buf, i * UNIT)
            if offset < commit_log_min or size <= 0 or size == PREFILL_SIZE:
                return False
        return True
    units = np.frombuffer(buf, dtype=CQ_DTYPE, count=count)
    sizes = units["size"]
    return bool(((units["offset"] >= commit_log_min) & (sizes > 0) & (sizes != PREFILL_SIZE)).all())


def _pread_file(path: str, file_size: int, position: int, length: int) -> bytes | None:
    """``length`` bytes at ``position`` of the consume-queue file ``path``; None when it cannot be opened, is
    not ``file_size`` long, or reads short (the caller then opens the queue as a whole, whose load names the
    fault: ``MappedFile`` checks every file's length)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_size != file_size:
            return None
        data = os.pread(fd, length, position)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) == length else None


def read_units_at(directory: str, file_size: int, start: int, end: int, commit_log_min: int) -> np.ndarray | None:
    """Units [start, end) (logical offsets) of the queue in ``directory``, read positionally without listing the
    directory or mapping a file: unit ``o`` is at byte ``o * 20 % file_size`` of the file named by
    ``o * 20 - o * 20 % file_size`` (20 digits; ``ConsumeQueue.getIndexBuffer``'s geometry). Returned only when
    every unit is one a reader may return (``_all_readable``): under the queue's min (retention deleted its file
    or its commit-log record; a pre-fill unit) or past its end (size 0), or a missing or damaged file, gives
    None, and the caller opens the queue (``ConsumeQueue.load``), whose min and max then decide as before."""
    parts = []
    at, stop = start * UNIT, end * UNIT
    while at < stop:
        file_from = at - at % file_size
        n = min(stop, file_from + file_size) - at
        data = _pread_file(f"{directory}/{file_from:020d}", file_size, at - file_from, n)
        if data is None:
            return None
        parts.append(data)
        at += n
    buf = parts[0] if len(parts) == 1 else b"".join(parts)
    if not _all_readable(buf, end - start, commit_log_min):
        return None
    return np.frombuffer(buf, dtype=CQ_DTYPE)


_PEEK_BYTES = 4096   # the head of a one-file queue peek_bounds reads (204 units)


def peek_bounds(directory: str, file_size: int, commit_log_min: int) -> tuple[int, np.ndarray] | None:
    """``(min, units)``: the min offset of the queue in ``directory`` and its units from there to its end (the
    max is ``min + len(units)``), from one listing and one read of the head of its file, for a queue of one
    file whose first unit is readable and whose end is within the first :data:`_PEEK_BYTES` (the many small
    queues a planner opens at once); the bounds ``ConsumeQueue.load`` (with ``refresh``'s min for
    ``commit_log_min``) would give. None for every other queue — several files (the end scan of the last two),
    no file, names ``_list_names`` would skip or refuse, a first unit under the min, a file of another length
    — which the caller then loads."""
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    if len(names) != 1:
        return None
    name = names[0]
    if len(name) != NAME_LENGTH or not name.isdigit() or int(name) % file_size:
        return None
    file_from = int(name)
    head = _pread_file(f"{directory}/{name}", file_size, 0, min(_PEEK_BYTES, file_size))
    if head is None:
        return None
    count = len(head) // UNIT
    if not _all_readable(head, 1, commit_log_min):
        return None
    end = _first_invalid(head, count)
    if end >= count:
        return None   # the file goes on past the head: the full scan (_valid_prefix) finds the end
    return file_from // UNIT, np.frombuffer(head, dtype=CQ_DTYPE, count=end)


class ConsumeQueue:
    def __init__(self, root: Path, topic: str, queue_id: int, file_size: int, *, read_only: bool,
                 check_units: Callable[[np.ndarray], int], topic_dir: Path | None = None) -> None:
        """``topic_dir``: ``root / "consumequeue" / topic`` when the caller has it already."""
        self.topic = topic
        self.queue_id = queue_id
        self.directory = (topic_dir if topic_dir is not None else root / "consumequeue" / topic) / str(queue_id)
        self.file_size = file_size
        self.read_only = read_only
        self.queue = MappedFileQueue(self.directory, file_size, writable=not read_only)
        self.min_logic_offset = 0       # bytes
        self.max_physic_offset = 0      # end (offset + size) of the last real unit
        self._check_units = check_units
        self._min_key: tuple[str, int] | None = None
        self._writer = FileWriter("consume queue")

    # --- load / recover -----------------------------------------------------------------------
    def load(self, commit_log_min: int = 0) -> None:
        """Map the files. A reader also finds the end and the min for ``commit_log_min``, as ``refresh``
        does, from this one listing: a queue just loaded needs no ``refresh`` before it is read."""
        if not self.read_only:
            self.queue.remove_stale_tmp()
        self.queue.load()
        if self.read_only:
            self._cl_min = commit_log_min
            if self.queue.files:
                for mf in self.queue.files[-2:]:   # older files are full (a batch spans at most a file or two)
                    mf.wrote_position = 0
                self._refresh_reader(listed=True)

    def recover(self) -> None:
        """Spec 3.8: scan from the third-to-last file to the first invalid unit; cut there."""
        files = self.queue.files
        if not files:
            return
        idx = max(len(files) - 3, 0)
        process = files[idx].file_from_offset
        while True:
            mf = files[idx]
            end = _valid_prefix(mf, 0)
            process = mf.file_from_offset + end
            if end < mf.file_size or idx + 1 >= len(files):
                break
            idx += 1
        self.queue.truncate_dirty(process)
        self.max_physic_offset = self._last_real_unit_end()

    def repair_tail(self, commit_log_min: int, scanned_from: int, records: tuple[np.ndarray, np.ndarray]) -> bool:
        """Cut the last file at the first unit that disagrees with the commit log. Returns True
        when something was cut (the caller re-dispatches the cut units from the commit log).

        Disagreeing: a unit that does not start after the previous one ends (dispatch writes units
        in commit-log order); a unit at or after ``scanned_from`` that is not exactly one of the
        ``records`` (starts, sizes) recovery's scan accepted; one of the last ``_TAIL_CHECK`` units
        whose record header (magic, TOTALSIZE, PHYSICALOFFSET) differs, for a queue whose units all
        point before ``scanned_from``. Not every unit is read against its record (``ConsumeQueue.recover``
        checks none: it trusts every unit with offset >= 0 and size > 0). Units below ``commit_log_min``
        are expired by retention, not damaged: they stay (docs/store-format.md). Recovery calls this after
        a clean shutdown too, so a damaged tail is repaired whichever way the store was closed.
        """
        mf = self.queue.last
        if mf is None or not mf.wrote_position:
            return False
        units = units_of(mf)[:mf.wrote_position // UNIT]
        offsets = units["offset"].astype(np.int64)
        sizes = units["size"].astype(np.int64)
        real = np.flatnonzero(sizes != PREFILL_SIZE)
        if not len(real):
            return False
        bad = len(units)
        ro, rs = offsets[real], sizes[real]
        out_of_order = np.flatnonzero(ro[1:] < ro[:-1] + rs[:-1])
        if len(out_of_order):
            bad = int(real[out_of_order[0] + 1])
        scanned = real[ro >= scanned_from]
        if len(scanned):
            starts, totals = records
            at = np.minimum(np.searchsorted(starts, offsets[scanned]), max(len(starts) - 1, 0))
            known = (starts[at] == offsets[scanned]) & (totals[at] == sizes[scanned]) if len(starts) else \
                np.zeros(len(scanned), dtype=bool)
            if not known.all():
                bad = min(bad, int(scanned[np.argmin(known)]))
        tail = real[(ro >= commit_log_min) & (ro < scanned_from)][-_TAIL_CHECK:]
        tail = tail[tail < bad]
        if len(tail) and not len(scanned):   # a queue whose tail the scan did not reach
            first = self._check_units(units[tail])
            if first >= 0:
                bad = int(tail[first])
        if bad >= len(units):
            return False
        u = units[bad]
        log.warning("consume queue %s: unit %d (commitLogOffset %d, size %d) disagrees with the commit log; "
                    "the queue is cut there and rebuilt from the commit log", self.directory,
                    (mf.file_from_offset + bad * UNIT) // UNIT, int(u["offset"]), int(u["size"]))
        self.queue.truncate_dirty(mf.file_from_offset + bad * UNIT)
        if len(self.queue.files) > 1 and not self.queue.files[-1].wrote_position:
            self.queue.delete_last()   # an emptied last file would stop truncate_dirty_logic_files early
        self.max_physic_offset = self._last_real_unit_end()
        return True

    def record_starts_from(self, phy_offset: int) -> np.ndarray:
        """Commit-log offsets of this queue's units at or after ``phy_offset`` (recovery hints)."""
        parts = []
        for mf in reversed(self.queue.files):
            offsets = units_of(mf)[:mf.wrote_position // UNIT]["offset"]
            parts.append(offsets[offsets >= phy_offset])
            if len(offsets) and offsets[0] < phy_offset:
                break
        return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, dtype=np.int64)

    def _last_real_unit_end(self) -> int:
        for mf in reversed(self.queue.files):
            units = units_of(mf)[:mf.wrote_position // UNIT]
            real = np.flatnonzero(units["size"] != PREFILL_SIZE)
            if len(real):
                u = units[real[-1]]
                return int(u["offset"]) + int(u["size"])
        return 0

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop units pointing at or beyond ``phy_offset`` (the recovered commit-log end)."""
        while self.queue.files:
            mf = self.queue.files[-1]
            units = units_of(mf)[:mf.wrote_position // UNIT]
            if not len(units):
                break
            first = units[0]
            if first["size"] > 0 and first["offset"] >= phy_offset and first["size"] != PREFILL_SIZE:
                self.queue.delete_last()
                continue
            keep = (units["offset"] >= 0) & (units["size"] > 0) & (units["offset"] < phy_offset)
            if not keep.all():
                n = int(np.argmin(keep))
                mf.set_positions(n * UNIT)
                mf.zero_tail(n * UNIT)
            break
        if not self.queue.files:
            self.min_logic_offset = 0
        self.max_physic_offset = self._last_real_unit_end()

    def correct_min_offset(self, min_commit_log_offset: int) -> None:
        """First unit of the first file pointing at existing commit-log data becomes the minimum.

        4.x scans the first file; like 5.x, when no unit qualifies and the first file is the last
        one, the queue becomes empty (min = max). Pre-fill units never qualify.
        """
        mf = self.queue.first
        if mf is None:
            self.min_logic_offset = 0
            return
        if mf.wrote_position >= UNIT:   # the usual answer, "the first unit", without numpy
            offset, size = _OFFSET_SIZE.unpack_from(mf.mm, 0)
            if offset >= min_commit_log_offset and 0 < size != PREFILL_SIZE:
                self.min_logic_offset = mf.file_from_offset
                return
        units = units_of(mf)[:mf.wrote_position // UNIT]
        ok = (units["offset"] >= min_commit_log_offset) & (units["size"] > 0) & (units["size"] != PREFILL_SIZE)
        if ok.any():
            self.min_logic_offset = mf.file_from_offset + int(np.argmax(ok)) * UNIT
        elif mf is self.queue.last:
            self.min_logic_offset = self.queue.max_offset()
        else:
            self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset)

    # --- offsets ------------------------------------------------------------------------------
    def _refresh_reader(self, *, listed: bool = False) -> None:
        """Reader: map new files, drop deleted ones, and find the end by scanning units.

        The end is the first invalid unit, searched from the last known end across files. Files
        after a file that is not yet full are unmapped again: a batch that spans two CQ files is
        published by its first unit, which may sit in the earlier file. ``listed``: the files were
        just loaded, the directory is not listed again before the scan.
        """
        while True:
            if not listed:
                self.queue.refresh()
            listed = False
            files = self.queue.files
            if not files:
                return
            cut = None
            for i, mf in enumerate(files):
                if mf.wrote_position < mf.file_size:
                    mf.wrote_position = _valid_prefix(mf, mf.wrote_position)
                    if mf.wrote_position < mf.file_size:
                        cut = i + 1
                        break
            if cut is not None:
                del files[cut:]
                break
            if not self.queue.refresh():    # every file full: look for a next one once more
                break
        key = (files[0].path.name, self._cl_min)
        if key != self._min_key:
            self.correct_min_offset(self._cl_min)
            self._min_key = key

    _cl_min = 0

    def refresh(self, commit_log_min: int) -> None:
        """Reader only: re-read the directory and the end; recompute min for ``commit_log_min``."""
        self._cl_min = commit_log_min
        self._refresh_reader()

    def min_offset(self) -> int:
        low = max(self.min_logic_offset, self.queue.min_offset())
        return min(low, self.queue.max_offset()) // UNIT

    def max_offset(self) -> int:
        return self.queue.max_offset() // UNIT

    # --- writing ------------------------------------------------------------------------------
    def put(self, cq_offset: int, units: np.ndarray) -> None:
        """Write ``units`` (CQ_DTYPE) at logical offset ``cq_offset``
        (``ConsumeQueue.putMessagePositionInfo``, idempotent)."""
        ends = units["offset"].astype(np.int64) + units["size"]
        skip = int(np.searchsorted(ends, self.max_physic_offset, side="right"))
        if skip >= len(units):
            return                        # already dispatched (recovery replay)
        units, cq_offset = units[skip:], cq_offset + skip
        expect = cq_offset * UNIT
        current = self.queue.max_offset()
        prefill = b""
        if not self.queue.files:
            if cq_offset:
                start = expect - expect % self.file_size
                prefill = np.array([(0, PREFILL_SIZE, 0)] * ((expect - start) // UNIT), dtype=CQ_DTYPE).tobytes()
                self.min_logic_offset = expect
                current = start
        elif expect < current:
            dup = (current - expect) // UNIT
            if dup >= len(units):
                return                    # duplicates of units already present
            units, expect = units[dup:], current
        elif expect > current:
            # ConsumeQueue.putMessagePositionInfo: Java logs "logic queue order maybe wrong" and
            # appends at the queue's end; the commit log is never touched because of it.
            log.warning("consume queue %s: unit for queue offset %d but the queue ends at %d; appended at the end",
                        self.directory, cq_offset, current // UNIT)
        data = bytearray(prefill + units.tobytes())
        first_size = bytes(data[8:12])
        data[8:12] = bytes(4)
        self._write(current, data)
        mf0 = self.queue.find(current)
        assert mf0 is not None   # _write just wrote at ``current``
        p0 = current - mf0.file_from_offset
        mf0.mm[p0 + 8:p0 + 12] = first_size        # publish the batch (module docstring)
        self.max_physic_offset = int(ends[-1])

    def put_one(self, cq_offset: int, offset: int, size: int, tags_code: int) -> None:
        """``put`` of a single unit without numpy (the single-message put path)."""
        if offset + size <= self.max_physic_offset:
            return                        # already dispatched (recovery replay)
        current = self.queue.max_offset()
        if not self.queue.files or cq_offset * UNIT != current:
            self.put(cq_offset, np.array([(offset, size, tags_code)], dtype=CQ_DTYPE))
            return
        self._write(current, bytearray(CQ_UNIT.pack(offset, 0, tags_code)))
        mf = self.queue.find(current)
        assert mf is not None   # _write just wrote at ``current``
        p = current - mf.file_from_offset
        mf.mm[p + 8:p + 12] = INT32.pack(size)   # publish (module docstring)
        self.max_physic_offset = offset + size

    def _write(self, at: int, data: bytearray) -> None:
        i = 0
        while i < len(data):
            mf = self.queue.last_file_for(at)
            p = at - mf.file_from_offset
            if p != mf.wrote_position:
                raise CorruptStoreError(f"consume-queue write at position {p} but the file ends at "
                                        f"{mf.wrote_position}", path=mf.path, offset=at)
            n = min(len(data) - i, mf.file_size - p)
            if n >= _PWRITE_MIN:
                self._writer.pwrite(mf, memoryview(data)[i:i + n], p)
            else:
                mf.mm[p:p + n] = data[i:i + n]
            mf.wrote_position = p + n
            i += n
            at += n

    def close_fd(self) -> None:
        self._writer.close()

    def flush(self) -> None:
        for mf in self.dirty_files():
            mf.flush()

    def dirty_files(self) -> list[MappedFile]:
        """The files with unflushed bytes (newest first)."""
        out = []
        for mf in reversed(self.queue.files):
            if mf.flushed_position >= mf.wrote_position:
                break
            out.append(mf)
        return out

    # --- reading ------------------------------------------------------------------------------
    def spans(self, start: int, end: int) -> Iterator[tuple[MappedFile, int, int]]:
        """(file, byte position in it, byte count) covering units [start, end) (logical offsets), one per
        file in order; CorruptStoreError naming the offset where no file covers the range."""
        at, stop = start * UNIT, end * UNIT
        while at < stop:
            mf = self.queue.find(at)
            if mf is None:
                raise CorruptStoreError(f"no consume-queue file covers logical offset {at // UNIT}",
                                        path=self.directory, offset=at)
            p = at - mf.file_from_offset
            n = min(stop - at, mf.file_size - p)
            yield mf, p, n
            at += n

    def raw_units(self, start: int, end: int) -> np.ndarray:
        """Copy of units [start, end) (logical offsets), unvalidated; files must cover the range."""
        parts = [units_of(mf)[p // UNIT:(p + n) // UNIT] for mf, p, n in self.spans(start, end)]
        if not parts:
            return np.empty(0, dtype=CQ_DTYPE)
        return np.concatenate(parts)

    def clamped_units(self, start: int, end: int) -> tuple[int, np.ndarray]:
        """(first offset, units) for [start, end) clamped to [min, max), not checked against the
        commit log: for a reader that checks each unit against the header it decodes anyway."""
        start = max(start, self.min_offset())
        end = min(end, self.max_offset())
        if end <= start:
            return start, np.empty(0, dtype=CQ_DTYPE)
        return start, self.raw_units(start, end)

    def read_units(self, start: int, end: int) -> np.ndarray:
        """Units [start, end) clamped to [min, max), each checked against its record header."""
        start = max(start, self.min_offset())
        end = min(end, self.max_offset())
        if end <= start:
            return np.empty(0, dtype=CQ_DTYPE)
        for _attempt in (0, 1):
            units = self.raw_units(start, end)
            bad = self._check_units(units)
            if bad < 0:
                return units
        at = (start + bad) * UNIT
        mf = self.queue.find(at)
        u = units[bad]
        raise CorruptStoreError(f"consume-queue unit {start + bad} (commitLogOffset {int(u['offset'])}, size "
                                f"{int(u['size'])}) does not match the record header it points to",
                                path=mf.path if mf else self.directory, offset=at)

    def unit(self, index: int) -> tuple[int, int, int]:
        u = self.raw_units(index, index + 1)[0]
        return int(u["offset"]), int(u["size"]), int(u["tags_code"])

    def file_end_index(self, index: int) -> int:
        """First logical offset of the CQ file after the one holding ``index`` (rollNextFile)."""
        per_file = self.file_size // UNIT
        return index + per_file - index % per_file
