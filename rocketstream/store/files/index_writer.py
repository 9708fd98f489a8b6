"""The put side of ``index/`` (``IndexService.buildIndex``, ``IndexFile.putKey``, ``IndexHeader``): what a
writer keeps up to date for every record it dispatches, byte for byte as RocketMQ 4.9.8 writes it, so
that a Java broker started over the store reads our index files as its own (the layout is in
index_file.py).

Per record (``IndexService.buildIndex``): nothing for a ROLLBACK record (PREPARED ones are indexed,
as in Java) or one below the current file's endPhyOffset; else the key ``topic#UNIQ_KEY`` (when the
record has one) and ``topic#k`` for every non-empty ``k`` of KEYS split on " "
(``MessageConst.KEY_SEPARATOR``), in that order. Per key (``IndexFile.putKey``): the entry at number
indexCount (hash, commit-log offset, seconds since the file's beginTimestamp, previous entry of the
slot), the slot, then the header (begin values on the first entry, hashSlotCount when the slot was
empty, indexCount, endPhyOffset = the record's start offset, endTimestamp). The first entry of a file
takes its timeDiff from the beginTimestamp the file was created with (0, or the previous file's end
time) before beginTimestamp becomes its own store time: a quirk of putKey we keep.

A file is full at ``indexCount >= maxIndexNum``; the next key goes to a new file named by the current
time (``UtilAll.timeMillisToHumanString``: local ``yyyyMMddHHmmssSSS``), created sparse at
``40 + 4 * maxHashSlotNum + 20 * maxIndexNum`` bytes (420,000,040 with RocketMQ's defaults) with begin
and end values set to the full file's end values. The full file is flushed and its endTimestamp
becomes the checkpoint's indexMsgTimestamp, checkpoint flushed (``IndexService.flush``) - the only
time indexMsgTimestamp moves, as in Java.

Batches are put with numpy (``IndexFileWriter.put_many``: one pass over the entries, slot chains of a
batch resolved by a stable sort on the slot); a put of a few keys takes the scalar path
(``put_one``). Both write the same bytes (tests/store/test_index_writer.py).

Recovery (``IndexWriter.truncate`` / ``IndexWriter.resume_offset``): entries pointing at or beyond the
recovered commit-log end are removed newest first, each slot set back to the entry's previous one (a
power loss can leave index pages that outlived the commit-log records they point to; a new record at
the same offset would otherwise be skipped as already indexed). A last file that does not hold what
putKey writes is deleted and rebuilt from the commit log, as Java's abnormal start does with every
file newer than indexMsgTimestamp; files that pass are kept (never destroy what a reader can read).
"""

from __future__ import annotations

import functools
import logging
import mmap
import operator
import os
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rocketstream import codec
from rocketstream.errors import CorruptStoreError, StoreConfigError, StoreError
from rocketstream.store.files.checkpoint import StoreCheckpoint
from rocketstream.store.files.durable import os_errors
from rocketstream.store.files.index_file import (
    DEFAULT_MAX_HASH_SLOT_NUM,
    DEFAULT_MAX_INDEX_NUM,
    ENTRY_DTYPE,
    HASH_SLOT_SIZE,
    INDEX_HEADER_SIZE,
    INDEX_SIZE,
    IndexGeometry,
    IndexHeader,
    structure_problem,
)

log = logging.getLogger(__name__)

KEY_SEPARATOR = " "            # MessageConst.KEY_SEPARATOR
_INT_MAX = 0x7FFFFFFF
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")
_SCALAR_MAX = 8                # up to this many keys in one put: struct, not numpy
Int64Array = npt.NDArray[np.int64]
# put_records' arguments for one put: topic, UNIQ_KEY and KEYS of each record, record offsets, store time
IndexRecords = tuple[str, Sequence[str | None], Sequence[str | None] | None, Sequence[int], int]


def human_time_name(ms: int) -> str:
    """UtilAll.timeMillisToHumanString: local time as yyyyMMddHHmmssSSS."""
    t = time.localtime(ms // 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ms % 1000:03d}"


# --- hashing ------------------------------------------------------------------------------------
def key_hashes(keys: Sequence[str]) -> Int64Array:
    """IndexFile.indexKeyHashMethod of each key (abs of String.hashCode, 0 for Integer.MIN_VALUE),
    vectorized: the keys' UTF-16 code units right-aligned in a zero-padded matrix (leading zeros add
    nothing to 31*h + c) times the powers of 31, in uint32 arithmetic that wraps like Java's int."""
    n = len(keys)
    if not n:
        return np.zeros(0, dtype=np.int64)
    text = "".join(keys)
    # lengths as a list first: max/min of a batch's few keys cost less as builtins than as numpy reductions
    if text.isascii():
        units: np.ndarray = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        len_list = list(map(len, keys))
    else:
        encoded = [k.encode("utf-16-be", "surrogatepass") for k in keys]
        units = np.frombuffer(b"".join(encoded), dtype=">u2")
        len_list = [len(e) // 2 for e in encoded]
    width = max(len_list)
    if width == 0:
        return np.zeros(n, dtype=np.int64)
    if min(len_list) == width:
        matrix = units.astype(np.uint32).reshape(n, width)
    else:
        lens = np.array(len_list, dtype=np.int64)
        matrix = np.zeros((n, width), dtype=np.uint32)
        ends = np.cumsum(lens)
        pad = np.repeat(width - lens, lens)
        col = np.arange(len(units), dtype=np.int64) - np.repeat(ends - lens, lens) + pad
        matrix[np.repeat(np.arange(n), lens), col] = units
    h: Int64Array = np.abs(matrix.dot(_powers_of_31(width)).view(np.int32).astype(np.int64))
    h[h > _INT_MAX] = 0
    return h


@functools.lru_cache(maxsize=256)
def _powers_of_31(width: int) -> np.ndarray:
    """31**(width-1) .. 31**0 mod 2**32 (String.hashCode's weights of a key of ``width`` code units), kept per
    width: a batch's keys mostly share one or two widths, and the powers cost more than the hashing."""
    powers = np.array([pow(31, width - 1 - j, 2**32) for j in range(width)], dtype=np.uint32)
    powers.flags.writeable = False
    return powers


def record_keys(topic: str, uniq_key: str | None, keys: str | None) -> list[str]:
    """IndexService.buildIndex's keys of one record, in the order it puts them."""
    out = [] if uniq_key is None else [f"{topic}#{uniq_key}"]
    if keys:
        out += [f"{topic}#{k}" for k in keys.split(KEY_SEPARATOR) if k]
    return out


def batch_keys(topic: str, uniq_keys: Sequence[str | None], keys: Sequence[str | None] | None,
               offsets: Sequence[int]) -> tuple[list[str], list[int]]:
    """All index keys of a batch of records (``record_keys`` of each) and the offset each belongs to."""
    out: list[str] = []
    where: list[int] = []
    prefix = topic + "#"
    n = len(offsets)
    if None not in uniq_keys:   # the common batch: list comprehensions instead of the loop below
        uniq = [prefix + u for u in uniq_keys]   # type: ignore[operator]
        if keys is None:
            return uniq, list(offsets)
        if None not in keys and "" not in keys and KEY_SEPARATOR not in "".join(keys):   # type: ignore[arg-type]
            out = [""] * (2 * n)
            out[0::2] = uniq
            out[1::2] = [prefix + k for k in keys]   # type: ignore[operator]
            where = [0] * (2 * n)
            where[0::2] = where[1::2] = list(offsets)
            return out, where
    if keys is None:
        for u, off in zip(uniq_keys, offsets, strict=True):
            if u is not None:
                out.append(prefix + u)
                where.append(off)
        return out, where
    for u, k, off in zip(uniq_keys, keys, offsets, strict=True):
        if u is not None:
            out.append(prefix + u)
            where.append(off)
        if k:
            for part in k.split(KEY_SEPARATOR) if KEY_SEPARATOR in k else (k,):
                if part:
                    out.append(prefix + part)
                    where.append(off)
    return out, where


# --- one file -----------------------------------------------------------------------------------
class IndexFileWriter:
    """One index file mapped read-write, with its header held in memory as ``IndexHeader`` does."""

    def __init__(self, path: Path, geometry: IndexGeometry, *, create: bool, end_phy: int = 0,
                 end_timestamp: int = 0) -> None:
        self.path = path
        self.geometry = geometry
        size = geometry.file_size()
        with os_errors("cannot open index file", path):
            fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o644)
            try:
                if create:
                    os.ftruncate(fd, size)   # sparse, as RandomAccessFile.setLength makes it
                elif os.fstat(fd).st_size != size:
                    raise StoreConfigError(f"index file of {os.fstat(fd).st_size} bytes does not fit "
                                           f"maxHashSlotNum={geometry.max_hash_slot_num} "
                                           f"maxIndexNum={geometry.max_index_num}", path=path)
                self.mm = mmap.mmap(fd, size)
            finally:
                os.close(fd)
        # the slot table and the entries as arrays over the mapping, made once (put_many's per-put views of
        # a 420 MB mapping cost more than its few keys); close() drops them before it unmaps
        self._table: np.ndarray | None = np.frombuffer(self.mm, dtype=">i4", count=geometry.max_hash_slot_num,
                                                       offset=INDEX_HEADER_SIZE)
        self._entries: np.ndarray | None = np.frombuffer(self.mm, dtype=ENTRY_DTYPE, count=geometry.max_index_num,
                                                         offset=geometry.entry_base)
        h = IndexHeader.unpack(self.mm)   # a new file is zeros: indexCount 0 is read as 1 (IndexHeader.load)
        self.begin_timestamp, self.end_timestamp = h.begin_timestamp, h.end_timestamp
        self.begin_phy, self.end_phy = h.begin_phy_offset, h.end_phy_offset
        self.hash_slot_count, self.index_count = h.hash_slot_count, h.index_count
        if create:   # IndexFile's constructor: begin/end from the previous file, written through
            if end_phy > 0:
                self.begin_phy = self.end_phy = end_phy
                _Q.pack_into(self.mm, 16, end_phy)
                _Q.pack_into(self.mm, 24, end_phy)
            if end_timestamp > 0:
                self.begin_timestamp = self.end_timestamp = end_timestamp
                _Q.pack_into(self.mm, 0, end_timestamp)
                _Q.pack_into(self.mm, 8, end_timestamp)

    @property
    def is_full(self) -> bool:
        """IndexFile.isWriteFull."""
        return self.index_count >= self.geometry.max_index_num

    @property
    def entries(self) -> int:
        return self.index_count - 1

    def _write_header(self, first_phy: int | None, first_ts: int | None) -> None:
        mm = self.mm
        if first_phy is not None and first_ts is not None:
            self.begin_phy, self.begin_timestamp = first_phy, first_ts
            _Q.pack_into(mm, 16, first_phy)
            _Q.pack_into(mm, 0, first_ts)
        _I.pack_into(mm, 32, self.hash_slot_count)
        _I.pack_into(mm, 36, self.index_count)
        _Q.pack_into(mm, 24, self.end_phy)
        _Q.pack_into(mm, 8, self.end_timestamp)

    def put_one(self, key_hash: int, phy: int, store_timestamp: int) -> bool:
        """IndexFile.putKey for one key (already hashed); False when the file is full."""
        count = self.index_count
        if count >= self.geometry.max_index_num:
            return False
        mm = self.mm
        slot_at = INDEX_HEADER_SIZE + (key_hash % self.geometry.max_hash_slot_num) * HASH_SLOT_SIZE
        (slot_value,) = _I.unpack_from(mm, slot_at)
        if slot_value <= 0 or slot_value > count:
            slot_value = 0
        begin = self.begin_timestamp
        diff = store_timestamp - begin
        diff = abs(diff) // 1000 * (1 if diff >= 0 else -1)   # Java long division truncates
        diff = 0 if begin <= 0 or diff < 0 else min(diff, _INT_MAX)
        _ENTRY.pack_into(mm, self.geometry.entry_base + count * INDEX_SIZE, key_hash, phy, diff, slot_value)
        _I.pack_into(mm, slot_at, count)
        first = count <= 1
        if slot_value == 0:
            self.hash_slot_count += 1
        self.index_count = count + 1
        self.end_phy, self.end_timestamp = phy, store_timestamp
        self._write_header(phy if first else None, store_timestamp if first else None)
        return True

    def put_many(self, hashes: Int64Array, phys: Int64Array, timestamps: Int64Array, *, one_time: bool = False) -> int:
        """putKey for each key in order, vectorized; returns how many fitted (the rest need a new file).
        ``one_time``: the caller knows every timestamp is the same (one put's store time)."""
        count = self.index_count
        k = min(len(hashes), self.geometry.max_index_num - count)
        if k <= 0:
            return 0
        hashes, phys, timestamps = hashes[:k], phys[:k], timestamps[:k]
        numbers = np.arange(count, count + k, dtype=np.int64)
        geometry = self.geometry
        slots = hashes % geometry.max_hash_slot_num
        table = self._table
        assert table is not None, "put on a closed index file"
        current = table[slots].astype(np.int64)
        valid = (current > 0) & (current <= numbers)   # putKey: a slot value > indexCount is no chain
        ts0 = int(timestamps[0])
        if count > 1 and ts0 == int(timestamps[-1]) and len(set(slots.tolist())) == k \
                and (one_time or k < 3 or not np.any(timestamps != ts0)):
            # the common put (one store time, a file that has its beginTimestamp, no two keys on one slot):
            # one time difference, and each key's previous entry is its slot's current one
            begin = self.begin_timestamp
            diffs: Int64Array | int = 0 if begin <= 0 else min(max((ts0 - begin) // 1000, 0), _INT_MAX)
            prev = np.where(valid, current, 0)
            new_slots = k - int(np.count_nonzero(valid))
            table[slots] = numbers
            return self._finish_many(count, k, hashes, phys, timestamps, diffs, prev, new_slots, table)
        # beginTimestamp each put sees: the file's own, except that the first entry of a file sets it
        begins = np.full(k, self.begin_timestamp, dtype=np.int64)
        if count <= 1 and k > 1:
            begins[1:] = timestamps[0]
        diffs = np.where(begins <= 0, 0, np.clip((timestamps - begins) // 1000, 0, _INT_MAX))
        order = np.argsort(slots, kind="stable")
        sorted_slots = slots[order]
        first_of_slot = np.r_[True, sorted_slots[1:] != sorted_slots[:-1]]
        last_of_slot = np.r_[first_of_slot[1:], True]
        sorted_numbers = numbers[order]
        prev_sorted = np.where(first_of_slot, np.where(valid[order], current[order], 0),
                               np.r_[0, sorted_numbers[:-1]])
        prev = np.empty(k, dtype=np.int64)
        prev[order] = prev_sorted
        new_slots = int(np.count_nonzero(first_of_slot & ~valid[order]))
        table[sorted_slots[last_of_slot]] = sorted_numbers[last_of_slot]
        return self._finish_many(count, k, hashes, phys, timestamps, diffs, prev, new_slots, table)

    def _finish_many(self, count: int, k: int, hashes: Int64Array, phys: Int64Array, timestamps: Int64Array,
                     diffs: Int64Array | int, prev: Int64Array, new_slots: int, table: np.ndarray) -> int:
        """put_many's entries and header, once the slots are updated."""
        assert self._entries is not None, "put on a closed index file"
        entries = self._entries[count:count + k]
        entries["key_hash"] = hashes
        entries["phy_offset"] = phys
        entries["time_diff"] = diffs
        entries["prev_index"] = prev
        del table, entries
        first = count <= 1
        self.hash_slot_count += new_slots
        self.index_count = count + k
        self.end_phy, self.end_timestamp = int(phys[-1]), int(timestamps[-1])
        self._write_header(int(phys[0]) if first else None, int(timestamps[0]) if first else None)
        return k

    def problem(self) -> str | None:
        """What this file holds that putKey would not have written (None: sound)."""
        header = IndexHeader.unpack(self.mm)
        return structure_problem(self.mm, self.geometry.file_size(), header, self.geometry.max_hash_slot_num)

    def remove_from(self, end: int) -> tuple[int, int] | None:
        """Remove the entries whose commit-log offset is >= ``end``, newest first, putting each slot back
        to the entry's previous one. Returns (removed, offset of the last entry kept or -1) or None when
        nothing was removed. The caller sets endTimestamp (``set_end``)."""
        count = self.index_count
        if count <= 1:
            return None
        geometry = self.geometry
        written = np.frombuffer(self.mm, dtype=ENTRY_DTYPE, count=count - 1, offset=geometry.entry_base + INDEX_SIZE)
        offsets = written["phy_offset"].astype(np.int64)
        keep = int(np.searchsorted(offsets, end, side="left"))   # offsets never decrease
        if keep == count - 1:
            del written
            return None
        table = np.frombuffer(self.mm, dtype=">i4", count=geometry.max_hash_slot_num, offset=INDEX_HEADER_SIZE)
        slot_count = self.hash_slot_count
        for i in range(count - 2, keep - 1, -1):      # newest first: slot chains unwind exactly
            number = i + 1
            slot = int(written["key_hash"][i]) % geometry.max_hash_slot_num
            if int(table[slot]) == number:
                prev = int(written["prev_index"][i])
                table[slot] = prev
                if prev == 0:
                    slot_count -= 1
        removed = count - 1 - keep
        last_kept = int(offsets[keep - 1]) if keep else -1
        start = geometry.entry_base + (keep + 1) * INDEX_SIZE
        self.mm[start:start + removed * INDEX_SIZE] = bytes(removed * INDEX_SIZE)
        del written, table
        self.hash_slot_count = max(slot_count, 0)
        self.index_count = keep + 1
        return removed, last_kept

    def set_end(self, phy: int, timestamp: int) -> None:
        self.end_phy, self.end_timestamp = phy, timestamp
        if self.index_count <= 1:
            self.begin_phy, self.begin_timestamp = phy, timestamp
            _Q.pack_into(self.mm, 16, phy)
            _Q.pack_into(self.mm, 0, timestamp)
        self._write_header(None, None)

    def flush(self) -> None:
        self.mm.flush()

    def close(self) -> None:
        self._table = self._entries = None   # no array may view the mapping when it is unmapped
        if not self.mm.closed:
            self.mm.close()


# --- all files (IndexService's put side) -----------------------------------------------------------
def _index_paths(directory: Path) -> list[Path]:
    """The files of ``index/`` in IndexService.load's order (names sorted)."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    return [directory / n for n in names if (directory / n).is_file()]


class IndexWriter:
    """``IndexService`` for a writer: the newest file of ``<root>/index`` open read-write; new files
    created as the newest fills up. ``max_hash_slot_num`` / ``max_index_num``: broker.conf's settings
    (None: not configured - the existing files' geometry, else RocketMQ's defaults)."""

    _BUFFER = 1 << 16   # keys per put_many call while replaying the commit log

    def __init__(self, root: Path, checkpoint: StoreCheckpoint, *, max_hash_slot_num: int | None = None,
                 max_index_num: int | None = None) -> None:
        self.directory = root / "index"
        self.checkpoint = checkpoint
        self._configured = (max_hash_slot_num, max_index_num)
        self.paths: list[Path] = []
        self.current: IndexFileWriter | None = None
        self._new_geometry = IndexGeometry(max_hash_slot_num or DEFAULT_MAX_HASH_SLOT_NUM,
                                           max_index_num or DEFAULT_MAX_INDEX_NUM, "configured")

    # --- opening --------------------------------------------------------------------------------
    def load(self, *, abnormal: bool) -> None:
        """Open the newest file (IndexService.load). After an abnormal exit the newest file is checked
        against what putKey writes; one that fails is deleted, to be rebuilt by recovery (Java deletes
        every file newer than indexMsgTimestamp then; we keep the ones that are sound)."""
        from rocketstream.store.files.index_file import IndexFile

        self.paths = _index_paths(self.directory)
        slots, entries = self._configured
        configured = {k: v for k, v in (("max_hash_slot_num", slots), ("max_index_num", entries)) if v is not None}
        while self.paths:
            path = self.paths[-1]
            try:
                with IndexFile(path, **configured) as reader:
                    geometry, size, header = reader.geometry, reader.size, reader.read_header()
            except (CorruptStoreError, StoreConfigError) as exc:
                if not abnormal:
                    raise
                self._discard(path, f"{exc}")
                continue
            if size == 0:             # created but never mapped (a crash): IndexFile's mapping extends it
                geometry = self._new_geometry
                with os_errors("cannot extend index file", path):
                    os.truncate(path, geometry.file_size())
            elif geometry is None:    # no entries, geometry not decidable from its size: the settings decide
                geometry = self._new_geometry
                if geometry.file_size() != size:
                    raise StoreConfigError(
                        f"index file of {size} bytes holds no entry and does not fit maxHashSlotNum="
                        f"{geometry.max_hash_slot_num} maxIndexNum={geometry.max_index_num}; set both in "
                        "the store's broker.conf", path=path)
            if not configured:        # new files continue the store's own geometry
                self._new_geometry = IndexGeometry(geometry.max_hash_slot_num, geometry.max_index_num,
                                                   geometry.source)
            writer = IndexFileWriter(path, geometry, create=False)
            problem = writer.problem() if abnormal and header.index_count > 1 else None
            if problem is not None:
                writer.close()
                self._discard(path, problem)
                continue
            self.current = writer
            break

    def _discard(self, path: Path, why: str) -> None:
        log.warning("index file %s does not hold what IndexFile.putKey writes (%s) after an abnormal exit: "
                    "deleted, its keys are indexed again from the commit log", path, why)
        with os_errors("cannot delete index file", path, missing_ok=True):
            os.unlink(path)
        self.paths.pop()

    # --- recovery -------------------------------------------------------------------------------
    def truncate(self, end: int, store_timestamp_at: Callable[[int], int]) -> None:
        """Remove entries pointing at or beyond the commit log's end ``end`` (newest files first);
        ``store_timestamp_at(offset)`` gives the store time of a record (the new endTimestamp)."""
        if self.current is None:
            return
        emptied: list[IndexFileWriter] = []
        files = [self.current]
        i = len(self.paths) - 1
        kept: tuple[int, int] | None = None
        while True:
            f = files[-1]
            if f.end_phy < end and f.index_count > 1:
                kept = (f.end_phy, f.end_timestamp)
                break
            result = f.remove_from(end)
            if result is not None:
                log.warning("index file %s: %d entries pointed at or beyond the commit log's end %d: removed",
                            f.path, result[0], end)
            if f.index_count > 1:
                last = result[1] if result is not None else f.end_phy
                f.set_end(last, store_timestamp_at(last))
                kept = (f.end_phy, f.end_timestamp)
                break
            emptied.append(f)
            i -= 1
            if i < 0:
                break
            older = _open_older(self.paths[i], self._configured)
            if older is None:
                break
            files.append(older)
        for f in emptied:
            phy, ts = kept if kept is not None else (0, 0)
            if f.end_phy >= end or f.end_phy != phy:
                f.set_end(phy, ts)
        for f in files[1:]:
            f.close()

    def resume_offset(self) -> int | None:
        """Commit-log offset of the last record indexed (IndexFile endPhyOffset); None when nothing was
        ever indexed here (recovery then indexes from the commit log's first record)."""
        f = self.current
        if f is None or (f.index_count <= 1 and f.end_phy <= 0 and len(self.paths) <= 1):
            return None
        return f.end_phy

    def keys_done_at_end(self) -> int:
        """How many keys of the record at endPhyOffset the index holds: a crash (or a deleted file)
        may have left a record's keys half put; replay puts the rest. Counted in the newest file, or in
        the one before when the newest holds no entry yet (it was created for that record's next key)."""
        f = self.current
        if f is None:
            return 0
        from rocketstream.store.files.index_file import IndexFile

        if f.index_count > 1:
            return _count_at(np.frombuffer(f.mm, dtype=ENTRY_DTYPE, count=f.index_count - 1,
                                           offset=f.geometry.entry_base + INDEX_SIZE), f.end_phy)
        if len(self.paths) < 2:
            return 0
        slots, entries = self._configured
        kw = {k: v for k, v in (("max_hash_slot_num", slots), ("max_index_num", entries)) if v is not None}
        with IndexFile(self.paths[-2], **kw) as older:
            return _count_at(older.entries(), f.end_phy)

    # --- putting --------------------------------------------------------------------------------
    def _file(self) -> IndexFileWriter:
        """IndexService.getAndCreateLastIndexFile: the newest file, or a new one when it is full."""
        f = self.current
        if f is not None and not f.is_full:
            return f
        end_phy = end_ts = 0
        if f is not None:        # IndexService.flush of the full file: indexMsgTimestamp, checkpoint flushed
            end_phy, end_ts = f.end_phy, f.end_timestamp
            f.flush()
            if end_ts > 0:
                self.checkpoint.index_msg_timestamp = end_ts
                self.checkpoint.flush()
        self.directory.mkdir(parents=True, exist_ok=True)
        ms = time.time_ns() // 1_000_000
        name = human_time_name(ms)
        while (self.paths and name <= self.paths[-1].name) or (self.directory / name).exists():
            ms += 1                 # names sort as IndexService.load orders the files: never behind the last
            name = human_time_name(ms)
        path = self.directory / name
        new = IndexFileWriter(path, self._new_geometry, create=True, end_phy=end_phy, end_timestamp=end_ts)
        if f is not None:
            f.close()
        self.paths.append(path)
        self.current = new
        return new

    def ensure_file(self) -> None:
        """buildIndex gets (or creates) the newest file before it looks at the record."""
        if self.current is None or self.current.is_full:
            self._file()

    @property
    def end_phy(self) -> int:
        return self._file().end_phy

    def put(self, keys: Sequence[str], offsets: Sequence[int] | Int64Array,
            timestamps: int | Sequence[int] | Int64Array) -> None:
        """putKey for each key (``offsets``: the commit-log offset of each key's record, ascending)."""
        n = len(keys)
        if not n:
            self.ensure_file()
            return
        if n <= _SCALAR_MAX:
            ts_list = [timestamps] * n if isinstance(timestamps, int) else list(map(int, timestamps))
            hashes = [_scalar_hash(k) for k in keys]
            for h, off, ts in zip(hashes, offsets, ts_list, strict=True):
                f = self._file()
                if not f.put_one(h, int(off), ts):
                    self._file().put_one(h, int(off), ts)
            return
        one_time = isinstance(timestamps, int)
        self.put_hashed(key_hashes(keys), np.asarray(offsets, dtype=np.int64),
                        np.full(n, timestamps, dtype=np.int64) if one_time else np.asarray(timestamps, dtype=np.int64),
                        one_time=one_time)

    def put_hashed(self, hashes: Int64Array, offsets: Int64Array, timestamps: Int64Array, *,
                   one_time: bool = False) -> None:
        done = 0
        while done < len(hashes):
            done += self._file().put_many(hashes[done:], offsets[done:], timestamps[done:], one_time=one_time)

    def put_records(self, topic: str, uniq_keys: Sequence[str | None], keys: Sequence[str | None] | None,
                    offsets: Sequence[int], store_timestamp: int) -> None:
        """buildIndex for records of one put (one topic, one store time); records below the current
        file's endPhyOffset are skipped, as buildIndex skips them."""
        f = self._file()
        if offsets and offsets[0] < f.end_phy:
            skip = int(np.searchsorted(np.asarray(offsets), f.end_phy, side="left"))
            uniq_keys, offsets = uniq_keys[skip:], offsets[skip:]
            keys = keys[skip:] if keys is not None else None
        names, where = batch_keys(topic, uniq_keys, keys, offsets)
        self.put(names, where, store_timestamp)

    def put_many_records(self, puts: Sequence[IndexRecords]) -> None:
        """:meth:`put_records` of several puts, in order, with one :meth:`put` (what a deferred dispatch
        collected: dispatch.py): the same entries as one call per put, the per-call costs paid once."""
        if len(puts) == 1:
            self.put_records(*puts[0])
            return
        end_phy = self._file().end_phy
        names: list[str] = []
        where: list[int] = []
        times: list[int] = []
        for topic, uniq_keys, keys, offsets, store_timestamp in puts:
            if offsets and offsets[0] < end_phy:   # as put_records skips them (offsets ascend across puts)
                skip = int(np.searchsorted(np.asarray(offsets), end_phy, side="left"))
                uniq_keys, offsets = uniq_keys[skip:], offsets[skip:]
                keys = keys[skip:] if keys is not None else None
            n, w = batch_keys(topic, uniq_keys, keys, offsets)
            names += n
            where += w
            times += [store_timestamp] * len(n)
        if not names:
            self.ensure_file()
            return
        self.put(names, where, times)

    def replay(self, records: Iterable[tuple[int, int, int, str, dict[str, str]]], skip_at_end: int = 0) -> int:
        """buildIndex for records read back from the commit log: (offset, sys_flag, store time, topic,
        properties) each, ascending; returns how many keys were put. ``skip_at_end``: keys of the
        record at endPhyOffset already indexed (``keys_done_at_end``)."""
        names: list[str] = []
        where: list[int] = []
        times: list[int] = []
        total = 0
        end_phy = self._file().end_phy
        for offset, sys_flag, ts, topic, props in records:
            if offset < end_phy or sys_flag & codec.TRANSACTION_MASK == codec.TRANSACTION_ROLLBACK:
                continue
            ks = record_keys(topic, props.get(codec.PROPERTY_UNIQ_KEY), props.get(codec.PROPERTY_KEYS))
            if offset == end_phy and skip_at_end:
                ks = ks[skip_at_end:]
            names += ks
            where += [offset] * len(ks)
            times += [ts] * len(ks)
            if len(names) >= self._BUFFER:
                self.put(names, where, times)
                total += len(names)
                names, where, times = [], [], []
        self.put(names, where, times)
        return total + len(names)

    # --- retention, flushing --------------------------------------------------------------------
    def delete_expired(self, min_offset: int) -> list[Path]:
        """IndexService.deleteExpiredFile: when the oldest file ends below the commit log's first
        offset, delete the files (never the newest) whose endPhyOffset is below it, oldest first."""
        deleted: list[Path] = []
        while len(self.paths) > 1:
            path = self.paths[0]
            with os_errors("cannot read index file", path):
                with open(path, "rb") as fh:
                    raw = fh.read(INDEX_HEADER_SIZE)
            if len(raw) < INDEX_HEADER_SIZE or IndexHeader.unpack(raw).end_phy_offset >= min_offset:
                break
            with os_errors("cannot delete index file", path, missing_ok=True):
                os.unlink(path)
            deleted.append(self.paths.pop(0))
        return deleted

    def flush(self) -> None:
        if self.current is not None:
            self.current.flush()

    def close(self) -> None:
        if self.current is not None:
            self.current.flush()
            self.current.close()
            self.current = None


def _count_at(entries: np.ndarray, offset: int) -> int:
    phy = entries["phy_offset"]
    n = len(phy)
    return n - int(np.searchsorted(phy.astype(np.int64), offset, side="left")) if n else 0


def _scalar_hash(key: str) -> int:
    """indexKeyHashMethod of one key. An ASCII key's String.hashCode is a dot product with the weights
    ``_powers_of_31`` caches, summed in C by ``map`` (no loop per character); and index keys, nearly all
    unique, stay out of ``java_hash``'s cache, which would only churn with them."""
    if key.isascii():
        units = key.encode("ascii")
        h = sum(map(operator.mul, units, _weights_of_31(len(units)))) & 0xFFFFFFFF
        h = abs(h - 0x1_0000_0000 if h & 0x80000000 else h)
    else:
        h = abs(codec.java_hash(key))
    return 0 if h > _INT_MAX else h


@functools.lru_cache(maxsize=256)
def _weights_of_31(width: int) -> tuple[int, ...]:
    return tuple(_powers_of_31(width).tolist())


def _open_older(path: Path, configured: tuple[int | None, int | None]) -> IndexFileWriter | None:
    """An older index file opened read-write (recovery truncation), or None when it cannot be."""
    from rocketstream.store.files.index_file import IndexFile

    slots, entries = configured
    kw = {k: v for k, v in (("max_hash_slot_num", slots), ("max_index_num", entries)) if v is not None}
    try:
        with IndexFile(path, **kw) as reader:
            geometry = reader.geometry
    except (CorruptStoreError, StoreConfigError, StoreError) as exc:
        log.warning("index file %s not truncated: %s", path, exc)
        return None
    if geometry is None:
        return None
    return IndexFileWriter(path, geometry, create=False)
