"""A broker's SEND_BATCH_MESSAGE body encoded as a whole (``MessageExtBatchEncoder`` over the client's
``MessageDecoder.encodeMessages`` body), without a ``Message`` per inner message.

The general path (broker/send.py: decode every entry's properties into a dict, add the batch header's
properties and ``CLUSTER``, ``messages.prepare`` and ``codec.encode_record`` per message) stores, for each
inner message, its properties string re-encoded from that dict. When the string is already what the
re-encoding gives - ``name\\x01value\\x02`` pairs, names unique, no empty name or value, no separator
inside a value, the last pair ending with ``\\x02`` (added where a 4.9.1+ Java client leaves it out: the
re-encoding adds it too), valid UTF-8 - the stored properties are the client's
bytes followed by the batch properties the message does not already have (a batch property it has keeps
its place; with the same value that changes nothing, a different value is left to the general path).
``build_raw_batch`` checks exactly that, and everything else ``prepare`` would refuse or rewrite, and
returns None whenever the general path is needed (it also words the refusals), so both write the same
bytes (tests/store/test_put_raw.py compares them on random batches).

The records are assembled record by record: ``encode`` packs each fixed header with one struct call (the
offsets known only at the append), and joins it with the body (a view into the request, not a copy), the
topic part with the properties length (one bytes object per distinct length) and the properties strings. A
broker batch is a few dozen records: numpy's per-call costs (``put_columns`` fills its headers column by
column) were more than the packing.
"""

from __future__ import annotations

import itertools
import re
import struct
from collections.abc import Mapping
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from rocketstream import codec
from rocketstream.codec import HostAddress
from rocketstream.errors import OptionError
from rocketstream.store.files.commit_log import TagsCodeOf
from rocketstream.store.write.messages import valid_topic

Int64Array: TypeAlias = npt.NDArray[np.int64]

_PAIR = re.compile(rb"([^\x01\x02]+)\x01([^\x01\x02]+)\x02")
_NOT_SEPARATORS = bytes(b for b in range(256) if b not in (1, 2))   # bytes.translate's delete set
_BATCH_HEAD = codec.record._BATCH_HEAD      # TOTALSIZE, MAGIC, BODYCRC, FLAG, BODY length
_ENTRY_MIN = _BATCH_HEAD.size + 2
_UNIQ = codec.PROPERTY_UNIQ_KEY.encode()
_KEYS = codec.PROPERTY_KEYS.encode()
_TAGS = codec.PROPERTY_TAGS.encode()
_DELAY = codec.PROPERTY_DELAY.encode()
_OWN = (codec.PROPERTY_UNIQ_KEY, codec.PROPERTY_KEYS, codec.PROPERTY_TAGS, codec.PROPERTY_DELAY)
_CRC_MASK = 0x7FFFFFFF
_PROPS_LEN = struct.Struct(">h")
crc32 = codec.crc32


class RawBatch:
    """The records of one broker batch, ready to encode at a commit-log position (an ``EncodedBatch``)."""

    dispatch = True   # no transaction bits in a batch

    def __init__(self, topic: str, queue_id: int, fixed: struct.Struct, constants: tuple[object, ...],
                 crcs: list[int], flags: list[int], body_lens: list[int], bodies: list[memoryview],
                 middles: list[bytes], props: list[bytes], extras: list[bytes], sizes: list[int],
                 uniq: list[str | None], keys: list[str | None] | None, tags_codes: Int64Array) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.count = len(bodies)
        self._fixed = fixed
        self._constants = constants
        self._crcs = crcs
        self._flags = flags
        self._body_lens = body_lens
        self._bodies = bodies
        self._middles = middles
        self._props = props
        self._extras = extras
        self._size_list = sizes
        self._start_list = list(itertools.accumulate(sizes, initial=0))
        self.total = self._start_list.pop()
        self.sizes = np.array(sizes, dtype=np.int64)
        self.starts = np.array(self._start_list, dtype=np.int64)
        self._uniq = uniq
        self._keys = keys
        self._tags_codes = tags_codes

    def uniq_keys(self) -> list[str]:
        return [u or "" for u in self._uniq]

    def index_keys(self) -> tuple[list[str | None], list[str | None] | None]:
        return self._uniq, self._keys

    def tags_codes(self, store_timestamp: int, tags_code_of: TagsCodeOf) -> Int64Array:
        """TAGS hashes (never SCHEDULE_TOPIC_XXXX: refused by build_raw_batch)."""
        return self._tags_codes

    def encode(self, physical_offset: int, queue_offset: int, store_timestamp: int) -> bytes:
        """Each record's fixed header packed whole (one struct call: a batch is a few dozen records, fewer than
        numpy's per-call costs repay), then its body, topic + properties length, properties."""
        magic, queue_id, sys_flag, born_ts, born_ip, born_port, store_ip, store_port, reconsume = self._constants
        pack = self._fixed.pack
        parts: list[bytes | memoryview] = []
        add = parts.extend
        for i, (size, start, crc, flag, body_len) in enumerate(zip(self._size_list, self._start_list, self._crcs,
                                                                   self._flags, self._body_lens, strict=True)):
            add((pack(size, magic, crc, queue_id, flag, queue_offset + i, physical_offset + start, sys_flag, born_ts,
                      born_ip, born_port, store_timestamp, store_ip, store_port, reconsume, 0, body_len),
                 self._bodies[i], self._middles[i], self._props[i], self._extras[i]))
        return b"".join(parts)


def build_raw_batch(topic: str, queue_id: int, raw: bytes, *, batch_properties: Mapping[str, str], sys_flag: int,
                    born_timestamp: int, born_host: HostAddress, reconsume_times: int, store_host: HostAddress,
                    max_message_size: int) -> RawBatch | None:
    """The batch encoded as the general path would store it, or None when that path is needed.

    ``raw``: the request body (``MessageDecoder.encodeMessages``); ``batch_properties``: the header's
    properties with ``CLUSTER`` (in the order the general path adds them); ``sys_flag`` as the general
    path hands it to ``prepare`` (transaction and compression bits cleared)."""
    if type(topic) is not str or not valid_topic(topic) or topic == codec.SCHEDULE_TOPIC \
            or not 0 <= queue_id < 2**31 or sys_flag & ~codec.FLAG_MULTI_TAGS \
            or not 0 <= reconsume_times < 2**31 or not -(2**63) <= born_timestamp < 2**63 or not raw:
        return None
    if any(name in batch_properties for name in _OWN):
        return None
    try:
        extra = [(k.encode("utf-8"), v.encode("utf-8")) for k, v in batch_properties.items()]
        codec.encode_properties(batch_properties)   # separators inside: the general path refuses the batch
        born_ip, store_ip = codec.ids.pack_ip(born_host[0]), codec.ids.pack_ip(store_host[0])
    except (OptionError, UnicodeEncodeError, TypeError):
        return None
    if not (0 <= born_host[1] <= 0xFFFF and 0 <= store_host[1] <= 0xFFFF):
        return None
    entries = _split(raw, max_message_size)
    if entries is None:
        return None
    bodies, props, flags = entries
    if any(p and p[-1] != 2 for p in props):
        # Java clients 4.9.1-5.1.4 end the last pair without \x02 (MessageDecoder.messageProperties2String
        # deletes it). The general path decodes such a string exactly as the same string with \x02 appended
        # (decode_properties drops the empty last segment) and re-encodes it with one, so the string with \x02
        # is what it stores whenever the checks below find it in re-encoded form (else they decline).
        props = [p + b"\x02" if p and p[-1] != 2 else p for p in props]
    parsed = _uniform(props, extra)
    if parsed is None:
        parsed = _one_by_one(props, extra)
        if parsed is None:
            return None
    extra_of, uniq, keys, tags = parsed
    n = len(bodies)
    born_v6, store_v6 = len(born_ip) == 16, len(store_ip) == 16
    fixed = codec.record.FIXED_HEADER[born_v6, store_v6]
    flag_bits = sys_flag | (codec.FLAG_BORNHOST_V6 if born_v6 else 0) | (codec.FLAG_STOREHOST_V6 if store_v6 else 0)
    topic_part = codec.record.encode_topic(topic, False)
    assert topic_part is not None   # valid_topic: at most 127 ASCII characters
    body_lens = list(map(len, bodies))
    props_lens = [len(p) + len(e) for p, e in zip(props, extra_of, strict=True)]
    if max(props_lens) > codec.MAX_PROPERTIES_LENGTH:
        return None
    fixed_part = fixed.size + len(topic_part) + 2
    sizes = [fixed_part + b + p for b, p in zip(body_lens, props_lens, strict=True)]
    crcs = [crc32(b) & _CRC_MASK for b in bodies]
    # topic + PROPERTIES length: one bytes object per distinct length (a batch's are mostly equal)
    middle_of = {length: topic_part + _PROPS_LEN.pack(length) for length in set(props_lens)}
    if tags is None:
        tags_codes = np.zeros(n, dtype=np.int64)
    else:
        codes: dict[bytes | None, int] = {t: codec.java_hash(t.decode("utf-8")) for t in set(tags) if t}
        codes[None] = 0
        tags_codes = np.fromiter(map(codes.__getitem__, tags), dtype=np.int64, count=n)
    constants = (codec.MAGIC_V1, queue_id, flag_bits, born_timestamp, born_ip, born_host[1], store_ip, store_host[1],
                 reconsume_times)
    return RawBatch(topic, queue_id, fixed, constants, crcs, flags, body_lens, bodies,
                    list(map(middle_of.__getitem__, props_lens)), props, extra_of, sizes, uniq, keys, tags_codes)


def _split(raw: bytes, max_message_size: int) -> tuple[list[memoryview], list[bytes], list[int]] | None:
    """(bodies, properties strings, flags) of the batch body's entries; None for anything that does not
    decode cleanly (``codec.decode_batch_body`` words it). One pass: each entry's slices are taken where
    it is checked."""
    n_bytes = len(raw)
    unpack = _BATCH_HEAD.unpack_from
    head = _BATCH_HEAD.size
    mv = memoryview(raw)
    bodies: list[memoryview] = []
    props: list[bytes] = []
    flags: list[int] = []
    pos = longest = 0
    while pos < n_bytes:
        if n_bytes - pos < _ENTRY_MIN:
            return None
        total, _, _, flag, body_len = unpack(raw, pos)
        p = pos + head + body_len
        if total < _ENTRY_MIN or total > n_bytes - pos or body_len < 0 or body_len + _ENTRY_MIN > total \
                or raw[p] & 0x80 or _ENTRY_MIN + body_len + ((raw[p] << 8) | raw[p + 1]) != total:
            return None
        if body_len > longest:
            longest = body_len
        bodies.append(mv[pos + head:p])
        props.append(raw[p + 2:pos + total])
        flags.append(flag)
        pos += total
    if longest > max_message_size:
        return None
    return bodies, props, flags


_Parsed: TypeAlias = "tuple[list[bytes], list[str | None], list[str | None] | None, list[bytes | None] | None]"


def _uniform(props: list[bytes], extra: list[tuple[bytes, bytes]]) -> _Parsed | None:
    """The common batch: every properties string has the same names in the same order (one client, one
    code path). Checked on the joined strings with a few C-level calls; None when it does not hold (the
    caller then looks at each string) or a string is not in re-encoded form."""
    n = len(props)
    k = props[0].count(2)
    # k pairs in every string (each non-empty one ends with \x02: build_raw_batch appended it where missing)
    if not k or [p.count(2) for p in props] != [k] * n:
        return None
    blob = b"".join(props)
    # name \x01 value \x02, k * n times: the separators alternate, and no name or value is empty
    if blob.translate(None, _NOT_SEPARATORS) != b"\x01\x02" * (k * n):
        return None
    parts = blob.replace(b"\x01", b"\x02").split(b"\x02")   # name, value, ..., name, value, b""
    if parts.count(b"") != 1:
        return None
    names = parts[0:2 * k:2]
    # the same names in every string: the first string's, n times
    if parts[0::2] != names * n + [b""] or len(set(names)) != k or _DELAY in names:
        return None
    if not blob.isascii():
        try:
            blob.decode("utf-8")
        except UnicodeDecodeError:
            return None
    values = parts[1::2]
    missing = []
    for name, value in extra:
        if name in names:
            if values[names.index(name)::k].count(value) != n:
                return None       # a batch property that changes a message's own value: the general path
        else:
            missing.append(name + b"\x01" + value + b"\x02")
    tail = b"".join(missing)

    def column(name: bytes) -> list[bytes] | None:
        return values[names.index(name)::k] if name in names else None

    u = column(_UNIQ)
    uniq: list[str | None] = [None] * n if u is None else list(b"\x02".join(u).decode("utf-8").split("\x02"))
    kv = column(_KEYS)
    keys: list[str | None] | None = None if kv is None else list(b"\x02".join(kv).decode("utf-8").split("\x02"))
    tags: list[bytes | None] | None = None if _TAGS not in names else list(values[names.index(_TAGS)::k])
    return [tail] * n, uniq, keys, tags


def _one_by_one(props: list[bytes], extra: list[tuple[bytes, bytes]]) -> _Parsed | None:
    """What ``_uniform`` checks, string by string (names differ between messages)."""
    extras: dict[tuple[bool, ...], bytes] = {}
    extra_of: list[bytes] = []
    uniq: list[str | None] = []
    keys: list[str | None] = []
    tags: list[bytes | None] = []
    findall = _PAIR.findall
    for r in props:
        d = dict(findall(r))
        k = r.count(2)
        if len(d) != k or r.count(1) != k or (r and r[-1] != 2) or _DELAY in d:
            return None
        if not r.isascii():
            try:
                r.decode("utf-8")
            except UnicodeDecodeError:
                return None
        present = tuple(name in d for name, _ in extra)
        for (name, value), has in zip(extra, present, strict=True):
            if has and d[name] != value:
                return None
        e = extras.get(present)
        if e is None:
            e = extras[present] = b"".join(name + b"\x01" + value + b"\x02"
                                           for (name, value), has in zip(extra, present, strict=True) if not has)
        extra_of.append(e)
        u = d.get(_UNIQ)
        uniq.append(None if u is None else u.decode("utf-8"))
        key = d.get(_KEYS)
        keys.append(None if key is None else key.decode("utf-8"))
        tags.append(d.get(_TAGS))
    return extra_of, uniq, keys if any(k is not None for k in keys) else None, tags
