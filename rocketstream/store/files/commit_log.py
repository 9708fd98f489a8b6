"""The commit log: every message of every topic, appended to ``commitlog/`` (``CommitLog``, ``MappedFileQueue``;
the record is drawn in docs/store-format.md).

Writer: ``append`` encodes a whole batch, then writes it into the file with two ``pwrite`` calls:
everything but the first record's TOTALSIZE, then that TOTALSIZE. A concurrent reader (another
process mapping the same file) that finds a non-zero TOTALSIZE at the end it knows therefore finds
the whole batch behind it; a zero TOTALSIZE means "nothing more yet". ``pwrite`` and the mappings
share the page cache, so mappings (ours and readers') see the bytes when it returns and msync
flushes them. Batches of 16 KiB and more use it instead of copying through the mapping, because
first-touch page faults on a fresh file made that copy about twice as slow; small appends are
copied through the mapping (two syscalls would cost more).

Reader: the readable end is found by walking record headers from the last end it knew
(``max_offset``); readers normally go through consume-queue units instead and validate each
unit against the header it points to (``check_units``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

from rocketstream import codec
from rocketstream.codec import HostAddress, MessageRecord, arrow_records
from rocketstream.errors import CorruptStoreError, StoreError
from rocketstream.store.files.mapped_file import FileWriter, MappedFile, MappedFileQueue

_PWRITE_MIN = 16 << 10   # appends at least this big go through pwrite rather than the mapping
_BULK_MIN = 8            # shorter runs of known record starts are walked one by one
_BULK_MAX = 1 << 16      # records checked per bulk step (bounds the temporary arrays)


IntColumn: TypeAlias = Sequence[int] | npt.NDArray[np.int64]   # one int per record: a list or an int64 array
TagsCodeOf: TypeAlias = Callable[[str, dict[str, str], int], int]   # (topic, properties, store timestamp) -> tagsCode


class EncodedBatch(Protocol):
    """The records of one put (one topic, one queue), sized and ready to be encoded at a commit-log
    position: what ``CommitLog.append`` writes and ``Dispatcher.dispatch_append`` turns into
    consume-queue units (RocketMQ: the ``MessageExtBatch`` whose ``encodedBuff`` its
    ``MessageExtBatchEncoder`` fills before ``CommitLog.putMessages`` appends it). Built by
    ``put_columns.build_columns`` (numpy, the producer batch) or ``put_batch.PreparedList`` (the
    general rules, record by record); both write the same bytes for the same messages."""

    @property
    def topic(self) -> str: ...

    @property
    def queue_id(self) -> int: ...

    @property
    def count(self) -> int:
        """Number of records."""

    @property
    def total(self) -> int:
        """Bytes of all records: ``sum(sizes)``; ``encode`` returns exactly this many."""

    @property
    def sizes(self) -> IntColumn:
        """TOTALSIZE of each record."""

    @property
    def starts(self) -> IntColumn:
        """Offset of each record from the first one."""

    @property
    def dispatch(self) -> bool:
        """False for PREPARED / ROLLBACK records: stored with queue offset 0, no consume-queue unit."""

    def uniq_keys(self) -> list[str]:
        """The records' UNIQ_KEYs (msg ids), in order; may be called after the put, or never."""

    def index_keys(self) -> tuple[Sequence[str | None], Sequence[str | None] | None]:
        """What ``IndexService.buildIndex`` indexes of each record: its UNIQ_KEY and its KEYS property
        (None where a record has none; the second item None when no record has KEYS). Nothing for a
        ROLLBACK record (all None)."""

    def encode(self, physical_offset: int, queue_offset: int, store_timestamp: int) -> bytes:
        """The records as stored: the first at ``physical_offset`` with ``queue_offset``, the following
        ones after it (queue offsets counting up when ``dispatch``)."""

    def tags_codes(self, store_timestamp: int, tags_code_of: TagsCodeOf) -> IntColumn:
        """The consume-queue tagsCode of each record stored at ``store_timestamp``. ``tags_code_of`` is
        the dispatcher's rule (the TAGS hash; for SCHEDULE_TOPIC_XXXX the delivery time, which needs
        the store timestamp and the delay table); a builder that knows its records never need more
        than the TAGS hash may return codes it computed while building."""


@dataclass
class AppendResult:
    physical_offset: int          # of the first record
    sizes: IntColumn              # TOTALSIZE of each record
    starts: IntColumn             # offset of each record relative to the first
    queue_offset: int             # of the first record (0 for PREPARED / ROLLBACK)
    store_timestamp: int
    wrote_bytes: int


class CommitLog:
    def __init__(self, root: Path, file_size: int, *, read_only: bool, store_host: HostAddress) -> None:
        self.directory = root / "commitlog"
        self.file_size = file_size
        self.read_only = read_only
        self.store_host = store_host
        self.queue = MappedFileQueue(self.directory, file_size, writable=not read_only)
        self.topic_queue_table: dict[str, int] = {}   # "topic-queueId" -> next queue offset
        self.last_store_timestamp = 0
        self._read_end = 0    # reader: end of the records seen so far
        self.lock = threading.RLock()
        self._writer = FileWriter("commit log")

    def load(self) -> None:
        if not self.read_only:
            self.queue.remove_stale_tmp()
        self.queue.load()

    # --- geometry -----------------------------------------------------------------------------
    def min_offset(self) -> int:
        if self.read_only:
            self.queue.refresh()
        return self.queue.min_offset()

    def max_offset(self) -> int:
        """Writer: its write position. Reader: end of the complete records visible now."""
        if self.read_only:
            return self._scan_reader_end()
        return self.queue.max_offset()

    def find_file(self, offset: int) -> MappedFile | None:
        mf = self.queue.find(offset)
        if mf is None and self.read_only:
            last = self.queue.last
            if last is None or offset >= last.end_offset or offset < last.file_from_offset:
                self.queue.refresh()
                mf = self.queue.find(offset)
        return mf

    def buffer_for(self, offset: int) -> tuple[int, np.ndarray]:
        """(fileFromOffset, uint8 view over the whole mapped file) of the file covering ``offset``."""
        mf = self.find_file(offset)
        if mf is None:
            raise StoreError(f"no commit-log file covers offset {offset}", path=self.directory, offset=offset)
        return mf.file_from_offset, mf.array

    # --- writing ------------------------------------------------------------------------------
    def append(self, batch: EncodedBatch, now_ms: int) -> AppendResult:
        """Append one batch (all records contiguous in one file). Caller checked the size fits."""
        total = batch.total
        with self.lock:
            mf = self.queue.last_file_for(self.queue.max_offset())
            if total + codec.END_FILE_MIN_BLANK_LENGTH > mf.file_size - mf.wrote_position:
                self._write_blank(mf)
                mf = self.queue.last_file_for(mf.end_offset)
            key = f"{batch.topic}-{batch.queue_id}"
            queue_offset = self.topic_queue_table.get(key, 0) if batch.dispatch else 0
            store_ts = max(now_ms, self.last_store_timestamp)
            base = mf.file_from_offset + mf.wrote_position
            data = batch.encode(base, queue_offset, store_ts)
            if len(data) != total:  # the size formula and the encoder disagree: a bug, not user input
                raise StoreError(f"encoded batch is {len(data)} bytes, expected {total}", offset=base)
            pos = mf.wrote_position
            view = memoryview(data)
            if total < _PWRITE_MIN:   # a few records: two syscalls cost more than the odd page fault
                mf.mm[pos + 4:pos + total] = view[4:]
                mf.mm[pos:pos + 4] = view[:4]     # TOTALSIZE last: see the module docstring
            else:
                self._writer.pwrite(mf, view[4:], pos + 4)
                self._writer.pwrite(mf, view[:4], pos)
            mf.wrote_position = pos + total
            if batch.dispatch:
                self.topic_queue_table[key] = queue_offset + batch.count
            self.last_store_timestamp = store_ts
            return AppendResult(base, batch.sizes, batch.starts, queue_offset, store_ts, total)

    def close_fd(self) -> None:
        self._writer.close()

    def release(self) -> None:
        """Close the write descriptor and unmap every file."""
        self.close_fd()
        self.queue.release()

    def _write_blank(self, mf: MappedFile) -> None:
        pos = mf.wrote_position
        blank = codec.encode_blank(mf.file_size - pos)
        mf.mm[pos + 4:pos + 8] = blank[4:]
        mf.mm[pos:pos + 4] = blank[:4]
        mf.wrote_position = mf.file_size

    def flush(self) -> None:
        """msync every file with unflushed bytes (newest first; older ones are already flushed)."""
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
    def read_record(self, offset: int, size: int | None = None, *, check_crc: bool = False) -> MessageRecord:
        mf = self.find_file(offset)
        if mf is None:
            raise StoreError(f"no commit-log file covers offset {offset}", path=self.directory, offset=offset)
        rec = codec.decode_record(mf.mm, offset - mf.file_from_offset, check_crc=check_crc, path=mf.path,
                                base_offset=mf.file_from_offset)
        if rec is None:
            raise CorruptStoreError("end-of-file blank record where a message was expected",
                                    path=mf.path, offset=offset)
        if rec.physical_offset != offset or (size is not None and rec.total_size != size):
            raise CorruptStoreError(f"record header (PHYSICALOFFSET {rec.physical_offset}, TOTALSIZE "
                                    f"{rec.total_size}) does not match the expected offset {offset}"
                                    + (f" / size {size}" if size is not None else ""), path=mf.path, offset=offset)
        return rec

    def store_timestamp_at(self, offset: int) -> int:
        """STORETIMESTAMP of the record at ``offset``; -1 when no file covers it (pickupStoreTimestamp)."""
        mf = self.find_file(offset)
        if mf is None:
            return -1
        pos = offset - mf.file_from_offset
        if pos + 64 > mf.file_size:
            return -1
        (sys_flag,) = codec.INT32.unpack_from(mf.mm, pos + codec.POS_SYS_FLAG)
        at = pos + 48 + (20 if sys_flag & codec.FLAG_BORNHOST_V6 else 8)
        store_timestamp: int = codec.INT64.unpack_from(mf.mm, at)[0]
        return store_timestamp

    def iter_records(self, start: int, *, check_crc: bool) -> Iterator[tuple[int, MessageRecord | None]]:
        """(offset, record) from ``start`` to the end of the last file; (offset, None) for a blank.

        Fully decoded records, for ``check`` and look-ups. Raises CorruptStoreError at the first
        record that does not decode. Zero bytes where a record should start end the iteration (the
        unwritten tail). Recovery does not use this: it uses ``scan`` (Java's checks, nothing more).
        """
        offset = start
        while True:
            mf = self.find_file(offset)
            if mf is None:
                return
            pos = offset - mf.file_from_offset
            if pos + 8 > mf.file_size:
                raise CorruptStoreError("record position leaves no room for a header", path=mf.path, offset=offset)
            total, magic = codec.INT32_PAIR.unpack_from(mf.mm, pos)
            if total == 0 and magic == 0:
                return
            rec = codec.decode_record(mf.mm, pos, check_crc=check_crc, path=mf.path, base_offset=mf.file_from_offset,
                                      check_position=True)
            if rec is None:
                if total != mf.file_size - pos:
                    raise CorruptStoreError(f"blank record TOTALSIZE {total} does not reach the end of the file "
                                            f"({mf.file_size - pos} bytes left)", path=mf.path, offset=offset)
                yield offset, None
                offset = mf.end_offset
                continue
            yield offset, rec
            offset += rec.total_size

    def scan(self, start: int, *, check_crc: bool, known_starts: np.ndarray | None = None) -> RecordScan:
        """A recovery scan from ``start``: iterate it for ``RecordHead``s; when the iteration ends,
        ``end`` is the recovered end and ``problem`` says why the scan stopped (None: clean end).

        ``known_starts`` (sorted, unique commit-log offsets, e.g. from consume-queue units): runs of
        records starting there are checked in bulk and not yielded; every other record is walked
        and yielded. Either way the same checks decide where the scan ends."""
        return RecordScan(self, start, check_crc, known_starts)

    def _peek_size(self, mf: MappedFile, pos: int) -> int:
        """Reader end scan: size of the complete record at ``pos``, -1 for a blank, 0 for 'no record'.
        A record counts when it passes ``codec.check_record`` (without BODYCRC) and leaves room for
        the blank record every file ends with (``CommitLog.doAppend`` keeps END_FILE_MIN_BLANK_LENGTH)."""
        if pos + 8 > mf.file_size:
            return 0
        total: int
        magic: int
        total, magic = codec.INT32_PAIR.unpack_from(mf.mm, pos)
        if magic == codec.BLANK_MAGIC:
            return -1 if total == mf.file_size - pos else 0
        if pos + total + codec.END_FILE_MIN_BLANK_LENGTH > mf.file_size:
            return 0
        problem, _ = codec.check_record(mf.mm, pos, file_size=mf.file_size, base_offset=mf.file_from_offset,
                                        check_crc=False)
        return 0 if problem is not None else total

    def _scan_reader_end(self) -> int:
        self.queue.refresh()
        offset = max(self._read_end, self.queue.min_offset())
        while True:
            mf = self.queue.find(offset)
            if mf is None:
                if self.queue.refresh():
                    continue
                break
            size = self._peek_size(mf, offset - mf.file_from_offset)
            if size == 0:
                break
            offset = mf.end_offset if size < 0 else offset + size
        self._read_end = offset
        return offset

    # --- validation of consume-queue units ----------------------------------------------------
    def check_units(self, units: np.ndarray) -> int:
        """Index of the first unit whose record fails ``arrow_records.record_problems`` (the checks of
        ``codec.check_record`` without BODYCRC) or whose TOTALSIZE differs from the unit's size, or -1
        when all agree. PHYSICALOFFSET equal to the record's position is the unit's offset."""
        if len(units) == 0:
            return -1
        offsets = units["offset"].astype(np.int64)
        sizes = units["size"].astype(np.int64)
        bad = np.zeros(len(units), dtype=bool)
        file_ids = offsets // self.file_size
        breaks = np.flatnonzero(np.diff(file_ids)) + 1
        for lo, hi in zip(np.r_[0, breaks], np.r_[breaks, len(units)], strict=True):
            mf = self.find_file(int(offsets[lo]))
            if mf is None:
                bad[lo:hi] = True
                continue
            rel = offsets[lo:hi] - mf.file_from_offset
            h = arrow_records.decode_headers(mf.array, rel)
            bad[lo:hi] = arrow_records.any_problem(arrow_records.record_problems(
                mf.array, h, rel, base_offset=mf.file_from_offset, expected_sizes=sizes[lo:hi]))
        hits = np.flatnonzero(bad)
        return int(hits[0]) if len(hits) else -1


class RecordHead(NamedTuple):
    """What recovery and dispatch need of one record (``CommitLog.scan``); no body copy."""

    offset: int             # PHYSICALOFFSET == position in the commit log
    size: int               # TOTALSIZE
    sys_flag: int
    queue_id: int
    queue_offset: int
    store_timestamp: int
    topic: str
    props: memoryview       # PROPERTIES bytes (a view into the mapping)

    def properties(self) -> dict[str, str]:
        return codec.decode_properties(self.props) if len(self.props) else {}


_TOPIC_CACHE: dict[bytes, str] = {}


class RecordScan:
    """Recovery's walk over records, with the checks ``CommitLog.checkMessageAndReturnSize`` makes
    and nothing stricter: ``codec.check_record`` one by one, ``arrow_records.record_problems`` for runs
    of known record starts (docs/store-format.md). The first record that fails ends the
    scan; ``end`` is where it starts and ``problem`` says what failed. Blank records and the zero
    bytes of an unwritten tail are not problems. Properties are not parsed here (Java decodes them
    leniently, so their bytes never fail a record)."""

    def __init__(self, cl: CommitLog, start: int, check_crc: bool, known_starts: np.ndarray | None = None) -> None:
        self._cl = cl
        self.end = start
        self.problem: str | None = None
        self.problem_path: Path | None = None
        self._check_crc = check_crc
        self._known = known_starts
        self.max_store_timestamp = 0
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []
        self._walked_starts: list[int] = []
        self._walked_sizes: list[int] = []

    def validated(self) -> tuple[np.ndarray, np.ndarray]:
        """(starts, sizes) of every record the scan accepted, ascending."""
        starts = [r[0] for r in self._runs] + [np.array(self._walked_starts, dtype=np.int64)]
        sizes = [r[1] for r in self._runs] + [np.array(self._walked_sizes, dtype=np.int64)]
        s, z = np.concatenate(starts), np.concatenate(sizes)
        order = np.argsort(s, kind="stable")
        return s[order], z[order]

    def _fast_forward(self, mf: MappedFile, pos: int, known: np.ndarray) -> int:
        """Validate, in bulk, the run of records at ``known_starts`` that begins at ``pos`` and
        chains (each ends where the next known start is) inside ``mf``; returns the position after
        the last record that passed every check. Anything doubtful is left to the record-by-record
        walk, which stays the authority on where the commit log ends."""
        base = mf.file_from_offset
        i = int(np.searchsorted(known, base + pos))
        if i >= len(known) or known[i] != base + pos:
            return pos
        j = min(int(np.searchsorted(known, mf.end_offset)), i + _BULK_MAX)
        if j - i < _BULK_MIN:
            return pos
        rel = known[i:j] - base
        h = arrow_records.decode_headers(mf.array, rel)
        total = h["total_size"].astype(np.int64)
        ok = ~arrow_records.any_problem(arrow_records.record_problems(mf.array, h, rel, base_offset=base))
        ok[:-1] &= rel[:-1] + total[:-1] == rel[1:]    # chained: nothing unknown in between
        n = len(rel) if ok.all() else int(np.argmin(ok))
        if self._check_crc and n:   # BODYCRC of the records kept only (record_problems' check_crc does all)
            crc_bad = arrow_records.body_crc_mismatches(mf.array, h, np.arange(len(rel)) < n)
            if crc_bad.any():
                n = int(np.argmax(crc_bad))
        if n == 0:
            return pos
        # the last record of a run was not chained to a known start; the walk checks what follows
        self.max_store_timestamp = max(self.max_store_timestamp, int(h["store_timestamp"][:n].max()))
        self._runs.append((known[i:i + n].copy(), total[:n].copy()))
        return int(rel[n - 1] + total[n - 1])

    def _stop(self, mf: MappedFile, offset: int, problem: str | None) -> None:
        self.end = offset
        self.problem = problem
        self.problem_path = mf.path

    def __iter__(self) -> Iterator[RecordHead]:
        cl, check_crc, known = self._cl, self._check_crc, self._known
        offset = self.end
        mf = cl.find_file(offset)
        while mf is not None:
            mm, size_of_file, base = mf.mm, mf.file_size, mf.file_from_offset
            view = memoryview(mm)
            pos = offset - base
            while True:
                if known is not None:
                    pos = self._fast_forward(mf, pos, known)
                if pos + 8 > size_of_file:
                    self._stop(mf, base + pos, None if pos == size_of_file else
                               f"{size_of_file - pos} bytes left at the end of the file, too few for a record")
                    return
                total, magic = codec.INT32_PAIR.unpack_from(mm, pos)
                if magic == codec.BLANK_MAGIC:     # end of this file: go on with the next one
                    break
                if total == 0 and magic == 0:     # the unwritten tail: a clean end
                    self._stop(mf, base + pos, None)
                    return
                problem, head = _check_record(view, pos, base, size_of_file, check_crc)
                if head is None:
                    self._stop(mf, base + pos, problem)
                    return
                if head.store_timestamp > self.max_store_timestamp:
                    self.max_store_timestamp = head.store_timestamp
                self._walked_starts.append(head.offset)
                self._walked_sizes.append(total)
                yield head
                pos += total
            offset = mf.end_offset
            self.end = offset
            nxt = cl.find_file(offset)
            if nxt is None:
                return
            mf = nxt


def _check_record(view: memoryview, pos: int, base: int, file_size: int,
                  check_crc: bool) -> tuple[str | None, RecordHead | None]:
    """(problem, head) for the record at ``pos``: ``codec.check_record``'s verdict, and what recovery
    and dispatch need of a record that passes."""
    problem, r = codec.check_record(view, pos, file_size=file_size, base_offset=base, check_crc=check_crc)
    if r is None:
        return str(problem), None
    raw_topic = bytes(view[r.topic_pos:r.topic_pos + r.topic_len])
    topic = _TOPIC_CACHE.get(raw_topic)
    if topic is None:
        topic = raw_topic.decode("utf-8", "replace")    # Java: new String(bytes, UTF_8)
        if len(_TOPIC_CACHE) < 65536:
            _TOPIC_CACHE[raw_topic] = topic
    return None, RecordHead(r.physical_offset, r.total_size, r.sys_flag, r.queue_id, r.queue_offset,
                            r.store_timestamp, topic, view[r.props_pos:r.props_pos + r.props_len])
