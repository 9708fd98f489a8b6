"""Consume-queue units + mapped commit-log files → Arrow record batches (the read path Spark uses).

One call reads a run of consecutive queue offsets of one (topic, queue). The work per batch is a
handful of numpy/Arrow calls whatever the number of rows (see ``vectorized``): Python runs once per
batch, per commit-log file touched, and per *compressed* body only. Columns that are not requested
are not decoded: without ``body`` the bodies are never copied, without ``properties``/``msgId``/
``tags``/``keys`` the properties are never parsed.

Every row is checked against the unit that points to it (``vectorized.record_problems``: the checks
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
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketstream.codec import (
    EXT_ADDRESS_MAX,
    FLAG_COMPRESSED,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decompress_body,
    java_hash,
)
from rocketstream.codec import vectorized as vz
from rocketstream.errors import CorruptStoreError, OptionError
from rocketstream.store.read.schema import TIMESTAMP_UTC, project_schema

_PROPERTY_COLUMNS = {"msgId", "tags", "keys", "properties"}


class CommitLogBuffers(Protocol):
    """What the reader needs from a commit log (``commit_log.CommitLog`` provides it)."""

    file_size: int

    def buffer_for(self, offset: int) -> tuple[int, np.ndarray]:
        """(fileFromOffset, uint8 view of the whole mapped file holding ``offset``)."""
        ...


# Stored bytes per Arrow batch. Decoded batches come out somewhat larger than the records they were
# read from (ids, hosts, property maps), so 3.5 MiB of records lands at the top of the 1-4 MiB range
# where PySpark's Arrow transfer is cheapest per row (measured: 4 MiB vs 2 MiB saved 10-30 %).
DEFAULT_BATCH_BYTES = 7 << 19

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
    batch_bytes: int = DEFAULT_BATCH_BYTES,
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
    schema = project_schema(columns)
    if batch_bytes <= 0:
        raise OptionError("batch_bytes", "must be positive", batch_bytes)
    offsets = units["offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    queue_offsets = np.arange(len(units), dtype=np.int64) + queue_offset_start
    tag_set = frozenset(tags) if tags else None
    codes = None
    if tag_set is not None:
        codes = np.fromiter((java_hash(t) for t in tag_set), dtype=np.int64, count=len(tag_set))
        hit = tags_code_may_match(units["tags_code"], codes)
        offsets, sizes, queue_offsets = offsets[hit], sizes[hit], queue_offsets[hit]
    reader = _BatchReader(commit_log, schema, topic=topic, queue_id=queue_id, broker_name=broker_name,
                          tag_set=tag_set, check_crc=check_crc)
    for lo, hi in batch_bounds(sizes, batch_bytes):
        o, s, q = offsets[lo:hi], sizes[lo:hi], queue_offsets[lo:hi]
        try:
            batch = reader.read(o, s, q)
        except _UnitMismatch:
            if reread is None:
                raise
            o, s, q = _fresh_units(reread, q, codes)
            batch = reader.read(o, s, q)  # a second mismatch is corruption
        if batch.num_rows:
            yield batch


def _fresh_units(reread: Callable[[int, int], np.ndarray], queue_offsets: np.ndarray,
                 codes: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, sizes, queue offsets) of the same queue offsets read again; units whose tagsCode no
    longer matches the tag filter are dropped (the fresh unit is the truth)."""
    first = int(queue_offsets[0])
    units = reread(first, int(queue_offsets[-1]) + 1)[queue_offsets - first]
    if codes is not None:
        hit = tags_code_may_match(units["tags_code"], codes)
        units, queue_offsets = units[hit], queue_offsets[hit]
    return units["offset"].astype(np.int64), units["size"].astype(np.int64), queue_offsets


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

    def __init__(self, commit_log: CommitLogBuffers, schema: pa.Schema, *, topic: str, queue_id: int,
                 broker_name: str, tag_set: frozenset[str] | None, check_crc: bool) -> None:
        self.commit_log = commit_log
        self.schema = schema
        self.names = set(schema.names)
        self.topic = topic
        self.topic_len = len(topic.encode("utf-8"))
        self.queue_id = queue_id
        self.broker_name = broker_name
        self.tag_set = tag_set
        self.check_crc = check_crc
        self.columns = ColumnBuilder(schema, broker_name, tag_set)
        self.parse_props = self.columns.parse_props

    def read(self, offsets: np.ndarray, sizes: np.ndarray, queue_offsets: np.ndarray) -> pa.RecordBatch:
        # Records never span files; a batch spans several only at file boundaries.
        file_size = self.commit_log.file_size
        file_index = offsets // file_size
        cuts = np.flatnonzero(file_index[1:] != file_index[:-1]) + 1
        parts = []
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(offsets)], strict=True):
            parts.append(self._read_file_run(offsets[lo:hi], sizes[lo:hi], queue_offsets[lo:hi]))
        parts = [p for p in parts if p.num_rows]
        if len(parts) <= 1:
            return parts[0] if parts else _empty_batch(self.schema)
        return pa.Table.from_batches(parts, schema=self.schema).combine_chunks().to_batches()[0]

    def _read_file_run(self, offsets: np.ndarray, sizes: np.ndarray, queue_offsets: np.ndarray) -> pa.RecordBatch:
        file_from, buf = self.commit_log.buffer_for(int(offsets[0]))
        buf = vz.as_uint8(buf)
        rel = offsets - file_from
        h = vz.decode_headers(buf, rel, topic_len_hint=self.topic_len)
        self._check_headers(buf, h, rel, offsets, sizes, queue_offsets, file_from)
        props = tag_col = keys_col = uniq_col = None
        if self.parse_props:
            raw = vz.gather_segments(buf, h["props_pos"], h["props_len"], pa.binary())
            props, tag_col, keys_col, uniq_col = self.columns.properties(raw)
            if self.tag_set is not None:
                keep = pc.fill_null(pc.is_in(tag_col, value_set=pa.array(sorted(self.tag_set), pa.string())), False)
                if not pc.all(keep).as_py():
                    sel = np.flatnonzero(keep.to_numpy(zero_copy_only=False))
                    h = {k: v[sel] if isinstance(v, np.ndarray) and v.ndim else v for k, v in h.items()}
                    offsets, sizes, queue_offsets = offsets[sel], sizes[sel], queue_offsets[sel]
                    index = vz.numeric_array(sel)
                    props, tag_col, keys_col, uniq_col = (None if a is None else a.take(index)
                                                          for a in (props, tag_col, keys_col, uniq_col))
                    if not len(sel):
                        return _empty_batch(self.schema)
        if self.check_crc:
            self._check_crc(buf, h, offsets, file_from)
        return self.columns.assemble(buf, h, self.topic, self.queue_id, offsets, sizes, queue_offsets,
                                     props=props, tags=tag_col, keys=keys_col, uniq=uniq_col,
                                     path=self._path(file_from))

    def _path(self, file_from: int) -> str:
        path_for = getattr(self.commit_log, "path_for", None)
        if callable(path_for):
            return str(path_for(file_from))
        directory = getattr(self.commit_log, "directory", None)
        return str(Path(directory or "commitlog") / f"{file_from:020d}")

    def _check_headers(self, buf: np.ndarray, h: dict[str, np.ndarray], rel: np.ndarray, offsets: np.ndarray,
                       sizes: np.ndarray, queue_offsets: np.ndarray, file_from: int) -> None:
        # codec.check_record's checks (readers check ports too) and TOTALSIZE equal to the unit's size;
        # PHYSICALOFFSET equal to the record's position is the unit's offset
        problems = vz.record_problems(buf, h, rel, base_offset=file_from, check_ports=True, expected_sizes=sizes)
        bad = vz.any_problem(problems)
        if not bad.any():
            return
        i = int(np.argmax(bad))
        reasons = [vz.PROBLEM_DESCRIPTIONS[name] for name, mask in problems.items() if mask[i]]
        raise _UnitMismatch(
            f"record does not match consume-queue unit {int(queue_offsets[i])} of {self.topic}/{self.queue_id} "
            f"(size {int(sizes[i])}): {'; '.join(reasons)}", path=self._path(file_from), offset=int(offsets[i]))

    def _check_crc(self, buf: np.ndarray, h: dict[str, np.ndarray], offsets: np.ndarray, file_from: int) -> None:
        bad = vz.body_crc_mismatches(buf, h)
        if bad.any():
            i = int(np.argmax(bad))
            raise CorruptStoreError(f"BODYCRC mismatch: stored {int(h['body_crc'][i])}", path=self._path(file_from),
                                    offset=int(offsets[i]))


class ColumnBuilder:
    """Arrow columns of ``schema`` from records decoded by ``vectorized.decode_headers`` - shared by the local
    read (records in a mapped commit-log file) and network mode (records in a pull body, spark/network_view.py).

    ``properties`` parses the PROPERTIES bytes into the map column and the single-property columns asked for
    (TAGS also for a tag re-check); ``assemble`` builds the batch. Columns holding one value in every row
    (topic, broker, queue id, usually the hosts) are cached by (column, value, rows): batches of a run mostly
    have the same row count, and Arrow arrays are immutable, so one array serves them all."""

    def __init__(self, schema: pa.Schema, broker_name: str, tag_set: frozenset[str] | None) -> None:
        self.schema = schema
        self.names = set(schema.names)
        self.broker_name = broker_name
        self.parse_props = bool(self.names & _PROPERTY_COLUMNS) or tag_set is not None
        self.wanted_properties = tuple(
            prop for prop, needed in ((PROPERTY_TAGS, "tags" in self.names or tag_set is not None),
                                      (PROPERTY_KEYS, "keys" in self.names), (PROPERTY_UNIQ_KEY, "msgId" in self.names))
            if needed)
        self._constants: dict[tuple[str, object, int], pa.Array] = {}

    def properties(self, raw: pa.Array) -> tuple[pa.Array, ...]:
        """(properties map, TAGS, KEYS, UNIQ_KEY) of the stored PROPERTIES bytes; a column not asked for is None."""
        # never an error: bytes that are not UTF-8 read as Java's new String(bytes, UTF_8) reads them
        props, wanted = vz.parse_properties(vz.properties_text(raw), self.wanted_properties)
        return props, wanted.get(PROPERTY_TAGS), wanted.get(PROPERTY_KEYS), wanted.get(PROPERTY_UNIQ_KEY)

    def assemble(self, buf: np.ndarray, h: dict[str, np.ndarray], topic: str, queue_id: int, offsets: np.ndarray,
                 sizes: np.ndarray, queue_offsets: np.ndarray, *, props: pa.Array | None, tags: pa.Array | None,
                 keys: pa.Array | None, uniq: pa.Array | None, path: str) -> pa.RecordBatch:
        """The batch of the records ``h`` in ``buf`` (``offsets``: their commit-log offsets, ``sizes``,
        ``queue_offsets``). ``path`` names where the records are for a compressed body that does not inflate."""
        n = len(offsets)
        offset_ids = None
        arrays = []
        for name in self.schema.names:
            if name == "topic":
                arr = self._constant(name, topic, n)
            elif name == "brokerName":
                arr = self._constant(name, self.broker_name, n)
            elif name == "queueId":
                arr = self._constant(name, queue_id, n)
            elif name == "queueOffset":
                arr = vz.numeric_array(queue_offsets)
            elif name == "commitLogOffset":
                arr = vz.numeric_array(offsets)
            elif name == "storeSize":
                arr = vz.numeric_array(sizes, pa.int32())
            elif name == "msgId" and uniq is not None and uniq.null_count == 0:
                arr = uniq  # every record carries a UNIQ_KEY: no offset ids needed
            elif name in ("msgId", "offsetMsgId"):
                if offset_ids is None:
                    offset_ids = vz.offset_msg_ids(buf, h["store_host_pos"], h["store_v6"], offsets,
                                                    h.get("store_key"))
                arr = offset_ids if name == "offsetMsgId" else pc.coalesce(uniq, offset_ids)
            elif name == "tags":
                arr = tags
            elif name == "keys":
                arr = keys
            elif name == "body":
                arr = self.bodies(buf, h, offsets, path)
            elif name == "properties":
                arr = props
            elif name == "bornTimestamp":
                arr = _timestamps(h["born_timestamp"])
            elif name == "storeTimestamp":
                arr = _timestamps(h["store_timestamp"])
            elif name == "bornHost":
                arr = self._hosts(buf, h, "born", n)
            elif name == "storeHost":
                arr = self._hosts(buf, h, "store", n)
            elif name == "sysFlag":
                arr = vz.numeric_array(h["sys_flag"], pa.int32())
            elif name == "bodyCRC":
                arr = vz.numeric_array(h["body_crc"], pa.int32())
            elif name == "reconsumeTimes":
                arr = vz.numeric_array(h["reconsume_times"], pa.int32())
            elif name == "flag":
                arr = vz.numeric_array(h["flag"], pa.int32())
            else:  # preparedTransactionOffset
                arr = vz.numeric_array(h["prepared_transaction_offset"])
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def bodies(self, buf: np.ndarray, h: dict[str, np.ndarray], offsets: np.ndarray, path: str) -> pa.Array:
        """The BODY column; compressed bodies (SYSFLAG bit 0) inflated (CorruptStoreError at ``path``)."""
        stored = vz.gather_segments(buf, h["body_pos"], h["body_len"], pa.binary())
        compressed = np.flatnonzero(h["sys_flag"] & FLAG_COMPRESSED)
        if len(compressed) == 0:
            return stored
        # Rebuild the data buffer: untouched runs are copied as slices, compressed bodies replaced.
        off = np.frombuffer(stored.buffers()[1], dtype=np.int32)[stored.offset:stored.offset + len(stored) + 1]
        data = memoryview(stored.buffers()[2]) if stored.buffers()[2] is not None else memoryview(b"")
        pieces: list[bytes | memoryview] = []
        lengths = np.diff(off).astype(np.int64)
        run_start = 0
        for i in compressed.tolist():
            pieces.append(data[off[run_start]:off[i]])
            body = decompress_body(bytes(data[off[i]:off[i + 1]]), int(h["sys_flag"][i]), path=path,
                                   offset=int(offsets[i]))
            pieces.append(body)
            lengths[i] = len(body)
            run_start = i + 1
        pieces.append(data[off[run_start]:off[-1]])
        new_offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=new_offsets[1:])
        if new_offsets[-1] > 2**31 - 1:
            raise CorruptStoreError("decompressed bodies of one batch exceed 2 GiB; lower batch_bytes",
                                    path=path, offset=int(offsets[0]))
        return vz.binary_from_parts(b"".join(pieces), new_offsets, pa.binary())

    def _constant(self, name: str, value: object, n: int) -> pa.Array:
        key = (name, value, n)
        arr = self._constants.get(key)
        if arr is None:
            if len(self._constants) >= 64:  # row counts vary (file ends, last batch): stay small
                self._constants.clear()
            if isinstance(value, str):
                arr = vz.repeat_string(value, n)
            else:
                arr = vz.numeric_array(np.full(n, value, dtype=np.int32), pa.int32())
            self._constants[key] = arr
        return arr

    def _hosts(self, buf: np.ndarray, h: dict[str, np.ndarray], side: str, n: int) -> pa.Array:
        keys = h.get(f"{side}_key")  # present when no host of the batch is IPv6
        if keys is not None and n and (keys == keys[0]).all():
            return self._constant(f"{side}Host", vz.format_ipv4_host(int(keys[0])), n)
        return vz.host_strings(buf, h[f"{side}_host_pos"], h[f"{side}_v6"], keys)


class _UnitMismatch(CorruptStoreError):
    """A record header disagrees with its consume-queue unit (retried once with fresh units)."""


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


def _timestamps(millis: np.ndarray) -> pa.Array:
    micros = np.asarray(millis, dtype=np.int64) * 1000
    return pa.Array.from_buffers(TIMESTAMP_UTC, len(micros), [None, pa.py_buffer(micros)])

