"""Commit-log record decoding for many records at once, with numpy gathers and Arrow kernels.

``format.decode_record`` is the reference decoder, one record per call. This module computes the same
values for a whole batch of record positions inside one memory-mapped commit-log file, without a
Python loop per record on the common path:

* fixed-width header fields come from one fancy-index over a sliding-window view of the file (a
  memcpy of each header into a contiguous ``(n, width)`` matrix), reinterpreted with a big-endian
  structured dtype. Records whose hosts are IPv6 shift every later field by 12 bytes each; those
  batches use three gathers at per-record positions instead of one.
* variable-length pieces (bodies, properties) become Arrow arrays through ``take`` on a binary array
  whose offsets point into the mapped file, so Arrow's C++ kernel does the copying.
* properties are split with Arrow string kernels; host strings are formatted once per distinct
  (ip, port) value.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketstream.store.format import (
    FLAG_BORNHOST_V6,
    FLAG_STOREHOST_V6,
    MAGIC_V1,
    MAGIC_V2,
    HostAddress,
)

# Header of a V1/V2 record with two IPv4 hosts, up to and including the BODY length field.
HEADER_V4_DTYPE = np.dtype([
    ("total_size", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
    ("queue_offset", ">i8"), ("physical_offset", ">i8"), ("sys_flag", ">i4"), ("born_timestamp", ">i8"),
    ("born_host", "V8"), ("store_timestamp", ">i8"), ("store_host", "V8"), ("reconsume_times", ">i4"),
    ("prepared_transaction_offset", ">i8"), ("body_len", ">i4"),
])
HEADER_V4_SIZE = HEADER_V4_DTYPE.itemsize  # 88
# The part before BORNHOST, at the same position whatever the hosts are.
_FIXED_DTYPE = np.dtype(HEADER_V4_DTYPE.descr[:9])
_FIXED_SIZE = _FIXED_DTYPE.itemsize  # 48
# RECONSUMETIMES, PREPARED TRANSACTION OFFSET, BODY length: after the store host.
_TAIL_DTYPE = np.dtype([("reconsume_times", ">i4"), ("prepared_transaction_offset", ">i8"), ("body_len", ">i4")])
_SYSFLAG_LOW_BYTE = 39  # SYSFLAG is big-endian at 36..39; the IPv6 bits live in its last byte
_V6_HOST_EXTRA = 12

_HEX_PAIRS = np.array([[ord(c) for c in f"{i:02X}"] for i in range(256)], dtype=np.uint8)
_INT32_MAX = 2**31 - 1


def as_uint8(buf: object) -> np.ndarray:
    """A 1-D uint8 view of anything with the buffer protocol (no copy)."""
    if isinstance(buf, np.ndarray):
        return buf if buf.dtype == np.uint8 and buf.ndim == 1 else buf.reshape(-1).view(np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]


def _windows(buf: np.ndarray, width: int) -> np.ndarray:
    """Read-only ``(len - width + 1, width)`` view whose row i is ``buf[i:i+width]``."""
    return np.lib.stride_tricks.sliding_window_view(buf, width)


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
    return np.ascontiguousarray(_windows(buf, width)[safe])


def decode_headers(buf: object, rel_positions: np.ndarray) -> dict[str, np.ndarray]:
    """Header fields of the records starting at ``rel_positions`` in ``buf`` (one mapped file).

    Returns native-endian arrays: ``total_size, magic, body_crc, queue_id, flag, queue_offset,
    physical_offset, sys_flag, born_timestamp, store_timestamp, reconsume_times,
    prepared_transaction_offset`` as in the record; ``born_host_pos, store_host_pos`` (buffer
    positions of the 8- or 20-byte ip+port fields) with ``born_v6, store_v6, born_port, store_port``; ``body_pos, body_len,
    topic_pos, topic_len, props_pos, props_len`` (positions relative to ``buf``); ``v2`` (magic V2);
    ``in_bounds`` (every field read lies inside ``buf``). Nothing is validated here beyond bounds:
    see :func:`validate_headers`. Positions that are not records give garbage values, never errors.
    """
    data = as_uint8(buf)
    pos = np.asarray(rel_positions, dtype=np.int64)
    n = len(pos)
    ok = np.ones(n, dtype=bool)
    low = _gather_rows(data, pos + _SYSFLAG_LOW_BYTE, 1, ok.copy())[:, 0]
    born_v6 = (low & FLAG_BORNHOST_V6) != 0
    store_v6 = (low & FLAG_STOREHOST_V6) != 0
    out: dict[str, np.ndarray] = {}
    if not (born_v6.any() or store_v6.any()):
        # Common case: one memcpy-like gather of the whole 88-byte header per record.
        rows = _gather_rows(data, pos, HEADER_V4_SIZE, ok)
        head = rows.view(HEADER_V4_DTYPE)[:, 0]
        for name in ("total_size", "magic", "body_crc", "queue_id", "flag", "sys_flag", "reconsume_times",
                     "body_len"):
            out[name] = head[name].astype(np.int32)
        for name in ("queue_offset", "physical_offset", "born_timestamp", "store_timestamp",
                     "prepared_transaction_offset"):
            out[name] = head[name].astype(np.int64)
        born_len = store_len = np.int64(8)
        out["born_port"] = rows[:, 52:56].copy().view(">i4")[:, 0].astype(np.int32)
        out["store_port"] = rows[:, 68:72].copy().view(">i4")[:, 0].astype(np.int32)
    else:
        fixed = _gather_rows(data, pos, _FIXED_SIZE, ok).view(_FIXED_DTYPE)[:, 0]
        for name in ("total_size", "magic", "body_crc", "queue_id", "flag", "sys_flag"):
            out[name] = fixed[name].astype(np.int32)
        for name in ("queue_offset", "physical_offset", "born_timestamp"):
            out[name] = fixed[name].astype(np.int64)
        born_len = np.where(born_v6, 8 + _V6_HOST_EXTRA, 8).astype(np.int64)
        store_len = np.where(store_v6, 8 + _V6_HOST_EXTRA, 8).astype(np.int64)
        store_ts_pos = pos + _FIXED_SIZE + born_len
        out["store_timestamp"] = _gather_rows(data, store_ts_pos, 8, ok).view(">i8")[:, 0].astype(np.int64)
        tail = _gather_rows(data, store_ts_pos + 8 + store_len, _TAIL_DTYPE.itemsize, ok).view(_TAIL_DTYPE)[:, 0]
        out["reconsume_times"] = tail["reconsume_times"].astype(np.int32)
        out["prepared_transaction_offset"] = tail["prepared_transaction_offset"].astype(np.int64)
        out["body_len"] = tail["body_len"].astype(np.int32)
        for side, v6, host_pos in (("born", born_v6, pos + _FIXED_SIZE), ("store", store_v6, store_ts_pos + 8)):
            port_pos = host_pos + np.where(v6, 16, 4)
            out[f"{side}_port"] = _gather_rows(data, port_pos, 4, ok).view(">i4")[:, 0].astype(np.int32)
    out["born_v6"] = born_v6
    out["store_v6"] = store_v6
    out["born_host_pos"] = pos + _FIXED_SIZE
    out["store_host_pos"] = pos + _FIXED_SIZE + born_len + 8
    body_pos = pos + (HEADER_V4_SIZE - 16) + born_len + store_len
    body_len = out["body_len"].astype(np.int64)
    v2 = out["magic"] == MAGIC_V2
    # TOPIC length: int8 (V1) or int16 (V2), signed as Java reads it; PROPERTIES length: int16.
    tl_pos = body_pos + np.maximum(body_len, 0)
    tl_raw = _gather_rows(data, tl_pos, 2, ok)
    topic_len = np.where(v2, tl_raw.view(">i2")[:, 0], tl_raw[:, 0].view(np.int8)).astype(np.int64)
    topic_pos = tl_pos + np.where(v2, 2, 1)
    pl_pos = topic_pos + np.maximum(topic_len, 0)
    props_len = _gather_rows(data, pl_pos, 2, ok).view(">i2")[:, 0].astype(np.int64)
    props_pos = pl_pos + 2
    ok &= props_pos + np.maximum(props_len, 0) <= len(data)
    out.update(body_pos=body_pos, body_len=body_len, topic_pos=topic_pos, topic_len=topic_len,
               props_pos=props_pos, props_len=props_len, v2=v2, in_bounds=ok)
    return out


def header_problems(h: dict[str, np.ndarray], rel_positions: np.ndarray, expected_offsets: np.ndarray,
                    expected_sizes: np.ndarray) -> dict[str, np.ndarray]:
    """Per-check failure masks (True = this record fails that check), for error messages."""
    pos = np.asarray(rel_positions, dtype=np.int64)
    magic_ok = (h["magic"] == MAGIC_V1) | (h["magic"] == MAGIC_V2)
    computed = (h["props_pos"] + h["props_len"]) - pos
    return {
        "bad MAGICCODE": ~magic_ok,
        "record extends past the end of the file": magic_ok & ~h["in_bounds"],
        "PHYSICALOFFSET field differs from the consume-queue offset": h["physical_offset"] != expected_offsets,
        "TOTALSIZE differs from the consume-queue unit size": h["total_size"] != expected_sizes,
        "port out of range": (h["born_port"] < 0) | (h["born_port"] > 0xFFFF) | (h["store_port"] < 0)
        | (h["store_port"] > 0xFFFF),
        "negative BODY/TOPIC/PROPERTIES length": (h["body_len"] < 0) | (h["topic_len"] < 0) | (h["props_len"] < 0),
        "length formula differs from TOTALSIZE": computed != h["total_size"],
    }


def validate_headers(h: dict[str, np.ndarray], rel_positions: np.ndarray, expected_offsets: np.ndarray,
                     expected_sizes: np.ndarray) -> np.ndarray:
    """True where the record is a V1/V2 message at the expected offset with the expected size, and its
    decoded lengths add up to TOTALSIZE (spec 1.12 without the CRC)."""
    bad = np.zeros(len(h["magic"]), dtype=bool)
    for mask in header_problems(h, rel_positions, expected_offsets, expected_sizes).values():
        bad |= mask
    return ~bad


# --- variable-length pieces as Arrow arrays ----------------------------------------------------
def gather_segments(buf: object, starts: np.ndarray, lengths: np.ndarray,
                    type_: pa.DataType = pa.binary()) -> pa.Array:
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
        index = np.arange(0, 2 * n, 2, dtype=np.int64)
    else:
        index = np.empty(n, dtype=np.int64)
        index[order] = np.arange(0, 2 * n, 2, dtype=np.int64)
    return interleaved.take(pa.array(index))


def _gather_by_index(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, type_: pa.DataType) -> pa.Array:
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.arange(offsets[-1], dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    values = data[index]
    return binary_from_parts(values, offsets, type_)


def binary_from_parts(values: np.ndarray | bytes, offsets: np.ndarray, type_: pa.DataType = pa.binary()) -> pa.Array:
    """Arrow binary/string array from a data buffer and ``n + 1`` offsets (int32 range)."""
    n = len(offsets) - 1
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(np.asarray(offsets, dtype=np.int32)),
                                            pa.py_buffer(values)])


def repeat_string(value: str, n: int) -> pa.Array:
    """A string column holding ``value`` n times, built from one repeated buffer (no Python list)."""
    raw = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
    if offsets[-1] > _INT32_MAX:
        return pa.array([value] * n, type=pa.string())
    return binary_from_parts(raw * n, offsets, pa.string())


def hex_upper_rows(matrix: np.ndarray) -> np.ndarray:
    """``(n, w)`` uint8 → ``(n, 2w)`` uint8 ASCII of upper-case hex, high nibble first."""
    return _HEX_PAIRS[matrix].reshape(len(matrix), -1)


# --- hosts and message ids ----------------------------------------------------------------------
def _host_matrix(data: np.ndarray, host_pos: np.ndarray, v6: np.ndarray) -> np.ndarray:
    """``(n, 20)`` rows ip(4|16) + port(4), IPv4 rows zero-padded at the end."""
    ok = np.ones(len(host_pos), dtype=bool)
    if not v6.any():
        out = np.zeros((len(host_pos), 20), dtype=np.uint8)
        out[:, :8] = _gather_rows(data, host_pos, 8, ok)
        return out
    return _gather_rows(data, host_pos, 20, ok)  # IPv4 rows carry 12 bytes of what follows; cleared below


def host_strings(buf: object, host_pos: np.ndarray, v6: np.ndarray) -> pa.Array:
    """``str(HostAddress)`` ("1.2.3.4:10911", "[::1]:10911") per record, formatted once per distinct host."""
    data = as_uint8(buf)
    n = len(host_pos)
    if n == 0:
        return pa.array([], type=pa.string())
    rows = np.zeros((n, 21), dtype=np.uint8)
    rows[:, :20] = _host_matrix(data, host_pos, v6)
    rows[~v6, 8:20] = 0
    rows[:, 20] = v6
    keys = pa.FixedSizeBinaryArray.from_buffers(pa.binary(21), n, [None, pa.py_buffer(rows)])
    encoded = keys.dictionary_encode()
    texts = [_format_host(raw) for raw in encoded.dictionary.to_pylist()]
    return pa.array(texts, type=pa.string()).take(encoded.indices)


def _format_host(raw: bytes) -> str:
    if raw[20]:
        ip, port = socket.inet_ntop(socket.AF_INET6, raw[:16]), raw[16:20]
    else:
        ip, port = socket.inet_ntop(socket.AF_INET, raw[:4]), raw[4:8]
    return str(HostAddress(ip, int.from_bytes(port, "big", signed=True)))


def offset_msg_ids(buf: object, store_host_pos: np.ndarray, store_v6: np.ndarray,
                   physical_offsets: np.ndarray) -> pa.Array:
    """Broker offset message ids: upper hex of store ip + port + physical offset (32 or 56 chars)."""
    data = as_uint8(buf)
    n = len(store_host_pos)
    phys = np.asarray(physical_offsets, dtype=np.int64).astype(">i8").view(np.uint8).reshape(n, 8)
    if not store_v6.any():
        raw = np.empty((n, 16), dtype=np.uint8)
        raw[:, :8] = _host_matrix(data, store_host_pos, store_v6)[:, :8]
        raw[:, 8:] = phys
        text = hex_upper_rows(raw)
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
def parse_properties(props: pa.Array, wanted: Sequence[str] = ()) -> tuple[pa.MapArray, dict[str, pa.Array]]:
    """Properties strings (``name\\x01value\\x02``...) to a ``map<string, string>`` array, plus one
    string column per name in ``wanted`` (null where the record lacks it).

    Same rules as ``format.decode_properties``: split on \\x02, then at the first \\x01; segments with
    an empty name or value are dropped; a later duplicate name wins. ``props`` must be a string
    array (UTF-8 already validated).
    """
    n = len(props)
    segments = pc.split_pattern(props, "\x02")
    seg_counts = pc.list_value_length(segments).to_numpy(zero_copy_only=False)
    flat = segments.flatten()
    record_of = np.repeat(np.arange(n, dtype=np.int64), seg_counts)
    sep = pc.find_substring(flat, "\x01").to_numpy(zero_copy_only=False).astype(np.int64)
    seg_len = pc.binary_length(flat).to_numpy(zero_copy_only=False).astype(np.int64)
    keep = (sep > 0) & (sep + 1 < seg_len)  # non-empty name and non-empty value
    flat_offsets = np.frombuffer(flat.buffers()[1], dtype=np.int32)[flat.offset:flat.offset + len(flat) + 1]
    seg_start = flat_offsets[:-1].astype(np.int64)[keep]
    sep, seg_len, record_of = sep[keep], seg_len[keep], record_of[keep]
    data = flat.buffers()[2]
    data_np = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    names = gather_segments(data_np, seg_start, sep, pa.string())
    values = gather_segments(data_np, seg_start + sep + 1, seg_len - sep - 1, pa.string())
    codes_arr = names.dictionary_encode()
    codes = codes_arr.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    dictionary = codes_arr.dictionary.to_pylist()
    if _has_duplicate_names(record_of, codes, len(dictionary)):
        last = _last_occurrences(record_of, codes, len(dictionary))
        names, values = names.filter(pa.array(last)), values.filter(pa.array(last))
        record_of, codes = record_of[last], codes[last]
    counts = np.bincount(record_of, minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    result = pa.MapArray.from_arrays(pa.array(offsets), names, values)
    columns = {}
    for name in wanted:
        entry = np.full(n, -1, dtype=np.int64)
        if name in dictionary:
            where = np.flatnonzero(codes == dictionary.index(name))
            entry[record_of[where]] = where
        columns[name] = values.take(pa.array(entry, mask=entry < 0))
    return result, columns


def _has_duplicate_names(record_of: np.ndarray, codes: np.ndarray, vocabulary: int) -> bool:
    if len(codes) < 2:
        return False
    if vocabulary <= 63:
        # Within a record, distinct names have distinct bits: OR of bits == SUM of bits iff no repeat.
        bits = np.left_shift(np.uint64(1), codes.astype(np.uint64))
        starts = np.flatnonzero(np.r_[True, record_of[1:] != record_of[:-1]])
        return bool(np.any(np.bitwise_or.reduceat(bits, starts) != np.add.reduceat(bits, starts)))
    key = record_of * vocabulary + codes
    return len(np.unique(key)) != len(key)


def _last_occurrences(record_of: np.ndarray, codes: np.ndarray, vocabulary: int) -> np.ndarray:
    key = (record_of * max(vocabulary, 1) + codes)[::-1]
    _, first_in_reversed = np.unique(key, return_index=True)
    keep = np.zeros(len(key), dtype=bool)
    keep[len(key) - 1 - first_in_reversed] = True
    return keep
