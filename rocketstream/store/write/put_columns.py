"""A producer batch given as columns, encoded with numpy (the record layout of
``MessageExtBatchEncoder``; properties as ``MessageDecoder.messageProperties2String`` writes them).

``build_columns`` takes one topic and queue, the bodies (a list of bytes-like objects or a pyarrow
binary array) and the per-message columns: tags and keys (None, one str, or one str/None per
message; a key may also be a list of str, joined with spaces as ``Message.setKeys`` does), flag
and born timestamp (one int or one per message; a missing born timestamp is now), one born host.
It returns a ``ColumnBatch`` (an ``EncodedBatch``, commit_log.py: what the commit log and
dispatcher take), or None when the batch needs the general rules (``messages.prepare``), which
then also produce the refusal. ``build_columns`` refuses exactly the batches ``put_batch.prepare_batch``
would refuse for the same messages, so a refused batch goes straight to the general rules.

The records are written as put_messages would write them, properties in prepare()'s order
(TAGS, KEYS, WAIT, UNIQ_KEY). Between two bodies the stream holds::

    tail(i) = TOPIC part | PROPERTIES length | TAGS entry | KEYS entry | WAIT + UNIQ_KEY entries
    head(i+1) = the fixed header (TOTALSIZE .. BODY length) of the next record

When every tag has one byte length (ASCII tags: their text and Java hashes come from a block of
rows) and every key too, all of it is fixed-width, so ``tail(i) + head(i+1)`` is one row of a 2-D
uint8 array filled column by column with numpy (header fields through a structured view, UNIQ_KEYs
from format.new_uniq_key_block); the batch is ``b"".join`` of rows and bodies. Otherwise the rows
split around the texts: ``TOPIC part + PROPERTIES length`` rows, one shared bytes object per
distinct tag, the encoded keys, then ``WAIT/UNIQ_KEY + head`` rows. Per message, Python only calls
``len`` and ``crc32`` on each body (and a dict lookup per tag when tags differ in length); tags
and keys are joined and encoded once per batch.

Why not faster: at 256-byte bodies the per-message builtin calls (type, len, crc32) and the ~30
numpy calls per batch (a few microseconds each) cost about as much as copying the finished
records into the file (tests/benchmarks/bench_store.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from functools import lru_cache
from operator import itemgetter
from typing import Any, TypeAlias, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rocketstream import codec
from rocketstream.codec import HostAddress
from rocketstream.errors import OptionError
from rocketstream.store.files.commit_log import TagsCodeOf
from rocketstream.store.write.messages import DEFAULT_BORN_HOST, valid_topic

Int64Array: TypeAlias = npt.NDArray[np.int64]
UInt8Array: TypeAlias = npt.NDArray[np.uint8]
Bodies: TypeAlias = "Sequence[bytes | bytearray | memoryview] | pa.Array | pa.ChunkedArray"
_NONE = type(None)

_WAIT_UNIQ = b"WAIT\x01true\x02UNIQ_KEY\x01"
_UNIQ_ENTRY = len(_WAIT_UNIQ) + 32 + 1          # ... UNIQ_KEY \x01 <32 hex> \x02
_KEYS = b"KEYS\x01"
_INT32 = (-(2**31), 2**31)
_INT64 = (-(2**63), 2**63)


@lru_cache(maxsize=64)
def _head_dtype(born_v6: bool, store_v6: bool, at: int, width: int) -> np.dtype[np.void]:
    """Header fields that differ between records, for a header starting at byte ``at`` of a row
    (BODYCRC unsigned: CRCs are assigned unmasked, then the high bit is cleared in place)."""
    h = codec.record.FIXED_HEADER[born_v6, store_v6].size
    store_ts = 48 + (20 if born_v6 else 8)
    return np.dtype({
        "names": ["total", "crc", "flag", "queue_offset", "physical_offset", "born_ts", "store_ts", "body_len"],
        "formats": [">i4", ">u4", ">i4", ">i8", ">i8", ">i8", ">i8", ">i4"],
        "offsets": [at + codec.POS_TOTAL_SIZE, at + codec.POS_BODY_CRC, at + codec.POS_FLAG,
                    at + codec.POS_QUEUE_OFFSET, at + codec.POS_PHYSICAL_OFFSET, at + codec.POS_BORN_TIMESTAMP,
                    at + store_ts, at + h - 4],
        "itemsize": width})


@lru_cache(maxsize=64)
def _int16_at(width: int, at: int) -> np.dtype[np.void]:
    return np.dtype({"names": ["v"], "formats": [">i2"], "offsets": [at], "itemsize": width})


@lru_cache(maxsize=256)
def _powers_of_31(length: int) -> npt.NDArray[np.uint32]:
    """31^(length-1) .. 31^0 modulo 2^32: Java's String.hashCode as a dot product."""
    return np.array([pow(31, length - 1 - j, 2**32) for j in range(length)], dtype=np.uint32)


def _java_hash_rows(block: UInt8Array) -> Int64Array:
    """codec.java_hash of each row of ASCII bytes (one UTF-16 unit per byte), wrapping like Java."""
    h: npt.NDArray[np.uint32] = block.dot(_powers_of_31(block.shape[1]))   # uint32 arithmetic wraps like Java int
    return h.view(np.int32).astype(np.int64)


class ColumnBatch:
    """The records of one columnar put, ready to encode at a commit-log position (an ``EncodedBatch``)."""

    dispatch = True   # no transaction bits in a batch

    def __init__(self, *, topic: str, queue_id: int, bodies: list[bytes], rows: UInt8Array, tail: int,
                 heads: npt.NDArray[np.void], middle: list[list[bytes]] | None, sizes: Int64Array,
                 tags_codes: Int64Array, uniq: UInt8Array, keys: list[str | None] | None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.count = len(bodies)
        self._bodies = bodies
        self._rows = rows          # n + 1 rows of [tail(i - 1) | head(i)]
        self._tail = tail          # bytes of a row before the header
        self._heads = heads        # structured view of the headers (rows 0 .. n - 1)
        self._middle = middle      # per-record pieces between body and WAIT (None: inside the rows)
        self.sizes = sizes
        self.total = int(sizes.sum())
        self.starts = np.empty(self.count, dtype=np.int64)
        self.starts[0] = 0
        np.cumsum(sizes[:-1], out=self.starts[1:])
        self._tags_codes = tags_codes
        self._uniq = uniq
        self._keys = keys          # KEYS of each record as written (None: no record has keys)

    def uniq_keys(self) -> list[str]:
        """The UNIQ_KEYs (msg ids), built on demand from the ASCII block."""
        text = self._uniq.tobytes().decode("ascii")
        return [text[i:i + 32] for i in range(0, len(text), 32)]

    def index_keys(self) -> tuple[list[str], list[str | None] | None]:
        return self.uniq_keys(), self._keys

    def tags_codes(self, store_timestamp: int, tags_code_of: TagsCodeOf) -> Int64Array:
        """The TAGS hashes computed while building: what ``tags_code_of`` gives for every topic but
        SCHEDULE_TOPIC_XXXX, whose batches build_columns refuses (they need the store timestamp)."""
        return self._tags_codes

    def encode(self, physical_offset: int, queue_offset: int, store_timestamp: int) -> bytes:
        n = self.count
        heads = self._heads
        heads["queue_offset"] = np.arange(queue_offset, queue_offset + n, dtype=np.int64)
        heads["physical_offset"] = self.starts + physical_offset
        heads["store_ts"] = store_timestamp
        rows: list[bytes] = self._rows.view(f"V{self._rows.shape[1]}").ravel().tolist()
        middle = self._middle
        step = 2 + (len(middle) if middle else 0)
        parts: list[bytes] = [b""] * (step * n + 1)
        parts[0] = rows[0][self._tail:]
        parts[1::step] = self._bodies
        if middle:
            for k, column in enumerate(middle, start=2):
                parts[k::step] = column
        parts[step::step] = rows[1:]
        parts[-1] = parts[-1][:self._tail]
        return b"".join(parts)


def _column(value: object, n: int, name: str) -> list[Any] | None:
    """A per-message column as a list (None: one value for all)."""
    if value is None or isinstance(value, (str, int)):
        return None
    column = value if type(value) is list else list(cast(Iterable[Any], value))
    if len(column) != n:
        raise OptionError(name, f"has {len(column)} values for {n} bodies")
    return column


def _bodies_of(bodies: Bodies) -> list[bytes] | None:
    """The bodies as a list of bytes (what prepare() stores: ``bytes(body)`` for other types)."""
    if isinstance(bodies, pa.ChunkedArray):
        bodies = bodies.combine_chunks()
    if isinstance(bodies, (pa.BinaryArray, pa.LargeBinaryArray)):
        if bodies.null_count:
            return None
        n = len(bodies)
        wide = isinstance(bodies, pa.LargeBinaryArray)
        offsets = np.frombuffer(bodies.buffers()[1], dtype=np.int64 if wide else np.int32)
        bounds: list[int] = offsets[bodies.offset:bodies.offset + n + 1].tolist()
        data = bodies.buffers()[2]
        blob: bytes = data.to_pybytes() if data is not None else b""
        return list(map(blob.__getitem__, map(slice, bounds[:-1], bounds[1:])))
    body_list = bodies if type(bodies) is list else list(bodies)
    if set(map(type, body_list)) != {bytes}:
        try:
            body_list = [b if type(b) is bytes else bytes(b) for b in body_list]
        except TypeError:   # a str body: the general path reports it
            return None
    return body_list


def _ints(value: object, column: list[Any] | None, n: int, lo_hi: tuple[int, int]) -> Int64Array | int | None:
    """A validated int column (array) or scalar; None when out of range or not ints."""
    if column is None:
        if type(value) is not int or not lo_hi[0] <= value < lo_hi[1]:
            return None
        return value
    if not set(map(type, column)) <= {int}:
        return None
    if min(column) < lo_hi[0] or max(column) >= lo_hi[1]:
        return None
    return np.array(column, dtype=np.int64)


def _keys_text(keys: list[Any]) -> list[Any] | None:
    """KEYS as prepare() writes them (a list or tuple of str joined with spaces); None for other keys."""
    types = set(map(type, keys))
    if types <= {str, _NONE}:
        return keys
    if not types <= {str, _NONE, list, tuple} or not all(type(x) is str for k in keys if type(k) is not str and k
                                                        for x in k):
        return None
    joined = [k if type(k) is str or not k else " ".join(k) for k in keys]
    # prepare() writes an empty KEYS entry for a non-empty list that joins to ""; leave that to it
    return None if any(k and not j for k, j in zip(keys, joined, strict=True)) else joined


def build_columns(topic: str, queue_id: int, bodies: Bodies, *, tags: str | Sequence[str | None] | None = None,
                  keys: str | Sequence[str | Sequence[str] | None] | None = None, flag: int | Sequence[int] = 0,
                  born_timestamp: int | Sequence[int | None] | None = None,
                  born_host: HostAddress | tuple[str, int] | None = None, store_host: HostAddress,
                  max_message_size: int) -> ColumnBatch | None:
    """The records of a columnar batch, or None when the general rules are needed.

    Raises OptionError when a column's length differs from the number of bodies."""
    if type(topic) is not str or not valid_topic(topic) or topic == codec.SCHEDULE_TOPIC \
            or type(queue_id) is not int or not 0 <= queue_id < 2**31:
        return None
    n = len(bodies)
    tag_col = _column(tags, n, "tags")
    key_col = [keys] * n if isinstance(keys, str) else _column(keys, n, "keys")   # one key for every message
    flag_col = _column(flag, n, "flag")
    ts_col = _column(born_timestamp, n, "born_timestamp")
    body_list = _bodies_of(bodies) if n else None
    if body_list is None:
        return None
    body_lens = np.fromiter(map(len, body_list), dtype=np.int64, count=n)
    if int(body_lens.max()) > max_message_size:
        return None
    if key_col is not None:
        key_col = _keys_text(key_col)
        if key_col is None:
            return None
    flags = _ints(flag, flag_col, n, _INT32)
    now = time.time_ns() // 1_000_000
    if born_timestamp is None:
        born_timestamp = now
    elif ts_col is not None and None in ts_col:
        ts_col = [now if t is None else t for t in ts_col]
    born_ts = _ints(born_timestamp, ts_col, n, _INT64)
    if flags is None or born_ts is None:
        return None
    try:
        born_host = HostAddress(*born_host) if born_host else DEFAULT_BORN_HOST
        born_ip, store_ip = codec.ids.pack_ip(born_host[0]), codec.ids.pack_ip(store_host[0])
    except (OptionError, TypeError):
        return None
    if not (type(born_host[1]) is int and 0 <= born_host[1] <= 0xFFFF and 0 <= store_host[1] <= 0xFFFF):
        return None
    tag_part = _tags(tags, tag_col, n)
    key_part = _keys(key_col, n)
    if tag_part is None or key_part is None:
        return None
    crcs = list(map(codec.crc32, body_list))
    return _assemble(topic, queue_id, body_list, body_lens, crcs, flags, born_ts, born_host, born_ip, store_host,
                     store_ip, tag_part, key_part, key_col)


class _Tags:
    """TAGS entries of a batch: ``lens`` (entry bytes, scalar or per message), ``codes`` (CQ tags
    codes, scalar or per message) and either ``block`` (n, width) rows of tag text (all tags ASCII
    and of one length), or the distinct ``entries`` with each message's ``index`` (None: one tag
    for the whole batch)."""

    def __init__(self, lens: int | Int64Array, codes: int | Int64Array, entries: list[bytes], *,
                 block: UInt8Array | None = None, index: npt.NDArray[np.intp] | None = None,
                 column: list[str] | None = None, distinct: list[str] | None = None) -> None:
        self.lens = lens
        self.codes = codes
        self.entries = entries
        self.block = block
        self.index = index
        self._column = column
        self._distinct = distinct

    def per_message(self, n: int) -> list[bytes]:
        """Each message's TAGS entry (shared bytes objects)."""
        if self.index is None and self.block is None:
            return self.entries * n
        if self.index is not None:
            index: list[int] = self.index.tolist()
        else:   # a block: built with its column and distinct tags
            assert self._distinct is not None and self._column is not None
            position = {t: i for i, t in enumerate(self._distinct)}
            index = list(map(position.__getitem__, self._column))
        return list(itemgetter(*index)(self.entries))   # two or more distinct tags: a tuple


def _tag_entry(tag: object) -> bytes | None:
    if tag is None or tag == "":
        return b""
    if type(tag) is not str or "\x01" in tag or "\x02" in tag:
        return None
    try:
        return b"TAGS\x01" + tag.encode("utf-8") + b"\x02"
    except UnicodeEncodeError:
        return None


def _tags(tags: object, column: list[Any] | None, n: int) -> _Tags | None:
    if column is not None:
        try:
            distinct = list(dict.fromkeys(column))
        except TypeError:      # unhashable: not a str
            return None
        if len(distinct) == 1:
            tags, column = distinct[0], None
    if column is None:
        entry = _tag_entry(tags)
        if entry is None:
            return None
        return _Tags(len(entry), codec.java_hash(cast(str, tags)) if entry else 0, [entry])
    maybe_entries = list(map(_tag_entry, distinct))
    if None in maybe_entries:
        return None
    entries = cast(list[bytes], maybe_entries)
    widths = set(map(len, entries))
    if len(widths) == 1 and b"" not in entries and all(map(str.isascii, distinct)):
        block = np.frombuffer("".join(column).encode("ascii"), dtype=np.uint8).reshape(n, -1)
        return _Tags(widths.pop(), _java_hash_rows(block), entries, block=block, column=column, distinct=distinct)
    position = {t: i for i, t in enumerate(distinct)}
    index = np.fromiter(map(position.__getitem__, column), dtype=np.intp, count=n)
    codes = np.array([codec.java_hash(t) if t else 0 for t in distinct], dtype=np.int64)
    lens = np.array(list(map(len, entries)), dtype=np.int64)
    return _Tags(lens[index], codes[index], entries, index=index)


class _Keys:
    """KEYS entries: ``block`` (n, width) rows of key + \\x02 when all keys have one byte length;
    else ``items`` per message with ``wrapped`` saying whether they carry "KEYS\\x01" and \\x02."""

    def __init__(self, lens: int | Int64Array, block: UInt8Array | None = None, items: list[bytes] | None = None,
                 wrapped: bool = False, blob: bytes = b"") -> None:
        self.lens = lens            # bytes of the KEYS entry in the properties: scalar or per message
        self.block = block
        self.items = items
        self.wrapped = wrapped
        self._blob = blob

    def as_items(self) -> _Keys:
        """The same keys as per-message items (for batches whose tags are not fixed-width)."""
        if self.block is None:
            return self
        return _Keys(self.lens, items=self._blob.split(b"\x02")[:-1])


def _keys(column: list[Any] | None, n: int) -> _Keys | None:
    if column is None:
        return _Keys(0)
    try:
        joined = "".join(column)
    except TypeError:
        joined = None
    if joined is not None and all(column):
        if "\x01" in joined or "\x02" in joined:
            return None
        try:
            blob = ("\x02".join(column) + "\x02").encode("utf-8")
        except UnicodeEncodeError:
            return None
        if len(blob) % n == 0 and blob[len(blob) // n - 1::len(blob) // n].count(2) == n:
            # every n-th byte is a separator and there are exactly n: all keys have one length
            return _Keys(len(blob) // n + len(_KEYS), block=np.frombuffer(blob, dtype=np.uint8).reshape(n, -1),
                         blob=blob)
        raw = np.frombuffer(blob, dtype=np.uint8)
        ends = np.flatnonzero(raw == 2)          # the separators: no key contains \x02
        return _Keys(np.diff(ends, prepend=-1) + len(_KEYS), items=blob.split(b"\x02")[:-1])
    # some messages without keys (None or ""): entries built one by one
    if not set(map(type, column)) <= {str, type(None)}:
        return None
    text = "".join(filter(None, column))
    if "\x01" in text or "\x02" in text:
        return None
    try:
        items = [_KEYS + k.encode("utf-8") + b"\x02" if k else b"" for k in column]
    except UnicodeEncodeError:
        return None
    return _Keys(np.fromiter(map(len, items), dtype=np.int64, count=n), items=items, wrapped=True)


def _assemble(topic: str, queue_id: int, bodies: list[bytes], body_lens: Int64Array, crcs: list[int],
              flags: Int64Array | int, born_ts: Int64Array | int, born_host: HostAddress, born_ip: bytes,
              store_host: HostAddress, store_ip: bytes, tags: _Tags, keys: _Keys,
              key_column: list[str | None] | None) -> ColumnBatch | None:
    n = len(bodies)
    born_v6, store_v6 = len(born_ip) == 16, len(store_ip) == 16
    fixed = codec.record.FIXED_HEADER[born_v6, store_v6]
    sys_flag = (codec.FLAG_BORNHOST_V6 if born_v6 else 0) | (codec.FLAG_STOREHOST_V6 if store_v6 else 0)
    head = fixed.pack(0, codec.MAGIC_V1, 0, queue_id, flags if type(flags) is int else 0, 0, 0, sys_flag,
                      born_ts if type(born_ts) is int else 0, born_ip, born_host[1], 0, store_ip, store_host[1],
                      0, 0, 0)
    topic_part = codec.record.encode_topic(topic, False)
    assert topic_part is not None   # valid_topic: at most 127 ASCII characters
    props_lens = tags.lens + keys.lens + _UNIQ_ENTRY
    if np.max(props_lens) > codec.MAX_PROPERTIES_LENGTH:
        return None
    sizes = body_lens + (fixed.size + len(topic_part) + 2) + props_lens
    inline = tags.index is None and keys.items is None   # everything between two bodies is fixed-width
    if not inline:
        keys = keys.as_items()
    wait_uniq = (b"\x02" if keys.items is not None and not keys.wrapped else b"") + _WAIT_UNIQ
    middle: list[list[bytes]] | None = None
    if inline:   # one row per record boundary: [tail(i - 1) | head(i)]
        pre = topic_part + int(props_lens).to_bytes(2, "big")
        tag_at = len(pre) + len(b"TAGS\x01")
        pre += tags.entries[0] if tags.block is None else b"TAGS\x01" + bytes(tags.block.shape[1]) + b"\x02"
        key_at = len(pre) + len(_KEYS)
        if keys.block is not None:
            pre += _KEYS + bytes(keys.block.shape[1])
    else:        # [WAIT + UNIQ_KEY | head] rows; topic part + length, tag, key pieces in between
        pre = b""
        width = len(topic_part) + 2
        props = np.empty((n, width), dtype=np.uint8)
        props[:, :-2] = np.frombuffer(topic_part, dtype=np.uint8)
        props.view(_int16_at(width, width - 2))["v"][:, 0] = props_lens
        entries = tags.per_message(n)
        if keys.items is not None and not keys.wrapped:
            entries = [e + _KEYS for e in entries]
        middle = [props.view(f"V{width}").ravel().tolist(), entries]
        if keys.items is not None:
            middle.append(keys.items)
    uniq_at = len(pre) + len(wait_uniq)
    tail = uniq_at + 33
    template = np.frombuffer(pre + wait_uniq + bytes(32) + b"\x02" + head, dtype=np.uint8)
    rows = np.empty((n + 1, len(template)), dtype=np.uint8)
    rows[:] = template
    uniq = codec.new_uniq_key_block(n)
    rows[1:, uniq_at:uniq_at + 32] = uniq
    if inline and tags.block is not None:
        rows[1:, tag_at:tag_at + tags.block.shape[1]] = tags.block
    if inline and keys.block is not None:
        rows[1:, key_at:key_at + keys.block.shape[1]] = keys.block
    heads = rows[:n].view(_head_dtype(born_v6, store_v6, tail, rows.shape[1]))[:, 0]
    heads["total"] = sizes
    heads["crc"] = crcs
    rows[:n, tail + codec.POS_BODY_CRC] &= 0x7F    # masked CRC: clear bit 31 (big-endian: first byte)
    heads["body_len"] = body_lens
    if type(flags) is not int:
        heads["flag"] = flags
    if type(born_ts) is not int:
        heads["born_ts"] = born_ts
    codes = np.full(n, tags.codes, dtype=np.int64) if isinstance(tags.codes, int) else tags.codes
    return ColumnBatch(topic=topic, queue_id=queue_id, bodies=bodies, rows=rows, tail=tail, heads=heads,
                       middle=middle, sizes=sizes, tags_codes=codes, uniq=uniq, keys=key_column)
