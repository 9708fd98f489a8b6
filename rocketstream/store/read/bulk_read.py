"""Consume-queue units + mapped commit-log files → Arrow record batches (the read path Spark uses).

One call reads runs of consecutive queue offsets of one or several (topic, queue) — a Spark task's
ranges, cut into batches across range boundaries. The work per batch is a handful of numpy/Arrow calls
whatever the number of rows and ranges (see ``codec.arrow_records``, which also builds the columns):
Python runs once per batch, per commit-log file touched, and per *compressed* body only. Columns that are not requested
are not decoded: without ``body`` the bodies are never copied, without ``properties``/``msgId``/
``tags``/``keys`` the properties are never parsed.

Every row is checked against the unit that points to it (``arrow_records.record_problems``: the checks
of ``codec.check_record`` with ports, and TOTALSIZE equal to the unit's size) — this is the only
check of the units on the read path, done on the headers the batch decodes anyway. A mismatch is a
:class:`CorruptStoreError` naming the commit-log file and offset; with ``reread`` the batch's units
are first read again once (a unit torn while a live writer wrote it reads whole the second time).
Under a tag filter only the units whose tagsCode matches (or is a ConsumeQueueExt address, which
hides the tags code) are ever looked at, like a RocketMQ broker's filter, and the record's TAGS
string then decides.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np
import pyarrow as pa

from rocketstream.codec import EXT_ADDRESS_MAX, java_hash
from rocketstream.codec import arrow_records as ar
from rocketstream.codec.arrow_records import BATCH_BYTES, ColumnBuilder, empty_batch, project_schema, select_rows
from rocketstream.errors import CorruptStoreError, OptionError


class CommitLogBuffers(Protocol):
    """What the reader needs from a commit log (``commit_log.CommitLog`` provides it)."""

    file_size: int

    def buffer_for(self, offset: int) -> tuple[int, np.ndarray]:
        """(fileFromOffset, uint8 view of the whole mapped file holding ``offset``)."""
        ...


class RangeUnits(NamedTuple):
    """One queue range of a read: the consume-queue ``units`` (CQ_DTYPE) of ``topic``/``queue_id`` from queue
    offset ``start``; ``reread(start, end)`` gives fresh units of that queue (None: a mismatch is an error)."""

    topic: str
    queue_id: int
    start: int
    units: np.ndarray
    reread: Callable[[int, int], np.ndarray] | None = None


def read_range_batches(
    commit_log: CommitLogBuffers,
    units: np.ndarray,
    queue_offset_start: int,
    *,
    topic: str,
    queue_id: int,
    broker_name: str,
    columns: Sequence[str] | None = None,
    tags: Collection[str] | None = None,
    batch_bytes: int = BATCH_BYTES,
    check_crc: bool = False,
    reread: Callable[[int, int], np.ndarray] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches for the messages of ``units`` (CQ_DTYPE, queue offsets from ``queue_offset_start``).

    Rows come in queue-offset order with the schema ``project_schema(columns)`` (all of
    ``MESSAGE_SCHEMA`` by default). Each batch covers about ``batch_bytes`` of stored records (a
    single larger record makes a batch of its own); empty batches are not yielded.

    ``tags``: keep only messages whose TAGS property is one of these strings — units are first
    filtered by tagsCode so the other records are never touched (units holding a ConsumeQueueExt
    address are kept for the TAGS check). ``None`` or empty means no filter
    (RocketMQ's "*" subscription has an empty tag set). ``check_crc`` verifies BODYCRC of every row.
    Ids and hosts always come from the record itself. ``reread(start, end)``: fresh units for queue
    offsets [start, end), asked once for a batch whose records do not match their units before that
    is an error.
    """
    return read_ranges_batches(commit_log, [RangeUnits(topic, queue_id, queue_offset_start, units, reread)],
                               broker_name=broker_name, columns=columns, tags=tags, batch_bytes=batch_bytes,
                               check_crc=check_crc)


def read_ranges_batches(
    commit_log: CommitLogBuffers,
    ranges: Sequence[RangeUnits],
    *,
    broker_name: str,
    columns: Sequence[str] | None = None,
    tags: Collection[str] | None = None,
    batch_bytes: int = BATCH_BYTES,
    check_crc: bool = False,
) -> Iterator[pa.RecordBatch]:
    """:func:`read_range_batches` of several queue ranges of one commit log at once (a Spark task's ranges):
    rows in the order of ``ranges``, then of queue offsets, cut into batches of about ``batch_bytes`` across
    range boundaries, so a thousand one-message ranges make one batch (one header decode, one properties
    parse, one Arrow assembly) instead of a thousand."""
    schema = project_schema(columns)
    if batch_bytes <= 0:
        raise OptionError("batch_bytes", "must be positive", batch_bytes)
    if not ranges:
        return
    counts = np.fromiter((len(r.units) for r in ranges), dtype=np.int64, count=len(ranges))
    all_units = _concat_units([r.units for r in ranges]) if len(ranges) != 1 else ranges[0].units
    offsets = all_units["offset"].astype(np.int64)
    sizes = all_units["size"].astype(np.int64)
    part = np.repeat(np.arange(len(ranges), dtype=np.int64), counts)
    starts = np.fromiter((r.start for r in ranges), dtype=np.int64, count=len(ranges))
    first_row = np.cumsum(counts) - counts
    queue_offsets = np.arange(len(all_units), dtype=np.int64) - first_row[part] + starts[part]
    tag_set = frozenset(tags) if tags else None
    codes = None
    if tag_set is not None:
        codes = np.fromiter((java_hash(t) for t in tag_set), dtype=np.int64, count=len(tag_set))
        hit = tags_code_may_match(all_units["tags_code"], codes)
        offsets, sizes, queue_offsets, part = offsets[hit], sizes[hit], queue_offsets[hit], part[hit]
    reader = _BatchReader(commit_log, schema, ranges, broker_name=broker_name, tag_set=tag_set,
                          check_crc=check_crc)
    for lo, hi in batch_bounds(sizes, batch_bytes):
        o, s, q, p = offsets[lo:hi], sizes[lo:hi], queue_offsets[lo:hi], part[lo:hi]
        try:
            batch = reader.read(o, s, q, p)
        except _UnitMismatch:
            if all(ranges[i].reread is None for i in np.unique(p).tolist()):
                raise
            o, s, q, p = _fresh_units(ranges, o, s, q, p, codes)
            batch = reader.read(o, s, q, p)  # a second mismatch is corruption
        if batch.num_rows:
            yield batch


def _concat_units(parts: Sequence[np.ndarray]) -> np.ndarray:
    """The units of ``parts`` in one array: their bytes joined when they share a dtype (``np.concatenate`` of
    structured arrays promotes each part's fields, ~20 µs a part: 20 ms for a task of 1,024 one-message
    ranges)."""
    dtype = parts[0].dtype
    if all(u.dtype == dtype and u.flags.c_contiguous for u in parts):
        return np.frombuffer(b"".join(u.data for u in parts), dtype=dtype)
    return np.concatenate(parts)


def _fresh_units(ranges: Sequence[RangeUnits], offsets: np.ndarray, sizes: np.ndarray, queue_offsets: np.ndarray,
                 part: np.ndarray, codes: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, sizes, queue offsets, range index) of the same rows with their units read again, range by
    range (the rows of one range are adjacent; a range without ``reread`` keeps its units, so a mismatch
    there is an error the second time); units whose tagsCode no longer matches the tag filter are dropped
    (the fresh unit is the truth)."""
    pieces = []
    cuts = np.flatnonzero(part[1:] != part[:-1]) + 1
    for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(part)].tolist(), strict=True):
        reread = ranges[int(part[lo])].reread
        q = queue_offsets[lo:hi]
        if reread is None:
            pieces.append((offsets[lo:hi], sizes[lo:hi], q, part[lo:hi]))
            continue
        first = int(q[0])
        units = reread(first, int(q[-1]) + 1)[q - first]
        if codes is not None:
            hit = tags_code_may_match(units["tags_code"], codes)
            units, q = units[hit], q[hit]
        pieces.append((units["offset"].astype(np.int64), units["size"].astype(np.int64), q,
                       np.full(len(q), part[lo], dtype=np.int64)))
    o, s, q, p = (np.concatenate([piece[i] for piece in pieces]) for i in range(4))
    return o, s, q, p


def tags_code_may_match(tags_codes: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Units whose record may carry one of the tags hashed to ``codes``: its tagsCode is one of them,
    or it is a ConsumeQueueExt address (``ConsumeQueueExt.isExtAddr``: <= Integer.MIN_VALUE - 1,
    written when ``enableConsumeQueueExt`` is on) that hides the real tags code. The
    broker lets the latter through when it cannot read the ext unit; here the record's TAGS, which
    every unit that passes is checked against, decides."""
    values = np.asarray(tags_codes).astype(np.int64)
    return np.isin(values, codes) | (values <= EXT_ADDRESS_MAX)


def batch_bounds(sizes: np.ndarray, batch_bytes: int) -> list[tuple[int, int]]:
    """Greedy [lo, hi) cuts so each run of sizes sums to <= batch_bytes (a lone big record excepted)."""
    cumulative = np.cumsum(sizes, dtype=np.int64)
    bounds = []
    lo, n = 0, len(sizes)
    while lo < n:
        before = int(cumulative[lo - 1]) if lo else 0
        hi = max(int(np.searchsorted(cumulative, before + batch_bytes, side="right")), lo + 1)
        bounds.append((lo, hi))
        lo = hi
    return bounds


class _BatchReader:
    """Decodes one batch of units; holds what does not change between batches."""

    def __init__(self, commit_log: CommitLogBuffers, schema: pa.Schema, ranges: Sequence[RangeUnits], *,
                 broker_name: str, tag_set: frozenset[str] | None, check_crc: bool) -> None:
        self.commit_log = commit_log
        self.schema = schema
        self.names = set(schema.names)
        self.ranges = ranges
        self.broker_name = broker_name
        self.tag_set = tag_set
        self.check_crc = check_crc
        self.columns = ColumnBuilder(schema, broker_name, tag_set)
        topics = sorted({r.topic for r in ranges})
        self.topic_values = ar.string_array(topics)
        self.topic_of_range = np.array([topics.index(r.topic) for r in ranges], dtype=np.int32) \
            if len(topics) > 1 else None
        self.queue_id_of_range = np.array([r.queue_id for r in ranges], dtype=np.int32)
        # decode_headers reads TOPIC from the record; the hint is its expected length (one topic: exact)
        self.topic_len = len(topics[0].encode("utf-8")) if len(topics) == 1 else None
        self._paths: dict[int, str] = {}

    def read(self, offsets: np.ndarray, sizes: np.ndarray, queue_offsets: np.ndarray,
             part: np.ndarray) -> pa.RecordBatch:
        # Records never span files; a batch spans several only at file boundaries (and, reading several
        # queues, wherever the next queue's records are in another file).
        if not len(offsets):
            return empty_batch(self.schema)
        file_size = self.commit_log.file_size
        if int(offsets.min()) // file_size == int(offsets.max()) // file_size:   # the usual batch: one file
            bounds = [0, len(offsets)]
        else:
            bounds = self._file_bounds(offsets, file_size)
        parts = []
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            parts.append(self._read_file_run(offsets[lo:hi], sizes[lo:hi], queue_offsets[lo:hi], part[lo:hi]))
        parts = [p for p in parts if p.num_rows]
        if len(parts) <= 1:
            return parts[0] if parts else empty_batch(self.schema)
        return pa.Table.from_batches(parts, schema=self.schema).combine_chunks().to_batches()[0]

    @staticmethod
    def _file_bounds(offsets: np.ndarray, file_size: int) -> list[int]:
        """[0, cut, ..., n]: where the run of rows moves to another commit-log file."""
        file_index = offsets // file_size
        cuts = np.flatnonzero(file_index[1:] != file_index[:-1]) + 1
        return [0, *cuts.tolist(), len(offsets)]

    def _read_file_run(self, offsets: np.ndarray, sizes: np.ndarray, queue_offsets: np.ndarray,
                       part: np.ndarray) -> pa.RecordBatch:
        file_from, buf = self.commit_log.buffer_for(int(offsets[0]))
        buf = ar.as_uint8(buf)
        rel = offsets - file_from
        h = ar.decode_headers(buf, rel, topic_len_hint=self.topic_len)
        self._check_headers(buf, h, rel, offsets, sizes, queue_offsets, part, file_from)
        props = tag_col = keys_col = uniq_col = None
        if self.columns.parse_props:
            raw = ar.gather_segments(buf, h["props_pos"], h["props_len"], pa.binary())
            props, tag_col, keys_col, uniq_col = self.columns.properties(raw)
            if self.tag_set is not None:
                keep = self.columns.tag_hits(tag_col)
                if not keep.all():
                    sel = np.flatnonzero(keep)
                    if not len(sel):
                        return empty_batch(self.schema)
                    h, (props, tag_col, keys_col, uniq_col) = select_rows(h, (props, tag_col, keys_col, uniq_col),
                                                                          sel)
                    offsets, sizes, queue_offsets, part = offsets[sel], sizes[sel], queue_offsets[sel], part[sel]
        if self.check_crc:
            self._check_crc(buf, h, offsets, file_from)
        first = int(part[0])
        one_queue = bool(part[-1] == first) and bool((part == first).all())
        batch = self.columns.assemble(buf, h, self.ranges[first].topic, self.ranges[first].queue_id, offsets,
                                      sizes, queue_offsets, props=props, tags=tag_col, keys=keys_col,
                                      uniq=uniq_col, path=self._path(file_from))
        if one_queue:
            return batch
        # rows of several queues: the columns assemble filled with the first range's topic and queue id
        names = self.schema.names
        if "queueId" in self.names:
            i = names.index("queueId")
            batch = batch.set_column(i, self.schema.field(i), ar.numeric_array(self.queue_id_of_range[part],
                                                                                 pa.int32()))
        if "topic" in self.names and self.topic_of_range is not None:
            i = names.index("topic")
            batch = batch.set_column(i, self.schema.field(i),
                                     self.topic_values.take(ar.numeric_array(self.topic_of_range[part], pa.int32())))
        return batch

    def _path(self, file_from: int) -> str:
        path = self._paths.get(file_from)
        if path is None:
            path_for = getattr(self.commit_log, "path_for", None)
            if callable(path_for):
                path = str(path_for(file_from))
            else:
                directory = getattr(self.commit_log, "directory", None)
                path = str(Path(directory or "commitlog") / f"{file_from:020d}")
            self._paths[file_from] = path
        return path

    def _check_headers(self, buf: np.ndarray, h: dict[str, np.ndarray], rel: np.ndarray, offsets: np.ndarray,
                       sizes: np.ndarray, queue_offsets: np.ndarray, part: np.ndarray, file_from: int) -> None:
        # codec.check_record's checks (readers check ports too) and TOTALSIZE equal to the unit's size;
        # PHYSICALOFFSET equal to the record's position is the unit's offset
        problems = ar.record_problems(buf, h, rel, base_offset=file_from, check_ports=True, expected_sizes=sizes)
        bad = ar.any_problem(problems)
        if not bad.any():
            return
        i = int(np.argmax(bad))
        reasons = [ar.PROBLEM_DESCRIPTIONS[name] for name, mask in problems.items() if mask[i]]
        where = self.ranges[int(part[i])]
        raise _UnitMismatch(
            f"record does not match consume-queue unit {int(queue_offsets[i])} of {where.topic}/{where.queue_id} "
            f"(size {int(sizes[i])}): {'; '.join(reasons)}", path=self._path(file_from), offset=int(offsets[i]))

    def _check_crc(self, buf: np.ndarray, h: dict[str, np.ndarray], offsets: np.ndarray, file_from: int) -> None:
        bad = ar.body_crc_mismatches(buf, h)
        if bad.any():
            i = int(np.argmax(bad))
            raise CorruptStoreError(f"BODYCRC mismatch: stored {int(h['body_crc'][i])}", path=self._path(file_from),
                                    offset=int(offsets[i]))


class _UnitMismatch(CorruptStoreError):
    """A record header disagrees with its consume-queue unit (retried once with fresh units)."""
