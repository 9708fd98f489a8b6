"""RocketMQ records → Arrow: the one place stored records become Arrow record batches.

Both readers go through here: the local read (records in a mapped commit-log file, located by
consume-queue units: ``store/read/bulk_read.py``) and network mode (records back to back in a
PULL_MESSAGE body: :class:`PullBodyDecoder`). What lives here:

* the row schema, :data:`MESSAGE_SCHEMA` (``MessageExt`` field names in camelCase), its projections
  (:func:`project_schema`) and Spark DDL (:func:`spark_ddl`);
* :data:`BATCH_BYTES`, the stored bytes per Arrow batch both readers aim at;
* the vectorized header decode (:func:`decode_headers`) over the one header layout
  (``constants.HEADER_V4_FIELDS``), and :func:`record_problems`, ``record.check_record``'s numpy twin;
* the Arrow pieces: variable-length segments, hosts, offset message ids, properties maps;
* :class:`ColumnBuilder`, which assembles a batch of any projection from decoded headers;
* pull bodies: :func:`record_starts`, :func:`pack_pull_bodies` and :class:`PullBodyDecoder`.

``record.decode_record`` is the reference decoder, one record per call. This module computes the same
values for a whole batch of records inside one buffer, without a Python loop per record on the common
path:

* fixed-width header fields come from one fancy-index over a sliding-window view of the buffer (a
  memcpy of each header into a contiguous ``(n, width)`` matrix), reinterpreted with the big-endian
  structured dtype ``HEADER_V4_DTYPE``. Records whose hosts are IPv6 shift every later field by 12
  bytes each; those batches use three gathers at per-record positions instead of one.
* variable-length pieces (bodies, properties) become Arrow arrays through ``take`` on a binary array
  whose offsets point into the buffer, so Arrow's C++ kernel does the copying.
* properties are split with Arrow string kernels; host strings are formatted once per distinct
  (ip, port) value.

This is the codec module that imports pyarrow (``import rocketstream.codec`` does not load it).
"""

from __future__ import annotations

import functools
import mmap
import socket
import struct
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rocketstream.codec.compression import decompress_body
from rocketstream.codec.constants import (
    FLAG_BORNHOST_V6,
    FLAG_COMPRESSED,
    FLAG_STOREHOST_V6,
    HEADER_V4_DTYPE,
    HEADER_V4_SIZE,
    INT32,
    MAGIC_V1,
    MAGIC_V2,
    POS_MAGIC,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from rocketstream.codec.ids import HEX_PAIRS, HostAddress
from rocketstream.codec.properties import java_utf8_bytes
from rocketstream.codec.record import RECORD_CHECKS, crc32, record_size
from rocketstream.errors import BodyError, CorruptStoreError, OptionError

# Stored record bytes per Arrow batch, for both readers. Decoded batches come out somewhat larger than the
# records they were read from (ids, hosts, property maps), so 3.5 MiB of records lands at the top of the
# 1-4 MiB range where PySpark's Arrow transfer is cheapest per row (DESIGN.md's measured facts; measured
# here: 4 MiB vs 2 MiB batches saved 10-30 %).
BATCH_BYTES = 7 << 19


# --- the row schema -----------------------------------------------------------------------------
# PySpark's Python data source compares the first Arrow batch a reader yields with the Arrow form of the
# Spark schema *exactly*: field order, types (``binary`` not ``large_binary``, ``timestamp[us, tz="UTC"]``
# with the literal zone name), nullability, and the map's nullable values. So the schema is written out
# here once, and the Spark DDL string is derived from it rather than kept by hand. Field names are
# RocketMQ ``MessageExt`` names in camelCase. ``tags`` and ``keys`` are null when the message has none;
# every other field is non-null.
TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")
PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())  # key non-null, value nullable (Spark's layout)

MESSAGE_FIELDS: tuple[pa.Field, ...] = (
    pa.field("topic", pa.string(), nullable=False),
    pa.field("brokerName", pa.string(), nullable=False),
    pa.field("queueId", pa.int32(), nullable=False),
    pa.field("queueOffset", pa.int64(), nullable=False),
    pa.field("commitLogOffset", pa.int64(), nullable=False),
    pa.field("storeSize", pa.int32(), nullable=False),
    pa.field("msgId", pa.string(), nullable=False),
    pa.field("offsetMsgId", pa.string(), nullable=False),
    pa.field("tags", pa.string(), nullable=True),
    pa.field("keys", pa.string(), nullable=True),
    pa.field("body", pa.binary(), nullable=False),
    pa.field("properties", PROPERTIES_TYPE, nullable=False),
    pa.field("bornTimestamp", TIMESTAMP_UTC, nullable=False),
    pa.field("bornHost", pa.string(), nullable=False),
    pa.field("storeTimestamp", TIMESTAMP_UTC, nullable=False),
    pa.field("storeHost", pa.string(), nullable=False),
    pa.field("sysFlag", pa.int32(), nullable=False),
    pa.field("bodyCRC", pa.int32(), nullable=False),
    pa.field("reconsumeTimes", pa.int32(), nullable=False),
    pa.field("flag", pa.int32(), nullable=False),
    pa.field("preparedTransactionOffset", pa.int64(), nullable=False),
)

MESSAGE_SCHEMA: pa.Schema = pa.schema(list(MESSAGE_FIELDS))
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in MESSAGE_FIELDS)


def project_schema(columns: Sequence[str] | None) -> pa.Schema:
    """The sub-schema holding ``columns`` in the order given (all fields when ``None``).

    Raises ``OptionError`` (a ValueError) naming the unknown or repeated column, with the valid names.
    """
    if columns is None:
        return MESSAGE_SCHEMA
    seen: set[str] = set()
    fields = []
    for name in columns:
        if name not in FIELD_NAMES:
            raise OptionError("columns", f"unknown message column {name!r}; valid columns: {', '.join(FIELD_NAMES)}")
        if name in seen:
            raise OptionError("columns", f"message column {name!r} requested twice")
        seen.add(name)
        fields.append(MESSAGE_SCHEMA.field(name))
    return pa.schema(fields)


_DDL_TYPES = {
    pa.string(): "STRING",
    pa.binary(): "BINARY",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    TIMESTAMP_UTC: "TIMESTAMP",
    PROPERTIES_TYPE: "MAP<STRING, STRING>",
}


def spark_ddl(schema: pa.Schema = MESSAGE_SCHEMA) -> str:
    """Spark DDL for ``schema`` (``MESSAGE_SCHEMA`` or a projection of it), with ``NOT NULL`` marks.

    Spark turns this back into exactly the Arrow schema above: ``TIMESTAMP`` becomes
    ``timestamp[us, tz=UTC]`` and ``MAP<STRING, STRING>`` has nullable values.
    """
    parts = []
    for f in schema:
        try:
            ddl_type = _DDL_TYPES[f.type]
        except KeyError:
            raise OptionError("schema", f"column {f.name!r} has type {f.type} with no Spark DDL mapping") from None
        parts.append(f"`{f.name}` {ddl_type}" + ("" if f.nullable else " NOT NULL"))
    return ", ".join(parts)


# --- headers of many records at once ------------------------------------------------------------
# HEADER_V4_DTYPE (constants.HEADER_V4_FIELDS): the 88-byte header when both hosts are IPv4.
# The part before BORNHOST, at the same position whatever the hosts are.
_FIXED_DTYPE = np.dtype(HEADER_V4_DTYPE.descr[:9])
_FIXED_SIZE = _FIXED_DTYPE.itemsize  # 48
# RECONSUMETIMES, PREPARED TRANSACTION OFFSET, BODY length: after the store host.
_TAIL_DTYPE = np.dtype(HEADER_V4_DTYPE.descr[-3:])
_V6_HOST_EXTRA = 12
# BORNHOST and STOREHOST of the IPv4 header (ip then port, 8 bytes each) read as one big-endian integer each
_HOST_KEYS_DTYPE = np.dtype([("before", f"V{_FIXED_SIZE}"), ("born_key", ">u8"), ("store_timestamp", "V8"),
                             ("store_key", ">u8"), ("after", f"V{HEADER_V4_SIZE - _FIXED_SIZE - 24}")])

# Two ASCII hex digits per byte value, packed so that viewing uint16 as bytes gives "HL" in order.
_HEX_PAIRS = HEX_PAIRS.view(np.uint16).reshape(256)
_INT32_MAX = 2**31 - 1
# Arrow types used as argument defaults (built once, not per call)
_BINARY = pa.binary()
_INT64 = pa.int64()


# What the decoders read from: a mapped commit-log file, bytes, or a numpy view of either.
BufferLike: TypeAlias = bytes | bytearray | memoryview | mmap.mmap | np.ndarray


def as_uint8(buf: BufferLike) -> npt.NDArray[np.uint8]:
    """A 1-D uint8 view of anything with the buffer protocol (no copy)."""
    if isinstance(buf, np.ndarray):
        if buf.dtype == np.uint8 and buf.ndim == 1:
            same: npt.NDArray[np.uint8] = buf
            return same
        return buf.reshape(-1).view(np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


def _unaligned(buf: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """View whose element i is the ``dtype`` value stored at ``buf[i:i+itemsize]`` (stride 1 byte)."""
    view: np.ndarray = np.ndarray(shape=(len(buf) - dtype.itemsize + 1,), dtype=dtype, buffer=buf, strides=(1,))
    return view


def _gather_values(buf: np.ndarray, positions: np.ndarray, dtype: str, ok: np.ndarray) -> np.ndarray:
    """The ``dtype`` value at each position (big-endian as stored), native-endian; like _gather_rows."""
    dt = np.dtype(dtype)
    fits = (positions >= 0) & (positions <= len(buf) - dt.itemsize)
    ok &= fits
    if len(buf) < dt.itemsize:
        return np.zeros(len(positions), dtype=dt.newbyteorder("="))
    return _unaligned(buf, dt)[np.where(fits, positions, 0)].astype(dt.newbyteorder("="))


def _gather_rows(buf: np.ndarray, positions: np.ndarray, width: int, ok: np.ndarray) -> np.ndarray:
    """``buf[p:p+width]`` for every position, as a contiguous ``(n, width)`` matrix.

    Positions whose window would leave the buffer read from position 0 instead and are cleared in
    ``ok`` (in place), so garbage lengths never index out of bounds.
    """
    fits = (positions >= 0) & (positions <= len(buf) - width)
    ok &= fits
    safe = np.where(fits, positions, 0)
    if len(buf) < width:
        return np.zeros((len(positions), width), dtype=np.uint8)
    # Each window as one opaque ``width``-byte item: numpy copies items with one memcpy each, about
    # 3x faster than fancy-indexing rows of a 2-D sliding window view.
    cells = np.ndarray(shape=(len(buf) - width + 1,), dtype=np.dtype((np.void, width)), buffer=buf, strides=(1,))
    rows: npt.NDArray[np.uint8] = cells[safe].view(np.uint8).reshape(len(positions), width)
    return rows


def decode_headers(buf: BufferLike, rel_positions: np.ndarray, *,
                   topic_len_hint: int | None = None) -> dict[str, np.ndarray]:
    """Header fields of the records starting at ``rel_positions`` in ``buf`` (one mapped file).

    Returns native-endian arrays: ``total_size, magic, body_crc, queue_id, flag, queue_offset,
    physical_offset, sys_flag, born_timestamp, store_timestamp, reconsume_times,
    prepared_transaction_offset`` as in the record; ``born_host_pos, store_host_pos`` (buffer
    positions of the 8- or 20-byte ip+port fields) with ``born_v6, store_v6, born_port, store_port``
    (and ``born_key, store_key``, the 8 ip+port bytes as one uint64, when no host is IPv6);
    ``body_pos, body_len, topic_pos, topic_len, props_pos, props_len`` (positions relative to
    ``buf``); ``v2`` (magic V2); ``in_bounds`` (every field read lies inside ``buf``). Nothing is
    validated beyond bounds (see :func:`record_problems`): positions that are not records give
    garbage values, never errors; but every value a record that passes ``record_problems``' earlier
    checks needs is the one stored (as ``record.check_record`` reads it).

    ``topic_len_hint``: the UTF-8 length of the topic the records are expected to have. When every
    record matches it, TOPIC and PROPERTIES lengths come from one gather instead of two dependent ones.
    """
    data = as_uint8(buf)
    pos = np.asarray(rel_positions, dtype=np.int64)
    n = len(pos)
    ok = np.ones(n, dtype=bool)
    # The 88-byte IPv4 header is inside every record (IPv6 records are longer), so gather it first
    # and look at the IPv6 bits in its SYSFLAG.
    rows = _gather_rows(data, pos, HEADER_V4_SIZE, ok)
    head = rows.view(HEADER_V4_DTYPE)[:, 0]
    sys_flag = head["sys_flag"].astype(np.int32)
    born_v6 = (sys_flag & FLAG_BORNHOST_V6) != 0
    store_v6 = (sys_flag & FLAG_STOREHOST_V6) != 0
    out: dict[str, np.ndarray] = {"sys_flag": sys_flag}
    for name in ("total_size", "magic", "body_crc", "queue_id", "flag"):
        out[name] = head[name].astype(np.int32)
    for name in ("queue_offset", "physical_offset", "born_timestamp"):
        out[name] = head[name].astype(np.int64)
    if not ok.all():
        # near the end of the buffer the 88-byte gather read position 0: TOTALSIZE and MAGICCODE
        # are still the stored ones wherever their 8 bytes fit (the first checks look at them)
        near_end = np.flatnonzero(~ok & (pos >= 0) & (pos <= len(data) - 8))
        if len(near_end):
            pair = _gather_rows(data, pos[near_end], 8, np.ones(len(near_end), dtype=bool)).view(">i4")
            out["total_size"][near_end] = pair[:, 0]
            out["magic"][near_end] = pair[:, 1]
    if not (born_v6.any() or store_v6.any()):
        for name in ("reconsume_times", "body_len", "born_port", "store_port"):
            out[name] = head[name].astype(np.int32)
        for name in ("store_timestamp", "prepared_transaction_offset"):
            out[name] = head[name].astype(np.int64)
        born_len = store_len = np.int64(8)
        # ip and port as one integer (the 8 stored bytes, big-endian) for host strings and offset ids
        keys = rows.view(_HOST_KEYS_DTYPE)[:, 0]
        out["born_key"] = keys["born_key"].astype(np.uint64)
        out["store_key"] = keys["store_key"].astype(np.uint64)
    else:
        born_len = np.where(born_v6, 8 + _V6_HOST_EXTRA, 8).astype(np.int64)
        store_len = np.where(store_v6, 8 + _V6_HOST_EXTRA, 8).astype(np.int64)
        store_ts_pos = pos + _FIXED_SIZE + born_len
        out["store_timestamp"] = _gather_values(data, store_ts_pos, ">i8", ok)
        tail = _gather_rows(data, store_ts_pos + 8 + store_len, _TAIL_DTYPE.itemsize, ok).view(_TAIL_DTYPE)[:, 0]
        out["reconsume_times"] = tail["reconsume_times"].astype(np.int32)
        out["prepared_transaction_offset"] = tail["prepared_transaction_offset"].astype(np.int64)
        out["body_len"] = tail["body_len"].astype(np.int32)
        for side, v6, host_pos in (("born", born_v6, pos + _FIXED_SIZE), ("store", store_v6, store_ts_pos + 8)):
            port_pos = host_pos + np.where(v6, 16, 4)
            out[f"{side}_port"] = _gather_values(data, port_pos, ">i4", ok)
    out["born_v6"] = born_v6
    out["store_v6"] = store_v6
    out["born_host_pos"] = pos + _FIXED_SIZE
    out["store_host_pos"] = pos + _FIXED_SIZE + born_len + 8
    body_pos = pos + (HEADER_V4_SIZE - 16) + born_len + store_len
    body_len = out["body_len"].astype(np.int64)
    v2 = out["magic"] == MAGIC_V2
    tl_pos = body_pos + np.maximum(body_len, 0)
    lengths = None
    if topic_len_hint is not None and 0 <= topic_len_hint <= 127 and not v2.any():
        lengths = _topic_and_props_lengths_v1(data, tl_pos, topic_len_hint, ok)
    if lengths is None:
        lengths = _topic_and_props_lengths(data, tl_pos, v2, ok)
    topic_len, props_len = lengths
    topic_pos = tl_pos + np.where(v2, 2, 1)
    props_pos = topic_pos + np.maximum(topic_len, 0) + 2
    ok &= props_pos + np.maximum(props_len, 0) <= len(data)
    out.update(body_pos=body_pos, body_len=body_len, topic_pos=topic_pos, topic_len=topic_len,
               props_pos=props_pos, props_len=props_len, v2=v2, in_bounds=ok)
    return out


def _topic_and_props_lengths(data: np.ndarray, tl_pos: np.ndarray, v2: np.ndarray,
                             ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TOPIC length (int8 for V1, int16 for V2, signed as Java reads them) and PROPERTIES length (int16)."""
    tl_raw = _gather_values(data, tl_pos, ">u2", ok)  # V1 uses the first byte; a V1 record has >= 3 more
    topic_len = np.where(v2, tl_raw.astype(np.int16), (tl_raw >> 8).astype(np.uint8).view(np.int8)).astype(np.int64)
    pl_pos = tl_pos + np.where(v2, 2, 1) + np.maximum(topic_len, 0)
    props_len = _gather_values(data, pl_pos, ">i2", ok).astype(np.int64)
    return topic_len, props_len


def _topic_and_props_lengths_v1(data: np.ndarray, tl_pos: np.ndarray, hint: int,
                                ok: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Both lengths from one gather of [TOPIC length, TOPIC, PROPERTIES length], if every V1 record
    has a topic of ``hint`` bytes; None otherwise."""
    fits = ok.copy()
    window = _gather_rows(data, tl_pos, 1 + hint + 2, fits)
    topic_len = window[:, 0].view(np.int8).astype(np.int64)
    if not np.array_equal(fits, ok) or not np.all(topic_len[fits] == hint):
        return None   # a window left the buffer (maybe a shorter topic at its end) or a topic differs
    ok &= fits
    props_len = np.ascontiguousarray(window[:, 1 + hint:]).view(">i2")[:, 0].astype(np.int64)
    return topic_len, props_len


# --- the record validator's numpy twin ----------------------------------------------------------
UNIT_SIZE_CHECK = "unit_size"
PROBLEM_DESCRIPTIONS: dict[str, str] = {**RECORD_CHECKS,
                                        UNIT_SIZE_CHECK: "TOTALSIZE differs from the consume-queue unit size"}
_MIN_V1 = record_size(0, 0, 0)
_MIN_V2 = record_size(0, 0, 0, v2=True)


def record_problems(buf: BufferLike, h: dict[str, np.ndarray], rel_positions: np.ndarray, *, base_offset: int = 0,
                    check_crc: bool = False, check_ports: bool = False, check_position: bool = True,
                    expected_sizes: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """``record.check_record`` for every record of ``h`` (``decode_headers(buf, rel_positions)``) at
    once: one mask per check (True = the record fails it), keyed like ``record.RECORD_CHECKS`` and in
    its order. A record passes when no mask is set; the first mask set for a record is the check
    ``check_record`` reports for it (a later mask may be set from garbage values when an earlier one
    is). Same flags as ``check_record``; ``expected_sizes`` (consume-queue unit sizes) adds
    ``UNIT_SIZE_CHECK``, TOTALSIZE equal to it (``ConsumeQueue`` units point at whole records).
    BODYCRC is computed only for records that pass every check before it."""
    data = as_uint8(buf)
    pos = np.asarray(rel_positions, dtype=np.int64)
    total = h["total_size"].astype(np.int64)
    magic = h["magic"]
    v2 = magic == MAGIC_V2
    end = pos + total
    tl_width = np.where(v2, 2, 1)
    body_pos, body_len, topic_len, props_len = h["body_pos"], h["body_len"], h["topic_len"], h["props_len"]
    out: dict[str, np.ndarray] = {
        "header": (pos < 0) | (pos > len(data) - 8),
        "magic": ~v2 & (magic != MAGIC_V1),
        "size": total < np.where(v2, _MIN_V2, _MIN_V1),
        "truncated": end > len(data),
        "hosts": body_pos + tl_width + 2 > end,
    }
    if check_ports:
        out["ports"] = (h["born_port"] < 0) | (h["born_port"] > 0xFFFF) | (h["store_port"] < 0) \
            | (h["store_port"] > 0xFFFF)
    out["body"] = (body_len < 0) | (body_pos + body_len + tl_width + 2 > end)
    if check_crc:
        earlier = np.zeros(len(pos), dtype=bool)
        for mask in out.values():
            earlier |= mask
        out["crc"] = body_crc_mismatches(data, h, ~earlier)
    out["topic"] = (topic_len < 0) | (h["topic_pos"] + topic_len + 2 > end)
    out["properties"] = props_len < 0
    out["formula"] = h["props_pos"] + props_len != end
    if check_position:
        out["position"] = h["physical_offset"] != base_offset + pos
    if expected_sizes is not None:
        out[UNIT_SIZE_CHECK] = total != np.asarray(expected_sizes, dtype=np.int64)
    return out


def any_problem(problems: dict[str, np.ndarray]) -> np.ndarray:
    """True where a record fails any check of ``record_problems``."""
    bad = np.zeros(len(next(iter(problems.values()))), dtype=bool)
    for mask in problems.values():
        bad |= mask
    return bad


def body_crc_mismatches(buf: BufferLike, h: dict[str, np.ndarray], which: np.ndarray | None = None) -> np.ndarray:
    """True where the record's body fails ``record.body_crc_problem``'s rule (a non-empty body whose
    crc32 & 0x7FFFFFFF differs from BODYCRC); only the records in ``which`` are computed."""
    mv = as_uint8(buf).data
    body_len = h["body_len"]
    bad = np.zeros(len(body_len), dtype=bool)
    todo = body_len > 0 if which is None else which & (body_len > 0)
    idx = np.flatnonzero(todo)
    starts, lengths, stored = h["body_pos"][idx].tolist(), body_len[idx].tolist(), h["body_crc"][idx].tolist()
    for k, start, length, crc in zip(idx.tolist(), starts, lengths, stored, strict=True):
        if crc32(mv[start:start + length]) & 0x7FFFFFFF != crc:
            bad[k] = True
    return bad


# --- variable-length pieces as Arrow arrays ----------------------------------------------------
def gather_segments(buf: BufferLike, starts: np.ndarray, lengths: np.ndarray,
                    type_: pa.DataType = _BINARY) -> pa.Array:
    """``[buf[s:s+l] for s, l in ...]`` as one Arrow binary/string array with contiguous data.

    Ascending, non-overlapping segments (records of one queue in commit-log order) are copied by
    Arrow's ``take`` over a binary array whose offsets point into ``buf`` — ``2n`` elements
    alternating segment / gap, of which the even ones are taken. Other orders are sorted first;
    overlapping segments fall back to a numpy index gather. No UTF-8 validation for ``string``.
    """
    data = as_uint8(buf)
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(starts)
    if n == 0:
        return pa.array([], type=type_)
    width = int(lengths[0])
    if 0 < width and width * n <= _INT32_MAX and bool((lengths == width).all()):
        return _gather_fixed(data, starts, width, type_)
    ends = starts + lengths
    order = None
    if n > 1 and not np.all(starts[1:] >= ends[:-1]):
        order = np.argsort(starts, kind="stable")
        s_sorted, e_sorted = starts[order], ends[order]
        if not np.all(s_sorted[1:] >= e_sorted[:-1]):
            return _gather_by_index(data, starts, lengths, type_)
        starts, ends = s_sorted, e_sorted
    lo, hi = int(starts[0]), int(ends[-1])
    if hi - lo > _INT32_MAX:
        return _gather_by_index(data, starts, lengths, type_)
    offsets = np.empty(2 * n + 1, dtype=np.int32)
    offsets[0:2 * n:2] = starts - lo
    offsets[1:2 * n:2] = ends - lo
    offsets[2 * n] = hi - lo
    window = pa.py_buffer(data[lo:hi])
    interleaved = pa.Array.from_buffers(type_, 2 * n, [None, pa.py_buffer(offsets), window])
    if order is None:
        return interleaved.take(_even_index(n))
    index = np.empty(n, dtype=np.int64)
    index[order] = np.arange(0, 2 * n, 2, dtype=np.int64)
    return interleaved.take(numeric_array(index))


def _gather_fixed(data: np.ndarray, starts: np.ndarray, width: int, type_: pa.DataType) -> pa.Array:
    """``gather_segments`` when every segment is ``width`` bytes (one producer's bodies, UNIQ_KEYs), without
    ``take``: one numpy gather of ``width``-byte items (a memcpy each) into an ``(n, width)`` matrix, whose
    offsets are ``i * width``. Measured on 8,333 bodies of 256 B at varying strides: 12 ns a row against 39
    for ``take``; over a whole 1 M x 256 B store read, 0.90x the CPU of the earlier copy into Arrow's pool,
    with as many page faults (the freed matrices' memory comes back from glibc's heap once its mmap threshold
    has grown past their size)."""
    n = len(starts)
    cells = np.ndarray(shape=(len(data) - width + 1,), dtype=np.dtype((np.void, width)), buffer=data, strides=(1,))
    return binary_from_parts(cells[starts], np.arange(n + 1, dtype=np.int64) * width, type_)


@functools.lru_cache(maxsize=16)
def _even_index(n: int) -> pa.Array:
    """0, 2, ..., 2n-2 as an Arrow index (a few row counts recur batch after batch)."""
    return numeric_array(np.arange(0, 2 * n, 2, dtype=np.int64))


def _gather_by_index(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, type_: pa.DataType) -> pa.Array:
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.arange(offsets[-1], dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    values = data[index]
    return binary_from_parts(values, offsets, type_)


def binary_from_parts(values: np.ndarray | bytes | pa.Buffer, offsets: np.ndarray,
                      type_: pa.DataType = _BINARY) -> pa.Array:
    """Arrow binary/string array from a data buffer and ``n + 1`` offsets (int32 range)."""
    n = len(offsets) - 1
    data = values if isinstance(values, pa.Buffer) else pa.py_buffer(values)
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(np.asarray(offsets, dtype=np.int32)), data])


_NUMPY_OF: dict[pa.DataType, np.dtype[Any]] = {pa.int32(): np.dtype(np.int32), pa.int64(): np.dtype(np.int64)}


def numeric_array(values: np.ndarray, type_: pa.DataType = _INT64) -> pa.Array:
    """Non-null int32/int64 Arrow array over ``values`` (converted to the native dtype if needed).

    ``pa.array(ndarray)`` costs about 16 µs a call (pandas-aware type inference, and its first call
    imports pandas); wrapping the buffer costs 2. Batches hold a dozen such columns."""
    data = np.ascontiguousarray(values, dtype=_NUMPY_OF[type_])
    return pa.Array.from_buffers(type_, len(data), [None, pa.py_buffer(data)])


def string_array(values: Sequence[str]) -> pa.Array:
    """Non-null Arrow strings from a few Python ones, built from their UTF-8 bytes and offsets: ``pa.array``
    on a list first imports pandas (pyarrow's pandas shim), ~0.3 s of CPU in a fresh Spark worker."""
    raw = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in raw], out=offsets[1:])
    return binary_from_parts(b"".join(raw), offsets, pa.string())


def bool_values(mask: pa.BooleanArray) -> np.ndarray:
    """An Arrow boolean array as a numpy bool array, null as False, unpacked from its bit buffers
    (``to_numpy`` of a boolean array first imports pandas, as ``pa.array`` does)."""
    n, at = len(mask), mask.offset
    if n == 0:
        return np.zeros(0, dtype=bool)
    validity, values = mask.buffers()
    out: np.ndarray = np.unpackbits(np.frombuffer(values, dtype=np.uint8), count=at + n, bitorder="little")[at:]
    if mask.null_count:
        out &= np.unpackbits(np.frombuffer(validity, dtype=np.uint8), count=at + n, bitorder="little")[at:]
    return out.view(bool)


def repeat_string(value: str, n: int) -> pa.Array:
    """A string column holding ``value`` n times, built from one repeated buffer (no Python list)."""
    raw = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
    if offsets[-1] > _INT32_MAX:
        return pa.array([value] * n, type=pa.string())
    return binary_from_parts(raw * n, offsets, pa.string())


def hex_upper_rows(matrix: np.ndarray) -> np.ndarray:
    """``(n, w)`` uint8 → ``(n, 2w)`` uint8 ASCII of upper-case hex, high nibble first."""
    return np.take(_HEX_PAIRS, matrix).view(np.uint8).reshape(len(matrix), -1)


# --- hosts and message ids ----------------------------------------------------------------------
def _host_matrix(data: np.ndarray, host_pos: np.ndarray, v6: np.ndarray) -> np.ndarray:
    """``(n, 20)`` rows ip(4|16) + port(4), IPv4 rows zero-padded at the end."""
    ok = np.ones(len(host_pos), dtype=bool)
    if not v6.any():
        out = np.zeros((len(host_pos), 20), dtype=np.uint8)
        out[:, :8] = _gather_rows(data, host_pos, 8, ok)
        return out
    return _gather_rows(data, host_pos, 20, ok)  # IPv4 rows carry 12 bytes of what follows; cleared below


def host_strings(buf: BufferLike, host_pos: np.ndarray, v6: np.ndarray,
                 ipv4_keys: np.ndarray | None = None) -> pa.Array:
    """``str(HostAddress)`` ("1.2.3.4:10911", "[::1]:10911") per record, formatted once per distinct host.
    ``ipv4_keys`` (``decode_headers``' born_key/store_key) saves re-reading the hosts when none is IPv6."""
    data = as_uint8(buf)
    n = len(host_pos)
    if n == 0:
        return pa.array([], type=pa.string())
    if not v6.any():
        # ip + port as one integer per record; usually a single value (the broker) or a few.
        keys = ipv4_keys if ipv4_keys is not None else _gather_values(data, host_pos, ">u8", np.ones(n, dtype=bool))
        if np.all(keys == keys[0]):
            return repeat_string(format_ipv4_host(int(keys[0])), n)
        encoded = pa.array(keys).dictionary_encode()
        texts = [_format_host(k.to_bytes(8, "big") + bytes(13)) for k in encoded.dictionary.to_pylist()]
        return pa.array(texts, type=pa.string()).take(encoded.indices)
    rows = np.zeros((n, 21), dtype=np.uint8)
    rows[:, :20] = _host_matrix(data, host_pos, v6)
    rows[~v6, 8:20] = 0
    rows[:, 20] = v6
    keys = pa.FixedSizeBinaryArray.from_buffers(pa.binary(21), n, [None, pa.py_buffer(rows)])
    encoded = keys.dictionary_encode()
    texts = [_format_host(raw) for raw in encoded.dictionary.to_pylist()]
    return pa.array(texts, type=pa.string()).take(encoded.indices)


def format_ipv4_host(key: int) -> str:
    """``str(HostAddress)`` of an IPv4 ip+port held as one integer (the 8 stored bytes, big-endian)."""
    return _format_host(key.to_bytes(8, "big") + bytes(13))


def _format_host(raw: bytes) -> str:
    if raw[20]:
        ip, port = socket.inet_ntop(socket.AF_INET6, raw[:16]), raw[16:20]
    else:
        ip, port = socket.inet_ntop(socket.AF_INET, raw[:4]), raw[4:8]
    return str(HostAddress(ip, int.from_bytes(port, "big", signed=True)))


def offset_msg_ids(buf: BufferLike, store_host_pos: np.ndarray, store_v6: np.ndarray, physical_offsets: np.ndarray,
                   ipv4_keys: np.ndarray | None = None) -> pa.Array:
    """Broker offset message ids: upper hex of store ip + port + physical offset (32 or 56 chars)."""
    data = as_uint8(buf)
    n = len(store_host_pos)
    if n == 0:
        return pa.array([], type=pa.string())
    phys = np.asarray(physical_offsets, dtype=np.int64).astype(">i8").view(np.uint8).reshape(n, 8)
    if not store_v6.any():
        hosts = ipv4_keys if ipv4_keys is not None else _gather_values(data, store_host_pos, ">u8",
                                                                        np.ones(n, dtype=bool))
        text = np.empty((n, 32), dtype=np.uint8)
        if np.all(hosts == hosts[0]):  # one broker address: its 16 hex digits once
            text[:, :16] = np.frombuffer(f"{int(hosts[0]):016X}".encode(), dtype=np.uint8)
        else:
            text[:, :16] = hex_upper_rows(hosts.astype(">u8").view(np.uint8).reshape(n, 8))
        text[:, 16:] = hex_upper_rows(phys)
        return binary_from_parts(text, np.arange(n + 1, dtype=np.int64) * 32, pa.string())
    raw = np.zeros((n, 28), dtype=np.uint8)
    hosts = _host_matrix(data, store_host_pos, store_v6)
    raw[:, :20] = hosts
    v4 = ~store_v6
    raw[v4, 8:16] = phys[v4]
    raw[v4, 16:] = 0
    raw[store_v6, 20:] = phys[store_v6]
    text = hex_upper_rows(raw)  # (n, 56); IPv4 ids use the first 32 characters of their row
    lengths = np.where(store_v6, 56, 32)
    return gather_segments(text.reshape(-1), np.arange(n, dtype=np.int64) * 56, lengths, pa.string())


# --- properties ---------------------------------------------------------------------------------
_MAX_PAIRWISE_ENTRIES = 32  # above this many properties in one record, find duplicates by hashing
_PREFIX_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)


def _string_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets as int64 rebased to 0, data bytes) of a string/binary array."""
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[arr.offset:arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets - offsets[0], data[offsets[0]:offsets[-1]]


def _name_prefixes(blob: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """First (up to) 8 bytes of each name as a little-endian uint64, zero beyond the name's end.
    Together with the length it identifies names of <= 8 bytes exactly (TAGS, KEYS, UNIQ_KEY)."""
    if len(blob) < 8:
        blob = np.concatenate([blob, np.zeros(8 - len(blob), dtype=np.uint8)])
    # Loads near the end start earlier by `back` bytes; shifting right drops those bytes.
    clipped = np.minimum(starts, len(blob) - 8)
    heads = _unaligned(blob, np.dtype("<u8"))[clipped]
    back = (starts - clipped).astype(np.uint64) * np.uint64(8)
    prefixes: npt.NDArray[np.uint64] = (heads >> back) & _PREFIX_MASKS[np.minimum(lengths, 8)]
    return prefixes


def properties_text(raw: pa.Array) -> pa.Array:
    """Stored PROPERTIES bytes (binary array) as the strings Java reads from them: valid UTF-8 is
    taken as is (one Arrow cast, no copy); a row that is not valid UTF-8 — batch records carry a
    non-Java client's bytes verbatim — is replaced by ``properties.java_utf8_bytes`` of it,
    the U+FFFD that ``new String(bytes, UTF_8)`` puts there. Never fails. Bytes all below 0x80 (ASCII, what
    RocketMQ's own property names and ids are) are valid UTF-8: one numpy max over them, then a zero-copy view
    (7 us against 15 for a cast's fixed cost; 40 against 120 us over 8,333 properties of 80 B)."""
    data = raw.buffers()[2]   # every row's bytes (and maybe more: then the cast decides)
    if data is None or not data.size or int(np.frombuffer(data, dtype=np.uint8).max()) < 0x80:
        return raw.view(pa.string())
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        pass
    bad = _invalid_utf8_rows(raw)
    mask = np.zeros(len(raw), dtype=bool)
    mask[bad] = True
    fixed = pa.array([java_utf8_bytes(raw[i].as_py()) for i in bad], pa.binary())  # malformed rows only
    return pc.replace_with_mask(raw, pa.array(mask), fixed).cast(pa.string())


_UTF8_LEAF_ROWS = 32


def _invalid_utf8_rows(raw: pa.Array) -> list[int]:
    """Indexes of the rows that are not valid UTF-8, by halving: a slice whose cast succeeds is
    clean; a failing slice of at most ``_UTF8_LEAF_ROWS`` rows is tested row by row (k bad rows
    cost about 2k log2(n / 32) casts of zero-copy slices and 32k row decodes)."""
    bad: list[int] = []
    pending = [(0, len(raw))]
    while pending:
        lo, hi = pending.pop()
        try:
            raw.slice(lo, hi - lo).cast(pa.string())
            continue
        except pa.ArrowInvalid:
            pass
        if hi - lo <= _UTF8_LEAF_ROWS:
            for i, value in enumerate(raw.slice(lo, hi - lo).to_pylist(), start=lo):
                try:
                    if value is not None:
                        value.decode("utf-8")
                except UnicodeDecodeError:
                    bad.append(i)
        else:
            mid = (lo + hi) // 2
            pending += [(mid, hi), (lo, mid)]
    return sorted(bad)


def parse_properties(props: pa.Array, wanted: Sequence[str] = ()) -> tuple[pa.MapArray, dict[str, pa.Array]]:
    """Properties strings (``name\x01value\x02``...) to a ``map<string, string>`` array, plus one
    string column per name in ``wanted`` (null where the record lacks it).

    Same rules as ``properties.decode_properties`` (``MessageDecoder.string2messageProperties``): split on
    \x02, then at the first \x01; segments with an empty name or value are dropped; a final segment
    without \x02 counts like any other; a later duplicate name wins. ``props`` must be a string
    array — :func:`properties_text` makes one from the stored bytes as Java decodes them; \x01/\x02
    never occur inside multi-byte UTF-8 sequences, so splitting bytes equals splitting characters.

    Works on the bytes of all records at once: segment ends are the \x02 positions (a final
    segment without \x02 gets one appended first), names end at the first \x01 of their segment.
    Duplicate names are found by comparing (length, 8-byte prefix) of neighbours within a record.
    """
    n = len(props)
    roff, blob = _string_parts(props)
    uniform = _parse_uniform(roff, blob, wanted)
    if uniform is not None:
        return uniform
    ends = roff[1:][roff[1:] > roff[:-1]]
    if not np.all(blob[ends - 1] == 2):
        unterminated = pc.and_(pc.greater(pc.binary_length(props), 0), pc.invert(pc.ends_with(props, "\x02")))
        props = pc.if_else(unterminated, pc.binary_join_element_wise(props, "\x02", ""), props)
        roff, blob = _string_parts(props)
    seg_end = np.flatnonzero(blob == 2)
    seg_start = np.empty_like(seg_end)
    seg_start[:1] = 0
    seg_start[1:] = seg_end[:-1] + 1
    record_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(np.searchsorted(seg_end, roff)))
    sep = _first_separators(np.flatnonzero(blob == 1), seg_start, seg_end)
    keep = (sep > seg_start) & (sep + 1 < seg_end)  # a \x01 found, non-empty name and value
    if not keep.all():
        seg_start, sep, seg_end, record_of = seg_start[keep], sep[keep], seg_end[keep], record_of[keep]
    name_start = seg_start
    name_len = sep - name_start
    prefix = _name_prefixes(blob, name_start, name_len)
    names = gather_segments(blob, name_start, name_len, pa.string())
    drop = _earlier_duplicates(record_of, name_len, prefix, names)
    if drop is not None:
        kept = ~drop
        name_start, name_len, sep, seg_end, record_of, prefix = (
            a[kept] for a in (name_start, name_len, sep, seg_end, record_of, prefix))
        names = names.filter(pa.array(kept))
    values = gather_segments(blob, sep + 1, seg_end - sep - 1, pa.string())
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(record_of, minlength=n), out=offsets[1:])
    result = pa.MapArray.from_arrays(numeric_array(offsets, pa.int32()), names, values)
    columns = {}
    for name in wanted:
        raw = name.encode("utf-8")
        target = _name_prefixes(np.frombuffer(raw, np.uint8), np.zeros(1, np.int64), np.array([len(raw)]))[0]
        where = np.flatnonzero((name_len == len(raw)) & (prefix == target))
        if len(raw) > 8 and len(where):
            where = where[pc.equal(names.take(pa.array(where)), name).to_numpy(zero_copy_only=False)]
        columns[name] = _column_of(blob, roff, record_of[where], sep[where] + 1, seg_end[where] - sep[where] - 1)
    return result, columns


def _uniform_layout(blob: np.ndarray, first_len: int) -> tuple[list[bytes], bool] | None:
    """(names, ends with \x02) of the first record if it is "clean" (every segment
    ``name\x01value`` with a non-empty name and value, names distinct), else None. Both forms of
    the last segment are clean: 4.9.1-5.1.4 brokers write no \x02 after it, others do (docs/store-format.md)."""
    row0 = blob[:first_len].tobytes()
    terminated = row0.endswith(b"\x02")
    names = []
    for segment in (row0[:-1] if terminated else row0).split(b"\x02"):
        name, sep, value = segment.partition(b"\x01")
        if not (sep and name and value):
            return None
        names.append(name)
    return (names, terminated) if len(set(names)) == len(names) else None


def _uniform_segments(roff: np.ndarray, blob: np.ndarray, r: int,
                      terminated: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """(start, end) of the r segments of every record, record-major, when every record is split by
    \x02 into exactly r segments the way the first one is — each ending with a \x02
    (``terminated``), or the last one ending at the record's end — else None. ``end`` is the
    position of the segment's \x02, or the record's end."""
    n = len(roff) - 1
    x02 = np.flatnonzero(blob == 2)
    if terminated:
        # the r-th \x02 of record i is its last byte, so every record holds exactly r of them
        if len(x02) != n * r or not np.array_equal(x02[r - 1::r], roff[1:] - 1):
            return None
        seg_end = x02
        seg_start = np.empty_like(seg_end)
        seg_start[0] = 0
        seg_start[1:] = seg_end[:-1] + 1
        return seg_start, seg_end
    if len(x02) != n * (r - 1):
        return None
    ends = np.empty((n, r), dtype=np.int64)
    ends[:, r - 1] = roff[1:]
    if r > 1:
        # group i of the sorted \x02 positions lies inside record i and not on its last byte: with
        # n * (r - 1) positions in all, every record then holds exactly r - 1, none trailing
        inner = x02.reshape(n, r - 1)
        if not (np.all(inner[:, 0] >= roff[:-1]) and np.all(inner[:, -1] < roff[1:] - 1)):
            return None
        ends[:, :r - 1] = inner
    starts = np.empty((n, r), dtype=np.int64)
    starts[:, 0] = roff[:-1]
    starts[:, 1:] = ends[:, :-1] + 1
    return starts.reshape(-1), ends.reshape(-1)


def _parse_uniform(roff: np.ndarray, blob: np.ndarray,
                   wanted: Sequence[str]) -> tuple[pa.MapArray, dict[str, pa.Array]] | None:
    """``parse_properties`` for the usual batch: every record holds the same names in the same order
    (one producer, one code path), each segment clean, the last one ended the same way in every
    record. None when any record differs.

    Then the keys column is the first record's names repeated, each wanted column sits at a fixed
    entry index, and nothing can be a duplicate or empty, so only the values need copying. The check
    is exact: every record has exactly R segments (``_uniform_segments``), and in each segment the
    bytes before position ``len(name_j)`` are name j (no \x01 in it) followed by \x01, with a
    non-empty value after it — which is precisely what the general rules would find there.
    """
    n = len(roff) - 1
    first_len = int(roff[1]) if n else 0
    if n < 2 or first_len < 8:  # tiny first records would make the 8-byte name loads below unsafe
        return None
    layout = _uniform_layout(blob, first_len)
    if layout is None:
        return None
    pattern, terminated = layout
    r = len(pattern)
    segments = _uniform_segments(roff, blob, r, terminated)
    if segments is None:
        return None
    seg_start, seg_end = segments
    name_len, load_segment, load_offset, load_shift, load_expected = _name_loads(tuple(pattern))
    sep = (seg_start.reshape(n, r) + name_len).reshape(-1)
    value_len = seg_end - sep - 1
    if not (value_len > 0).all() or not (blob[sep] == 1).all():
        return None
    # names of records 1..n-1 by 8-byte little-endian loads inside each name (record 0 is the
    # pattern; every later load starts at >= first_len - 8 >= 0), all names in one gather
    words = _unaligned(blob, np.dtype("<u8"))
    loads = seg_start[r:].reshape(n - 1, r)[:, load_segment] + load_offset
    if not ((words[loads] >> load_shift) == load_expected).all():
        return None
    if sum(name_len) * n > _INT32_MAX:
        return None
    keys, map_offsets = _repeated_keys(tuple(pattern), n)
    present = [name for name in wanted if name.encode("utf-8") in pattern]
    entries = tuple(pattern.index(name.encode("utf-8")) for name in present)
    values, picked = _values_and_entries(blob, sep + 1, value_len, n, r, entries)
    result = pa.MapArray.from_arrays(map_offsets, keys, values)
    found = dict(zip(present, picked, strict=True))
    columns = {name: found[name] if name in found else pa.nulls(n, pa.string()) for name in wanted}
    return result, columns


def _values_and_entries(blob: np.ndarray, value_start: np.ndarray, value_len: np.ndarray, n: int, r: int,
                        entries: tuple[int, ...]) -> tuple[pa.Array, list[pa.Array]]:
    """The map values of ``_parse_uniform`` (all ``n * r`` value segments, record-major) and, for each j of
    ``entries``, entry j's value of every record — all from one ``take`` over one interleaved array (see
    :func:`gather_segments`), returned as zero-copy slices of its result. One gather instead of one per
    column: at a few hundred records a batch, the fixed cost of each gather (a dozen numpy calls and a
    ``take``) is most of what a column costs. The value segments are ascending and disjoint (each lies
    inside its own segment of the record-major split), so no order check is needed."""
    m = n * r
    ends = value_start + value_len
    lo, hi = int(value_start[0]), int(ends[-1])
    if 2 * (hi - lo) > _INT32_MAX:   # the taken bytes might not fit int32 offsets: one gather per column
        return (gather_segments(blob, value_start, value_len, pa.string()),
                [gather_segments(blob, value_start[j::r], value_len[j::r], pa.string()) for j in entries])
    offsets = np.empty(2 * m + 1, dtype=np.int32)
    offsets[0:2 * m:2] = value_start - lo
    offsets[1:2 * m:2] = ends - lo
    offsets[2 * m] = hi - lo
    interleaved = pa.Array.from_buffers(pa.string(), 2 * m, [None, pa.py_buffer(offsets), pa.py_buffer(blob[lo:hi])])
    taken = interleaved.take(_entries_index(n, r, entries))
    return taken.slice(0, m), [taken.slice(m + k * n, n) for k in range(len(entries))]


@functools.lru_cache(maxsize=16)
def _entries_index(n: int, r: int, entries: tuple[int, ...]) -> pa.Array:
    """The ``take`` index of :func:`_values_and_entries` over its 2 * n * r interleaved elements (value
    segment k is element 2k): every value segment, then entry j of each record for j in ``entries``."""
    m = n * r
    parts = [np.arange(0, 2 * m, 2, dtype=np.int64)]
    parts.extend(np.arange(2 * j, 2 * m, 2 * r, dtype=np.int64) for j in entries)
    return numeric_array(np.concatenate(parts))


@functools.lru_cache(maxsize=8)
def _name_loads(pattern: tuple[bytes, ...]) -> tuple[np.ndarray, ...]:
    """What ``_parse_uniform`` loads to check one record's names: name lengths, and per 8-byte load
    its segment, offset from the segment start, right shift and expected value. A name shorter
    than 8 bytes is one load ending at its last byte (earlier bytes shifted out); a longer one is
    covered by loads at 0, 8, ... and one ending at its last byte."""
    segment, offset, shift, expected = [], [], [], []
    for j, name in enumerate(pattern):
        length = len(name)
        if length < 8:
            parts = [(length - 8, 8 * (8 - length), name)]
        else:
            parts = [(k, 0, name[k:k + 8]) for k in sorted({*range(0, length - 7, 8), length - 8})]
        for off, sh, chunk in parts:
            segment.append(j)
            offset.append(off)
            shift.append(sh)
            expected.append(int.from_bytes(chunk, "little"))
    return (np.array([len(name) for name in pattern], dtype=np.int64), np.array(segment, dtype=np.int64),
            np.array(offset, dtype=np.int64), np.array(shift, dtype=np.uint64), np.array(expected, dtype=np.uint64))


def _repeated_keys(pattern: tuple[bytes, ...], n: int) -> tuple[pa.Array, pa.Array]:
    """The map keys of n records that all hold ``pattern``, and the map offsets: zero-copy slices of
    arrays built for a power-of-two row count (batches of a run differ by a few rows; Arrow arrays are
    immutable, so one build serves them all)."""
    cap = max(1024, 1 << (n - 1).bit_length())
    if sum(map(len, pattern)) * cap > _INT32_MAX:
        cap = n
    keys, offsets = _repeated_keys_for(pattern, cap)
    return keys.slice(0, n * len(pattern)), offsets.slice(0, n + 1)


@functools.lru_cache(maxsize=8)
def _repeated_keys_for(pattern: tuple[bytes, ...], n: int) -> tuple[pa.Array, pa.Array]:
    name_len = np.array([len(name) for name in pattern], dtype=np.int64)
    keys_blob = b"".join(pattern)
    key_offsets = np.empty(n * len(pattern) + 1, dtype=np.int64)
    key_offsets[:-1] = (np.arange(n, dtype=np.int64)[:, None] * len(keys_blob)
                        + (np.cumsum(name_len) - name_len)[None, :]).reshape(-1)
    key_offsets[-1] = len(keys_blob) * n
    keys = binary_from_parts(keys_blob * n, key_offsets, pa.string())
    return keys, numeric_array(np.arange(n + 1, dtype=np.int32) * len(pattern), pa.int32())


def _column_of(blob: np.ndarray, roff: np.ndarray, records: np.ndarray, starts: np.ndarray,
               lengths: np.ndarray) -> pa.Array:
    """String column with the given value of each listed record, null for the other records."""
    n = len(roff) - 1
    if len(records) == n:
        return gather_segments(blob, starts, lengths, pa.string())
    # Absent rows get an empty segment at their record's start, which keeps segments ascending.
    all_starts = roff[:-1].copy()
    all_lengths = np.zeros(n, dtype=np.int64)
    all_starts[records] = starts
    all_lengths[records] = lengths
    dense = gather_segments(blob, all_starts, all_lengths, pa.string())
    present = np.zeros(n, dtype=bool)
    present[records] = True
    validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    return pa.Array.from_buffers(pa.string(), n, [validity, *dense.buffers()[1:]], offset=dense.offset)


def _first_separators(s1: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray) -> np.ndarray:
    """Position of the first \x01 (all at ``s1``) in each segment, or -1."""
    if len(s1) == len(seg_start) and np.all((s1 >= seg_start) & (s1 < seg_end)):
        return s1  # the usual case: exactly one \x01 per segment
    if len(s1) == 0:
        return np.full(len(seg_start), -1, dtype=np.int64)
    first = s1[np.minimum(np.searchsorted(s1, seg_start), len(s1) - 1)]
    return np.where((first >= seg_start) & (first < seg_end), first, -1)


def _earlier_duplicates(record_of: np.ndarray, name_len: np.ndarray, prefix: np.ndarray,
                        names: pa.Array) -> np.ndarray | None:
    """Mask of entries overridden by a later entry of the same name in the same record, or None."""
    if len(record_of) < 2:
        return None
    most = int(np.bincount(record_of).max())
    if most > _MAX_PAIRWISE_ENTRIES:
        return _earlier_duplicates_hashed(record_of, names)
    drop = np.zeros(len(record_of), dtype=bool)
    found = False
    for d in range(1, most):
        same = (record_of[d:] == record_of[:-d]) & (name_len[d:] == name_len[:-d]) & (prefix[d:] == prefix[:-d])
        if not same.any():
            continue
        first = np.flatnonzero(same)
        long_names = first[name_len[first] > 8]
        if len(long_names):  # prefixes only prove equality up to 8 bytes: compare the rest
            a, b = names.take(pa.array(long_names)), names.take(pa.array(long_names + d))
            equal = pc.equal(a, b).to_numpy(zero_copy_only=False)
            first = np.concatenate([first[name_len[first] <= 8], long_names[equal]])
        if len(first):
            drop[first] = True
            found = True
    return drop if found else None


def _earlier_duplicates_hashed(record_of: np.ndarray, names: pa.Array) -> np.ndarray | None:
    encoded = names.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    key = (record_of * max(len(encoded.dictionary), 1) + codes)[::-1]
    _, last_in_original = np.unique(key, return_index=True)
    keep = np.zeros(len(key), dtype=bool)
    keep[len(key) - 1 - last_in_original] = True
    return None if keep.all() else ~keep


# --- decoded headers -> a record batch ----------------------------------------------------------
_PROPERTY_COLUMNS = {"msgId", "tags", "keys", "properties"}


class ColumnBuilder:
    """Arrow columns of ``schema`` from records decoded by :func:`decode_headers` - shared by the local read
    (records in a mapped commit-log file, ``store/read/bulk_read.py``) and network mode (records in a pull
    body, :class:`PullBodyDecoder`).

    ``properties`` parses the PROPERTIES bytes into the map column and the single-property columns asked for
    (TAGS also for a tag re-check, :meth:`tag_hits`); ``assemble`` builds the batch. Columns holding one value
    in every row (topic, broker, queue id, usually the hosts) are cached by (column, value, rows): batches of a
    run mostly have the same row count, and Arrow arrays are immutable, so one array serves them all."""

    def __init__(self, schema: pa.Schema, broker_name: str, tag_set: frozenset[str] | None) -> None:
        self.schema = schema
        self.names = set(schema.names)
        self.broker_name = broker_name
        self.tag_set = tag_set
        self.tag_values = string_array(sorted(tag_set)) if tag_set else None
        self.parse_props = bool(self.names & _PROPERTY_COLUMNS) or tag_set is not None
        self.wanted_properties = tuple(
            prop for prop, needed in ((PROPERTY_TAGS, "tags" in self.names or tag_set is not None),
                                      (PROPERTY_KEYS, "keys" in self.names), (PROPERTY_UNIQ_KEY, "msgId" in self.names))
            if needed)
        self._constants: dict[tuple[str, object, int], pa.Array] = {}
        self._host_texts: dict[int, str] = {}   # IPv4 ip+port key -> its host string

    def properties(self, raw: pa.Array) -> tuple[pa.Array, ...]:
        """(properties map, TAGS, KEYS, UNIQ_KEY) of the stored PROPERTIES bytes; a column not asked for is None."""
        # never an error: bytes that are not UTF-8 read as Java's new String(bytes, UTF_8) reads them
        props, wanted = parse_properties(properties_text(raw), self.wanted_properties)
        return props, wanted.get(PROPERTY_TAGS), wanted.get(PROPERTY_KEYS), wanted.get(PROPERTY_UNIQ_KEY)

    def tag_hits(self, tags: pa.Array) -> np.ndarray:
        """True where the TAGS column (from :meth:`properties`) is one of the tag filter's strings (a null
        TAGS never is); all True without a tag filter. Units and brokers filter by the tags' hash code, so
        the string decides here (``ExpressionMessageFilter`` then the consumer's tag check)."""
        if self.tag_values is None:
            return np.ones(len(tags), dtype=bool)
        return bool_values(pc.is_in(tags, value_set=self.tag_values))

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
                arr = numeric_array(queue_offsets)
            elif name == "commitLogOffset":
                arr = numeric_array(offsets)
            elif name == "storeSize":
                arr = numeric_array(sizes, pa.int32())
            elif name == "msgId" and uniq is not None and uniq.null_count == 0:
                arr = uniq  # every record carries a UNIQ_KEY: no offset ids needed
            elif name in ("msgId", "offsetMsgId"):
                if offset_ids is None:
                    offset_ids = offset_msg_ids(buf, h["store_host_pos"], h["store_v6"], offsets, h.get("store_key"))
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
                arr = numeric_array(h["sys_flag"], pa.int32())
            elif name == "bodyCRC":
                arr = numeric_array(h["body_crc"], pa.int32())
            elif name == "reconsumeTimes":
                arr = numeric_array(h["reconsume_times"], pa.int32())
            elif name == "flag":
                arr = numeric_array(h["flag"], pa.int32())
            else:  # preparedTransactionOffset
                arr = numeric_array(h["prepared_transaction_offset"])
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def bodies(self, buf: np.ndarray, h: dict[str, np.ndarray], offsets: np.ndarray, path: str) -> pa.Array:
        """The BODY column; compressed bodies (SYSFLAG bit 0) inflated (CorruptStoreError at ``path``)."""
        stored = gather_segments(buf, h["body_pos"], h["body_len"], pa.binary())
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
        if new_offsets[-1] > _INT32_MAX:
            raise CorruptStoreError("decompressed bodies of one batch exceed 2 GiB; lower batch_bytes",
                                    path=path, offset=int(offsets[0]))
        return binary_from_parts(b"".join(pieces), new_offsets, pa.binary())

    def _constant(self, name: str, value: object, n: int) -> pa.Array:
        key = (name, value, n)
        arr = self._constants.get(key)
        if arr is None:
            if len(self._constants) >= 64:  # row counts vary (file ends, last batch): stay small
                self._constants.clear()
            if isinstance(value, str):
                arr = repeat_string(value, n)
            else:
                arr = numeric_array(np.full(n, value, dtype=np.int32), pa.int32())
            self._constants[key] = arr
        return arr

    def _hosts(self, buf: np.ndarray, h: dict[str, np.ndarray], side: str, n: int) -> pa.Array:
        keys = h.get(f"{side}_key")  # present when no host of the batch is IPv6
        if keys is not None and n and (keys == keys[0]).all():
            key = int(keys[0])
            text = self._host_texts.get(key)
            if text is None:   # formatted once per address (a batch's hosts are usually one broker, one client)
                if len(self._host_texts) >= 64:
                    self._host_texts.clear()
                text = self._host_texts[key] = format_ipv4_host(key)
            return self._constant(f"{side}Host", text, n)
        return host_strings(buf, h[f"{side}_host_pos"], h[f"{side}_v6"], keys)


def select_rows(h: dict[str, np.ndarray], columns: Iterable[pa.Array | None],
                rows: np.ndarray) -> tuple[dict[str, np.ndarray], list[pa.Array | None]]:
    """The decoded headers ``h`` (:func:`decode_headers`) and the Arrow ``columns`` (None stays None) of the
    records at the indexes ``rows`` only."""
    kept = {k: v[rows] if isinstance(v, np.ndarray) and v.ndim else v for k, v in h.items()}
    index = numeric_array(rows)
    return kept, [None if a is None else a.take(index) for a in columns]


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    """A batch of ``schema`` with no rows."""
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


def _timestamps(millis: np.ndarray) -> pa.Array:
    micros = np.asarray(millis, dtype=np.int64) * 1000
    return pa.Array.from_buffers(TIMESTAMP_UTC, len(micros), [None, pa.py_buffer(micros)])


# --- pull bodies -> Arrow (network mode) ------------------------------------------------------------
# A PULL_MESSAGE body: the stored records of the answer back to back (PullMessageProcessor copies them from
# the commit log as they are; MessageDecoder.decodes walks them by TOTALSIZE). As the network read receives
# it: bytes, or the buffer a large answer was received into.
PullBody: TypeAlias = bytes | memoryview
# A pull body this large is a decode unit of its own (no copy; already in the 1-4 MiB range).
ALONE_BYTES = BATCH_BYTES // 2


def record_starts(body: PullBody, addr: str | None = None) -> np.ndarray:
    """Start of every record of a pull body (stored records back to back): each start is the previous
    start plus its TOTALSIZE (``MessageDecoder.decodes``' walk), then the magic codes of all records
    checked at once. A size that does not land exactly on the body's end, or a magic code that is not
    V1/V2, is a :class:`BodyError` naming the byte where that record starts (and ``addr``).

    The walk reads one TOTALSIZE per record in Python, except along runs of records of one size (one
    producer's messages): from a record of size ``s`` it reads the TOTALSIZE at ``s``, ``2s``, ... in one
    gather and takes the records up to the first that differs — exactly the records the walk would
    step through. A gather costs about what walking 50 records costs, so an attempt that finds fewer
    than :data:`_MIN_RUN` records doubles the number of records walked one by one before the next
    attempt (sizes that change every record cost the walk plus a few gathers), and a run that fills
    its gather doubles the next one. Measured on 8,000 records of about 300 B: 40 ns a record when all
    have one size, against 155 for the plain walk; 180-210 when sizes change every record or every 20."""
    one: list[int] = []   # starts walked one by one
    append = one.append
    runs: list[np.ndarray] = []   # starts found along runs
    unpack = INT32.unpack_from
    n = len(body)
    sizes_at = _unaligned(as_uint8(body), np.dtype(">i4")) if n >= 4 else None
    pos = size = 0
    walk, probe = _MIN_RUN // 4, _MIN_RUN * 4
    try:
        while True:   # ends at struct.error: fewer than 4 bytes left at pos (the end, or a bad size)
            # walk one by one for about `walk` records (counted in bytes: one compare per record)
            until = pos + walk * size
            while pos < until:
                (size,) = unpack(body, pos)
                if size <= 8:
                    raise StopIteration
                append(pos)
                pos += size
            (size,) = unpack(body, pos)
            if size <= 8:
                break
            k = min((n - pos) // size, probe)   # records of this size that fit in what is left, at most probe
            if k < _MIN_RUN or sizes_at is None:
                walk = min(max(walk * 2, 1), _MAX_RUN)
                continue
            candidates = pos + size * np.arange(k, dtype=np.int64)
            same = sizes_at[candidates] == size
            run = k if bool(same.all()) else int(np.argmin(same))
            runs.append(candidates[:run])
            pos += size * run
            if run == k:
                walk, probe = 0, min(probe * 2, _MAX_RUN)
            elif run >= _MIN_RUN:
                walk, probe = 1, _MIN_RUN * 4
            else:
                walk, probe = min(max(walk * 2, 1), _MAX_RUN), _MIN_RUN * 4
    except (struct.error, StopIteration):
        pass
    last = max(one[-1] if one else 0, int(runs[-1][-1]) if runs and len(runs[-1]) else 0)
    n = len(body)
    if pos > n:
        raise BodyError(f"pull body: record at byte {last} has size {pos - last} beyond the body "
                        f"({n} bytes)", addr=addr)
    if pos < n:
        what = f"has size {size}" if pos + 4 <= n else "is truncated"
        raise BodyError(f"pull body: record at byte {pos} {what} (truncated record header or a bad size; "
                        f"{n} bytes)", addr=addr)
    rel = np.asarray(one, dtype=np.int64)
    if runs:   # starts are increasing within each part and distinct across them
        rel = np.sort(np.concatenate([rel, *runs]))
    if len(rel):
        magic = as_uint8(body)[rel[:, None] + np.arange(POS_MAGIC, POS_MAGIC + 4)].view(">i4").reshape(-1)
        bad = (magic != MAGIC_V1) & (magic != MAGIC_V2)
        if bad.any():
            i = int(np.argmax(bad))
            raise BodyError(f"pull body: record at byte {int(rel[i])} has magic code {int(magic[i]) & 0xFFFFFFFF:#x}",
                            addr=addr)
    return rel


# record_starts' runs: at least this many records of one size make a run worth its gather; at most this
# many are gathered at once
_MIN_RUN = 64
_MAX_RUN = 4096


def pack_pull_bodies(bodies: Iterable[PullBody]) -> Iterator[PullBody]:
    """Pull bodies in order as decode units of about :data:`BATCH_BYTES`: small bodies joined (a batch per
    pull of 32 small messages would cost PySpark's Arrow transfer dearly per row), a body of
    :data:`ALONE_BYTES` or more alone (no copy; already in the 1-4 MiB range)."""
    group: list[PullBody] = []
    size = 0
    for body in bodies:
        if len(body) >= ALONE_BYTES or size + len(body) > BATCH_BYTES:
            if group:
                yield group[0] if len(group) == 1 else b"".join(group)
                group, size = [], 0
            if len(body) >= ALONE_BYTES:
                yield body
                continue
        group.append(body)
        size += len(body)
    if group:
        yield group[0] if len(group) == 1 else b"".join(group)


class PullBodyDecoder:
    """Pull bodies of one broker to RecordBatches of ``schema`` (a projection of :data:`MESSAGE_SCHEMA`),
    columns built by :class:`ColumnBuilder` as the local read builds them.

    ``tags``: the subscription's tag set (None or empty: all); the broker filters by the tags' hash code, so
    the TAGS string is checked here. ``check_crc``: BODYCRC of every row kept. ``addr`` (the broker's)
    goes into every error."""

    def __init__(self, schema: pa.Schema, broker_name: str, tags: Collection[str] | None, check_crc: bool,
                 addr: str) -> None:
        self.schema = schema
        self.broker_name = broker_name
        self.tag_set = frozenset(tags) if tags else None
        self.check_crc = check_crc
        self.addr = addr
        self.columns = ColumnBuilder(schema, broker_name, self.tag_set)

    def decode(self, body: PullBody, topic: str, queue_id: int, start: int, end: int) -> pa.RecordBatch:
        """The rows of ``body`` (records of ``topic``'s queue ``queue_id``) with queue offsets in
        ``[start, end)``: rows past the range (a broker's tag scan may run ahead) and rows of another queue are
        dropped, as are rows whose TAGS is not in the tag set.

        A body that does not split into records (:func:`record_starts`) or a record that fails
        ``record.check_record``'s checks (with ports; not its PHYSICALOFFSET, which a pull body's position
        cannot confirm) is a :class:`BodyError` naming the byte where the record starts in the body; a
        compressed body that does not inflate a :class:`BodyError` naming the record's commit-log offset; a
        BODYCRC mismatch (``check_crc``) a :class:`CorruptStoreError` with the record's commit-log offset."""
        buf = as_uint8(body)
        rel = record_starts(body, self.addr)
        if not len(rel):
            return empty_batch(self.schema)
        h = decode_headers(buf, rel, topic_len_hint=len(topic.encode("utf-8")))
        problems = record_problems(buf, h, rel, check_ports=True, check_position=False)
        bad = any_problem(problems)
        if bad.any():
            i = int(np.argmax(bad))
            reasons = [PROBLEM_DESCRIPTIONS[k] for k, m in problems.items() if m[i]]
            raise BodyError(f"pull body of {topic}:{queue_id}: record at byte {int(rel[i])} does not decode: "
                            f"{'; '.join(reasons)}", addr=self.addr)
        qoff = h["queue_offset"]
        keep = (qoff >= start) & (qoff < end) & (h["queue_id"] == queue_id)
        props = tag_col = keys_col = uniq_col = None
        if self.columns.parse_props:
            raw = gather_segments(buf, h["props_pos"], h["props_len"], pa.binary())
            props, tag_col, keys_col, uniq_col = self.columns.properties(raw)
            if self.tag_set is not None:
                keep &= self.columns.tag_hits(tag_col)
        if not keep.any():
            return empty_batch(self.schema)
        if not keep.all():
            h, (props, tag_col, keys_col, uniq_col) = select_rows(h, (props, tag_col, keys_col, uniq_col),
                                                                  np.flatnonzero(keep))
        if self.check_crc:
            crc_bad = body_crc_mismatches(buf, h)
            if crc_bad.any():
                i = int(np.argmax(crc_bad))
                raise CorruptStoreError(f"BODYCRC mismatch in a pull body from {self.addr}: {topic}:{queue_id} "
                                        f"offset {int(h['queue_offset'][i])}, stored {int(h['body_crc'][i])}",
                                        offset=int(h["physical_offset"][i]))
        try:
            return self.columns.assemble(buf, h, topic, queue_id, h["physical_offset"], h["total_size"],
                                         h["queue_offset"], props=props, tags=tag_col, keys=keys_col, uniq=uniq_col,
                                         path=f"pull body from {self.addr} ({topic}:{queue_id})")
        except CorruptStoreError as exc:   # a compressed body that does not inflate
            raise BodyError(f"pull body of {topic}:{queue_id}: {exc}", addr=self.addr) from exc
