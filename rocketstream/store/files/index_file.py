"""Read-only IndexFiles (``IndexFile``, ``IndexHeader``): the header, the hash-slot table, the entries, and
RocketMQ's key query (``IndexService.queryOffset``).

One file of ``<root>/index/`` (named by creation time, ``yyyyMMddHHmmssSSS``)::

    +--------------------------- header, 40 bytes (IndexHeader) ---------------------------+
    | beginTimestamp i64 | endTimestamp i64 | beginPhyOffset i64 | endPhyOffset i64        |
    | hashSlotCount i32  | indexCount i32 (next entry number, starts at 1)                  |
    +---------------------- maxHashSlotNum slots, 4 bytes each ----------------------------+
    | slot k = number of the newest entry whose keyHash % maxHashSlotNum == k (0 = empty)   |
    +---------------------- maxIndexNum entries, 20 bytes each (entry 0 unused) ----------+
    | keyHash i32 | commit-log offset i64 | timeDiff i32 (seconds) | prev entry number i32 |
    +--------------------------------------------------------------------------------------+

Nothing here writes: files are mapped ``ACCESS_READ``. The key query follows ``IndexService.queryOffset``
(newest file first, ``maxMsgsNumBatch`` cap) and ``IndexFile.selectPhyOffset`` (slot, then the chain of
previous entries, time filter) and returns commit-log offsets; reading the records, dropping expired ones
and the client-side key check (hash collisions) are ``QueryMixin.query_message``'s job.

**maxHashSlotNum / maxIndexNum are not in the file.** Java takes them from its MessageStoreConfig
(defaults 5,000,000 / 20,000,000; the 4.9.8 test fixture uses 100,000 / 400,000); the file only
satisfies ``size = 40 + 4 * maxHashSlotNum + 20 * maxIndexNum``, one equation for two unknowns. We
resolve them per file (``resolve_geometry``), in this order:

1. given by the caller (``maxHashSlotNum`` / ``maxIndexNum`` of the store's broker.conf): the size must
   agree, else ``StoreConfigError``;
2. an index with no entries (``indexCount <= 1``) answers every query with nothing, whatever its
   geometry: we do not need to know it;
3. the upstream ratio ``maxIndexNum = 4 * maxHashSlotNum`` (both the defaults and the fixture), i.e.
   ``maxHashSlotNum = (size - 40) / 84``, if it passes the structural check below;
4. otherwise from the bytes: the last entry written (number ``indexCount - 1``) holds
   ``endPhyOffset``, so the last non-zero byte of the file lies in it; that pins the entry area's
   start, hence ``maxHashSlotNum``, to a handful of candidates, each of which must pass the check.

The structural check (``structure_problem``) is what ``IndexFile.putKey`` guarantees of every file it
wrote: slot values in ``[1, indexCount)``, as many non-empty slots as ``hashSlotCount``, each slot's
head entry hashing to that slot, entries with non-negative hash and time, ``prev`` below their own
number, non-decreasing offsets, the first and last entries holding ``beginPhyOffset`` and
``endPhyOffset``, nothing written after the last entry. No candidate or more than one passing it is a
``StoreConfigError`` naming the file and asking for the broker.conf settings.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rocketstream.codec import INT32, java_hash
from rocketstream.errors import CorruptStoreError, StoreConfigError, StoreError
from rocketstream.store.files.durable import os_errors
from rocketstream.store.files.mapped_file import data_regions

INDEX_HEADER_SIZE = 40      # IndexHeader.INDEX_HEADER_SIZE
HASH_SLOT_SIZE = 4          # IndexFile.hashSlotSize
INDEX_SIZE = 20             # IndexFile.indexSize
INVALID_INDEX = 0           # IndexFile.invalidIndex
DEFAULT_MAX_HASH_SLOT_NUM = 5_000_000    # MessageStoreConfig.maxHashSlotNum
DEFAULT_MAX_INDEX_NUM = 20_000_000       # MessageStoreConfig.maxIndexNum
MAX_MSGS_NUM_BATCH = 64                  # MessageStoreConfig.maxMsgsNumBatch: IndexService.queryOffset's cap
MAX_TIMESTAMP = (1 << 63) - 1            # Long.MAX_VALUE, the "no upper bound" of a query
_DEFAULT_RATIO = DEFAULT_MAX_INDEX_NUM // DEFAULT_MAX_HASH_SLOT_NUM

_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
ENTRY_DTYPE = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])
_SCAN_CHUNK = 4 << 20


# --- pure helpers -------------------------------------------------------------------------------
def build_key(topic: str, key: str) -> str:
    """IndexService.buildKey: what is hashed for a key of a topic."""
    return f"{topic}#{key}"


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: abs(String.hashCode), 0 for Integer.MIN_VALUE."""
    h = abs(java_hash(key))
    return 0 if h > 0x7FFFFFFF else h


@dataclass(frozen=True)
class IndexHeader:
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int      # next entry number; IndexHeader.load reads <= 0 as 1

    @classmethod
    def unpack(cls, buf: mmap.mmap | bytes, offset: int = 0) -> IndexHeader:
        b, e, bp, ep, slots, count = _HEADER.unpack_from(buf, offset)
        return cls(b, e, bp, ep, slots, max(count, 1))

    @property
    def entries(self) -> int:
        """Entries written (entry numbers 1 .. indexCount - 1)."""
        return self.index_count - 1

    def is_time_matched(self, begin: int, end: int) -> bool:
        """IndexFile.isTimeMatched: [begin, end] covers the file, or begin or end falls inside it."""
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or b <= begin <= e or b <= end <= e


@dataclass(frozen=True)
class IndexGeometry:
    max_hash_slot_num: int
    max_index_num: int
    source: str           # "configured", "ratio" (maxIndexNum = 4 * maxHashSlotNum) or "data"

    @property
    def entry_base(self) -> int:
        return INDEX_HEADER_SIZE + self.max_hash_slot_num * HASH_SLOT_SIZE

    def file_size(self) -> int:
        return self.entry_base + self.max_index_num * INDEX_SIZE


def _entries_for(size: int, slots: int) -> int | None:
    """maxIndexNum that goes with ``slots`` in a file of ``size`` bytes, or None when none does."""
    rest = size - INDEX_HEADER_SIZE - slots * HASH_SLOT_SIZE
    if slots <= 0 or rest <= 0 or rest % INDEX_SIZE:
        return None
    return rest // INDEX_SIZE


def structure_problem(buf: mmap.mmap, size: int, header: IndexHeader, slots: int) -> str | None:
    """What contradicts ``slots`` as this file's maxHashSlotNum (None: everything IndexFile.putKey
    guarantees holds). Vectorized over the slot table and the written entries."""
    entries = _entries_for(size, slots)
    if entries is None:
        return f"size {size} is not 40 + 4 * {slots} + 20 * maxIndexNum"
    count = header.index_count
    if count > entries:
        return f"indexCount {count} exceeds maxIndexNum {entries}"
    table = np.frombuffer(buf, dtype=">i4", count=slots, offset=INDEX_HEADER_SIZE)
    used = np.flatnonzero(table)
    heads = table[used].astype(np.int64)
    if len(used) != header.hash_slot_count:
        return f"{len(used)} non-empty slots, header hashSlotCount {header.hash_slot_count}"
    if count <= 1:
        return None if len(used) == 0 else "slots set in an index without entries"
    if len(used) == 0:
        return "no slot set although the index holds entries"
    if heads.min() < 1 or heads.max() >= count:
        return f"slot values outside [1, indexCount={count})"
    base = INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE
    table_e = np.frombuffer(buf, dtype=ENTRY_DTYPE, count=count, offset=base)
    written = table_e[1:]
    key_hash = written["key_hash"].astype(np.int64)
    prev = written["prev_index"].astype(np.int64)
    phy = written["phy_offset"].astype(np.int64)
    numbers = np.arange(1, count, dtype=np.int64)
    if (key_hash < 0).any() or (written["time_diff"] < 0).any():
        return "an entry with a negative keyHash or timeDiff"
    if ((prev < 0) | (prev >= numbers)).any():
        return "an entry whose previous-entry number is not below its own"
    if (np.diff(phy) < 0).any():
        return "entry offsets that decrease"
    if phy[0] != header.begin_phy_offset or phy[-1] != header.end_phy_offset:
        return (f"first/last entry offsets {phy[0]}/{phy[-1]} differ from the header's "
                f"beginPhyOffset/endPhyOffset {header.begin_phy_offset}/{header.end_phy_offset}")
    if (table_e["key_hash"][heads].astype(np.int64) % slots != used).any():
        return "a slot whose head entry hashes to another slot"
    after = base + count * INDEX_SIZE
    if count < entries and np.frombuffer(buf, dtype=np.uint8, count=INDEX_SIZE, offset=after).any():
        return f"bytes written after the last entry (indexCount {count})"
    return None


def _last_nonzero(path: Path, arr: np.ndarray, size: int) -> int:
    """Position of the last non-zero byte (-1 when there is none)."""
    for start, end in reversed(data_regions(path, 0, size)):
        pos = end
        while pos > start:
            lo = max(start, pos - _SCAN_CHUNK)
            nz = np.flatnonzero(arr[lo:pos])
            if len(nz):
                return lo + int(nz[-1])
            pos = lo
    return -1


def resolve_geometry(path: Path, buf: mmap.mmap, size: int, header: IndexHeader, *,
                     max_hash_slot_num: int | None = None,
                     max_index_num: int | None = None) -> IndexGeometry | None:
    """This file's maxHashSlotNum / maxIndexNum (module docstring: how); None for a file without
    entries whose geometry neither the caller nor the ratio gives (nothing can be found in it)."""
    if max_hash_slot_num is not None or max_index_num is not None:
        return _configured(path, buf, size, header, max_hash_slot_num, max_index_num)
    ratio_slots, rem = divmod(size - INDEX_HEADER_SIZE, HASH_SLOT_SIZE + _DEFAULT_RATIO * INDEX_SIZE)
    ratio = IndexGeometry(ratio_slots, _DEFAULT_RATIO * ratio_slots, "ratio") if not rem and ratio_slots else None
    if header.index_count <= 1:
        return ratio
    if ratio is not None and structure_problem(buf, size, header, ratio.max_hash_slot_num) is None:
        return ratio
    arr = np.frombuffer(buf, dtype=np.uint8)
    last = _last_nonzero(path, arr, size)
    # the last entry (number indexCount-1) starts at 40 + 4*S + 20*(indexCount-1) and holds endPhyOffset
    # (bytes 4..11) and maybe prev/timeDiff: the last non-zero byte lies 4..19 bytes into it, or 0..3
    # when only keyHash is non-zero (endPhyOffset 0).
    tried: list[int] = []
    passed: list[tuple[int, int]] = []   # (maxHashSlotNum, maxIndexNum)
    for into in range(INDEX_SIZE):
        start = last - into - INDEX_HEADER_SIZE - INDEX_SIZE * (header.index_count - 1)
        if start <= 0 or start % HASH_SLOT_SIZE:
            continue
        slots = start // HASH_SLOT_SIZE
        entries = _entries_for(size, slots)
        if entries is None:
            continue
        tried.append(slots)
        if structure_problem(buf, size, header, slots) is None:
            passed.append((slots, entries))
    if len(passed) == 1:
        return IndexGeometry(passed[0][0], passed[0][1], "data")
    what = (f"several slot counts fit its entries ({[s for s, _ in passed]})" if passed else
            f"no slot count fits its entries (tried {sorted(tried + ([ratio.max_hash_slot_num] if ratio else []))})")
    raise StoreConfigError(f"cannot tell maxHashSlotNum/maxIndexNum of this index file of {size} bytes "
                           f"(indexCount {header.index_count}): {what}; set maxHashSlotNum and maxIndexNum "
                           "in the store's broker.conf", path=path)


def _configured(path: Path, buf: mmap.mmap, size: int, header: IndexHeader, slots: int | None,
                entries: int | None) -> IndexGeometry:
    """``slots`` and/or ``entries`` as configured (resolve_geometry passes at least one of them)."""
    if slots is None and entries is not None:
        rest = size - INDEX_HEADER_SIZE - INDEX_SIZE * entries
        slots = rest // HASH_SLOT_SIZE if rest > 0 and rest % HASH_SLOT_SIZE == 0 else None
    elif entries is None and slots is not None:
        entries = _entries_for(size, slots)
    geometry = None if slots is None or entries is None else IndexGeometry(slots, entries, "configured")
    if geometry is None or geometry.file_size() != size:
        raise StoreConfigError(f"index file of {size} bytes does not fit maxHashSlotNum={slots} "
                               f"maxIndexNum={entries} (size = 40 + 4 * maxHashSlotNum + 20 * maxIndexNum)",
                               path=path)
    if header.index_count > 1:
        problem = structure_problem(buf, size, header, geometry.max_hash_slot_num)
        if problem is not None:
            raise CorruptStoreError(f"index file does not hold what IndexFile.putKey writes with "
                                    f"maxHashSlotNum={slots}: {problem}", path=path)
    return geometry


# --- one file -----------------------------------------------------------------------------------
# (st_dev, st_ino, size, configured maxHashSlotNum, configured maxIndexNum) -> geometry
_GEOMETRY_CACHE: dict[tuple[int, int, int, int | None, int | None], IndexGeometry | None] = {}


class IndexFile:
    """One index file, mapped read-only. The header is re-read for every query (a live broker keeps
    writing it); the geometry is resolved once per file (cached by device, inode and size)."""

    def __init__(self, path: str | Path, *, max_hash_slot_num: int | None = None,
                 max_index_num: int | None = None) -> None:
        self.path = Path(path)
        self.mm: mmap.mmap | None = None
        with os_errors("cannot map index file", self.path), open(self.path, "rb") as f:
            st = os.fstat(f.fileno())
            self.size = st.st_size
            if self.size:   # a zero-length file (crash while creating it) holds nothing
                self.mm = mmap.mmap(f.fileno(), self.size, access=mmap.ACCESS_READ)
        if 0 < self.size < INDEX_HEADER_SIZE:
            self.close()
            raise CorruptStoreError(f"index file of {self.size} bytes is shorter than its {INDEX_HEADER_SIZE}-byte "
                                    "header", path=self.path)
        key = (st.st_dev, st.st_ino, self.size, max_hash_slot_num, max_index_num)
        if self.mm is None:
            self.geometry = None
        elif key in _GEOMETRY_CACHE:
            self.geometry = _GEOMETRY_CACHE[key]
        else:
            try:
                self.geometry = resolve_geometry(self.path, self.mm, self.size, self.read_header(),
                                                 max_hash_slot_num=max_hash_slot_num, max_index_num=max_index_num)
            except BaseException:
                self.close()
                raise
            if self.geometry is not None:   # an empty file may be written to later: resolve it again then
                _GEOMETRY_CACHE[key] = self.geometry

    def read_header(self) -> IndexHeader:
        if self.mm is None:
            return IndexHeader(0, 0, 0, 0, 0, 1)
        return IndexHeader.unpack(self.mm)

    def entries(self) -> np.ndarray:
        """The written entries (numbers 1 .. indexCount-1) as ENTRY_DTYPE records (a view of the mapping)."""
        header = self.read_header()
        mm = self.mm   # None (closed or empty file): read_header gives indexCount 1
        if mm is None or self.geometry is None or header.index_count <= 1:
            return np.zeros(0, dtype=ENTRY_DTYPE)
        count = min(header.index_count, self.geometry.max_index_num)
        return np.frombuffer(mm, dtype=ENTRY_DTYPE, count=count - 1,
                             offset=self.geometry.entry_base + INDEX_SIZE)

    def select_phy_offsets(self, out: list[int], key: str, max_num: int, begin: int, end: int,
                           header: IndexHeader | None = None) -> None:
        """IndexFile.selectPhyOffset: append to ``out`` the offsets of the entries of ``key`` (an
        IndexService.buildKey) stored in [begin, end], newest first, until ``out`` holds ``max_num``."""
        header = header or self.read_header()
        count = header.index_count
        if self.geometry is None or count <= 1:
            return
        key_hash = index_key_hash(key)
        slots = self.geometry.max_hash_slot_num
        mm = self.mm
        if mm is None:   # closed since ``header`` was read
            raise StoreError("index file is closed", path=self.path)
        (number,) = INT32.unpack_from(mm, INDEX_HEADER_SIZE + (key_hash % slots) * HASH_SLOT_SIZE)
        if number <= INVALID_INDEX or number > count:
            return
        base, limit = self.geometry.entry_base, self.geometry.max_index_num
        begin_timestamp = header.begin_timestamp
        unpack = _ENTRY.unpack_from
        while len(out) < max_num:
            if number >= limit:
                raise CorruptStoreError(f"index entry number {number} is beyond maxIndexNum {limit}",
                                        path=self.path, offset=base + number * INDEX_SIZE)
            hash_read, phy, time_diff, prev = unpack(mm, base + number * INDEX_SIZE)
            if time_diff < 0:
                break
            stored = begin_timestamp + time_diff * 1000
            if hash_read == key_hash and begin <= stored <= end:
                out.append(phy)
            if prev <= INVALID_INDEX or prev > count or prev == number or stored < begin:
                break
            if prev > number:   # putKey links each entry to an older one: a chain going forward is damage
                raise CorruptStoreError(f"index entry {number} links forward to entry {prev}",
                                        path=self.path, offset=base + number * INDEX_SIZE)
            number = prev

    def close(self) -> None:
        if self.mm is not None:
            try:
                self.mm.close()
            except BufferError:
                pass   # a caller still holds an entries() view: the mapping goes with it
            self.mm = None

    def __enter__(self) -> IndexFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- all files of index/ -------------------------------------------------------------------------
@dataclass(frozen=True)
class QueryOffsetResult:
    """IndexService.queryOffset's answer: offsets newest first, and the newest file's end values."""

    phy_offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


class IndexService:
    """The index files of a store, oldest first (IndexService.load sorts them by name)."""

    def __init__(self, paths: Sequence[Path], *, max_hash_slot_num: int | None = None,
                 max_index_num: int | None = None) -> None:
        self.files: list[IndexFile] = []
        try:
            for p in sorted(paths, key=lambda p: p.name):
                self.files.append(IndexFile(p, max_hash_slot_num=max_hash_slot_num, max_index_num=max_index_num))
        except BaseException:
            self.close()
            raise

    def indexed_end(self) -> int | None:
        """Commit-log offset of the last record indexed (the greatest endPhyOffset of a file with
        entries); None when no file holds an entry."""
        ends = [h.end_phy_offset for h in (f.read_header() for f in self.files) if h.index_count > 1]
        return max(ends) if ends else None

    def query_offset(self, topic: str, key: str, max_num: int, begin: int = 0,
                     end: int = MAX_TIMESTAMP) -> QueryOffsetResult:
        """IndexService.queryOffset: newest file first; a file is searched when its time range meets
        [begin, end]; stop at the first file that begins before ``begin`` or once ``max_num`` (at most
        maxMsgsNumBatch) offsets are collected."""
        max_num = min(max_num, MAX_MSGS_NUM_BATCH)
        offsets: list[int] = []
        last_ts = last_phy = 0
        full_key = build_key(topic, key)
        for i in range(len(self.files) - 1, -1, -1):
            f = self.files[i]
            header = f.read_header()
            if i == len(self.files) - 1:
                last_ts, last_phy = header.end_timestamp, header.end_phy_offset
            if header.is_time_matched(begin, end):
                f.select_phy_offsets(offsets, full_key, max_num, begin, end, header)
            if header.begin_timestamp < begin or len(offsets) >= max_num:
                break
        return QueryOffsetResult(offsets, last_ts, last_phy)

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []

    def __enter__(self) -> IndexService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def configured_geometry(conf_path: Path | None) -> dict[str, int]:
    """``max_hash_slot_num`` / ``max_index_num`` keyword arguments from a broker.conf's maxHashSlotNum /
    maxIndexNum (empty when there is no conf or it sets neither)."""
    if conf_path is None:
        return {}
    from rocketstream.store.meta.config import parse_properties

    with os_errors("cannot read broker config", conf_path, error=StoreConfigError):
        props = parse_properties(Path(conf_path).read_bytes().decode("latin-1"), path=Path(conf_path))
    out = {}
    for key, name in (("maxHashSlotNum", "max_hash_slot_num"), ("maxIndexNum", "max_index_num")):
        if key in props:
            value = props[key].strip()
            if not value.isdigit() or int(value) <= 0:
                raise StoreConfigError(f"option {key}: not a positive integer: {props[key]!r}", path=conf_path)
            out[name] = int(value)
    return out
