"""RocketMQ 4.9 commit-log record and consume-queue unit codec (pure functions).

Everything here is bytes in, values out (or the reverse); no file I/O. The layout is RocketMQ's
``CommitLog.DefaultAppendMessageCallback.doAppend`` / ``MessageDecoder.decode`` (docs/store-format.md
draws it); all integers are big-endian and signed.

Commit-log record (V1 magic, both hosts IPv4; each IPv6 host adds 12 bytes and shifts what follows)::

    +------+------+-------------------------------------------------------------------+
    |  pos | size | field                                                             |
    +------+------+-------------------------------------------------------------------+
    |    0 |    4 | TOTALSIZE        whole record, this field included                |
    |    4 |    4 | MAGICCODE        V1 DAA320A7 | V2 DAA320AB | BLANK CBD43194        |
    |    8 |    4 | BODYCRC          crc32(body as stored) & 0x7FFFFFFF               |
    |   12 |    4 | QUEUEID                                                           |
    |   16 |    4 | FLAG             producer's Message.flag                          |
    |   20 |    8 | QUEUEOFFSET      logical offset in the consume queue              |
    |   28 |    8 | PHYSICALOFFSET   commit-log offset of byte 0 of this record       |
    |   36 |    4 | SYSFLAG          bits: 0 compressed, 2-3 transaction, 4/5 IPv6,   |
    |      |      |                  8-10 compression type (0 read as zlib)           |
    |   40 |    8 | BORNTIMESTAMP    ms since epoch, producer clock                   |
    |   48 | 8/20 | BORNHOST         IPv4 (4) or IPv6 (16) address + int32 port       |
    |   56 |    8 | STORETIMESTAMP   ms since epoch, broker clock                     |
    |   64 | 8/20 | STOREHOST        IPv4 (4) or IPv6 (16) address + int32 port       |
    |   72 |    4 | RECONSUMETIMES                                                    |
    |   76 |    8 | PREPARED TRANSACTION OFFSET                                       |
    |   84 |    4 | BODY length B                                                     |
    |   88 |    B | BODY             maybe compressed (SYSFLAG bit 0)                 |
    | 88+B |  1/2 | TOPIC length T   int8 (V1) | int16 (V2)                           |
    |  ... |    T | TOPIC            UTF-8                                            |
    |  ... |    2 | PROPERTIES length P (int16, <= 32767)                             |
    |  ... |    P | PROPERTIES       UTF-8 "name\\x01value\\x02" ...                    |
    +------+------+-------------------------------------------------------------------+
    TOTALSIZE = 91 + B + T + P for V1 with two IPv4 hosts (see record_size()).

    Blank (end-of-file) record: TOTALSIZE = bytes to end of file (int32), MAGICCODE = BLANK; 8 bytes.
    Consume-queue unit (20 bytes): commitLogOffset int64 | size int32 | tagsCode int64.
"""


from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from rocketstream.codec.compression import decompress_body
from rocketstream.codec.constants import (
    BLANK_MAGIC,
    CQ_UNIT,
    END_FILE_MIN_BLANK_LENGTH,
    FLAG_BORNHOST_V6,
    FLAG_STOREHOST_V6,
    INT8,
    INT16,
    INT32_PAIR,
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    RECORD_HEAD,
)
from rocketstream.codec.ids import HostAddress, offset_msg_id, pack_ip, unpack_host
from rocketstream.codec.properties import (
    decode_java_utf8,
    decode_properties,
    encode_properties,
)
from rocketstream.codec.tags import cq_tags_code
from rocketstream.errors import CorruptStoreError, OptionError

try:   # ISA-L's CRC32 is ~8x faster than zlib's on 4 KiB bodies (same IEEE polynomial, same results)
    from isal.isal_zlib import crc32 as crc32
except ImportError:  # pragma: no cover - isal is a dependency; keep working without it
    from zlib import crc32 as crc32

_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGIC(0), BODYCRC(0), FLAG, BODY length


def _mid_format(born_v6: bool, store_v6: bool) -> str:
    return f"{16 if born_v6 else 4}siq{16 if store_v6 else 4}siiqi"


# BORNHOST .. BODY length, keyed by (born_v6, store_v6).
_MID = {(b, s): struct.Struct(">" + _mid_format(b, s)) for b in (False, True) for s in (False, True)}
# The whole fixed header up to BODY length in one pack: the put hot path.
FIXED_HEADER = {(b, s): struct.Struct(">iiiiiqqiq" + _mid_format(b, s)) for b in (False, True) for s in (False, True)}

_CRC_MASK = 0x7FFFFFFF


# ``crc32(data, value=0) -> int`` (imported above) is the one CRC32 of the store: put, recovery,
# check and the bulk reader's check_crc all use it (or masked_crc32 below).


def masked_crc32(data: bytes) -> int:
    """CRC32 (IEEE) with bit 31 cleared, as RocketMQ stores BODYCRC."""
    return crc32(data) & _CRC_MASK


# --- records ----------------------------------------------------------------------------------
def record_size(body_len: int, topic_len: int, props_len: int, *, born_v6: bool = False, store_v6: bool = False,
                v2: bool = False) -> int:
    """TOTALSIZE of a record from its variable lengths (``CommitLog.calMsgLength``)."""
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + (20 if born_v6 else 8) + 8 + (20 if store_v6 else 8) + 4 + 8
            + 4 + body_len + (2 if v2 else 1) + topic_len + 2 + props_len)


@lru_cache(maxsize=4096)
def encode_topic(topic: str, v2: bool) -> bytes | None:
    """Length prefix + UTF-8 topic, or None when too long for the version's length field."""
    try:
        raw = topic.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise OptionError("topic", f"not encodable as UTF-8: {exc}") from exc
    if len(raw) > (MAX_PROPERTIES_LENGTH if v2 else MAX_TOPIC_LENGTH_V1):
        return None
    return (INT16.pack(len(raw)) if v2 else INT8.pack(len(raw))) + raw


@dataclass(slots=True)
class MessageRecord:
    """One decoded commit-log record (RocketMQ's MessageExt); ``body`` is as stored."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: HostAddress
    store_timestamp: int
    store_host: HostAddress
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.physical_offset)

    @property
    def msg_id(self) -> str:
        """What RocketMQ clients show as the message id: UNIQ_KEY, else the offset id."""
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    @property
    def tags_code(self) -> int:
        """CQ tags code with the default delay levels (see cq_tags_code for configured ones)."""
        return cq_tags_code(self.topic, self.properties, self.store_timestamp, offset=self.physical_offset)

    def uncompressed_body(self, *, path: object = None) -> bytes:
        return decompress_body(self.body, self.sys_flag, path=path, offset=self.physical_offset)

    def encode(self) -> bytes:
        """Re-encode with this record's magic; body CRC and TOTALSIZE are recomputed."""
        return encode_record(
            topic=self.topic, queue_id=self.queue_id, body=self.body, properties=self.properties, flag=self.flag,
            queue_offset=self.queue_offset, physical_offset=self.physical_offset, sys_flag=self.sys_flag,
            born_timestamp=self.born_timestamp, born_host=self.born_host, store_timestamp=self.store_timestamp,
            store_host=self.store_host, reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset, magic=self.magic)


def encode_record(
    *,
    topic: str,
    queue_id: int,
    body: bytes,
    properties: Mapping[str, str | None] | bytes,
    flag: int = 0,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: tuple[str, int],
    store_timestamp: int,
    store_host: tuple[str, int],
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    magic: int | None = None,
) -> bytes:
    """One commit-log record. ``properties`` may be pre-encoded bytes. Magic defaults to V1, or V2 when
    the topic is longer than 127 bytes. The IPv6 SYSFLAG bits follow the hosts; BODYCRC is computed."""
    if magic is None:
        v2 = len(topic) > MAX_TOPIC_LENGTH_V1
        topic_bytes = encode_topic(topic, v2)
        if topic_bytes is None and not v2:  # short in chars but long in UTF-8 bytes
            v2, topic_bytes = True, encode_topic(topic, True)
        magic = MAGIC_V2 if v2 else MAGIC_V1
    elif magic in (MAGIC_V1, MAGIC_V2):
        topic_bytes = encode_topic(topic, magic == MAGIC_V2)
    else:
        raise OptionError("magic", "must be MAGIC_V1, MAGIC_V2 or None", magic)
    if topic_bytes is None:
        limit = MAX_PROPERTIES_LENGTH if magic == MAGIC_V2 else MAX_TOPIC_LENGTH_V1
        raise OptionError("topic", f"longer than {limit} UTF-8 bytes allowed by this magic", topic)
    props = properties if isinstance(properties, (bytes, bytearray)) else encode_properties(properties)
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise OptionError("properties", f"encoded length {len(props)} exceeds {MAX_PROPERTIES_LENGTH}")
    born_ip = pack_ip(born_host[0])
    store_ip = pack_ip(store_host[0])
    if not (0 <= born_host[1] <= 0xFFFF and 0 <= store_host[1] <= 0xFFFF):
        raise OptionError("port", "must be in [0, 65535]", (born_host[1], store_host[1]))
    born_v6 = len(born_ip) == 16
    store_v6 = len(store_ip) == 16
    sys_flag = (sys_flag & ~(FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6)) | (FLAG_BORNHOST_V6 if born_v6 else 0) \
        | (FLAG_STOREHOST_V6 if store_v6 else 0)
    fixed = FIXED_HEADER[born_v6, store_v6]
    total = fixed.size + len(body) + len(topic_bytes) + 2 + len(props)
    try:
        head = fixed.pack(total, magic, crc32(body) & _CRC_MASK, queue_id, flag, queue_offset, physical_offset,
                          sys_flag, born_timestamp, born_ip, born_host[1], store_timestamp, store_ip, store_host[1],
                          reconsume_times, prepared_transaction_offset, len(body))
    except struct.error as exc:
        raise OptionError("record", f"a field is out of range for its int32/int64 slot: {exc}") from exc
    return b"".join((head, body, topic_bytes, INT16.pack(len(props)), props))


def encode_blank(max_blank: int) -> bytes:
    """The 8-byte end-of-file record: TOTALSIZE = bytes left in the file, BLANK magic."""
    if not END_FILE_MIN_BLANK_LENGTH <= max_blank < 2**31:
        raise OptionError("max_blank", f"must be in [{END_FILE_MIN_BLANK_LENGTH}, 2^31)", max_blank)
    return INT32_PAIR.pack(max_blank, BLANK_MAGIC)


def _as_bytes_view(buf: object) -> memoryview:
    # buf: bytes, mmap, memoryview or uint8 ndarray; ``object`` because numpy's stubs give ndarray the
    # buffer protocol only for Python >= 3.12 (we check as 3.10)
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)  # type: ignore[arg-type]
    return mv if mv.format in ("B", "b", "c") and mv.ndim == 1 else mv.cast("B")


# --- the one record validator ---------------------------------------------------------------------
# The checks ``CommitLog.checkMessageAndReturnSize`` makes on a record, and nothing stricter
# (docs/store-format.md, "Where recovery may cut the commit log"), in the order they are made.
# ``arrow_records.record_problems`` is the numpy twin: one mask per check, same names, same rules.
# Properties are no check: Java decodes their bytes with replacement characters and never fails
# on them (a trailing 0x02 or not, valid UTF-8 or not).
RECORD_CHECKS: dict[str, str] = {
    "header": "no room for TOTALSIZE and MAGICCODE",
    "magic": "bad MAGICCODE",
    "size": "TOTALSIZE smaller than the smallest possible record",
    "truncated": "record extends past the end of the file",
    "hosts": "TOTALSIZE too small for the hosts of SYSFLAG",
    "ports": "port out of range",                 # optional: Java does not check it (readers do)
    "body": "BODY length does not fit in TOTALSIZE",
    "crc": "BODYCRC mismatch",                    # optional: checkCRCOnRecover / check_crc
    "topic": "TOPIC length does not fit in TOTALSIZE",
    "properties": "negative PROPERTIES length",
    "formula": "length formula differs from TOTALSIZE",
    "position": "PHYSICALOFFSET field differs from the record's position",   # optional
}
_MIN_SIZE = {MAGIC_V1: record_size(0, 0, 0), MAGIC_V2: record_size(0, 0, 0, v2=True)}


class RecordProblem(NamedTuple):
    """Why a record failed ``check_record``: ``check`` is a key of RECORD_CHECKS, ``message`` says
    it with the values read."""

    check: str
    message: str

    def __str__(self) -> str:
        return self.message


class RecordLayout(NamedTuple):
    """The header fields of a record that passed ``check_record``, and where its variable parts are
    (positions in the buffer it was checked in)."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_ip: bytes
    born_port: int
    store_timestamp: int
    store_ip: bytes
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body_pos: int
    body_len: int
    topic_pos: int
    topic_len: int
    props_pos: int
    props_len: int


def body_crc_problem(body: bytes | bytearray | memoryview, stored: int) -> str | None:
    """The BODYCRC rule (``CommitLog.checkMessageAndReturnSize`` under checkCRCOnRecover): an empty
    body is not checked, any other must have crc32 & 0x7FFFFFFF equal to the stored value."""
    if not len(body):
        return None
    crc = crc32(body) & _CRC_MASK
    return None if crc == stored else f"BODYCRC mismatch: stored {stored}, computed {crc}"


def check_record(buf: object, pos: int = 0, *, file_size: int | None = None, base_offset: int = 0,
                 check_crc: bool, check_ports: bool = False,
                 check_position: bool = True) -> tuple[RecordProblem | None, RecordLayout | None]:
    """Validate the message record at ``buf[pos]``: (None, layout) when it passes, (problem, None)
    at the first check it fails (RECORD_CHECKS order). A BLANK record is the caller's business: here
    it is a bad MAGICCODE.

    ``file_size``: records end at or before it (default: the buffer's length). ``check_crc``: BODYCRC.
    ``check_ports``: born/store ports in [0, 65535] (readers; recovery does not, like Java).
    ``check_position``: PHYSICALOFFSET equals ``base_offset + pos`` (a real broker always writes it so).
    """
    mv = _as_bytes_view(buf)
    limit = mv.nbytes if file_size is None else min(file_size, mv.nbytes)
    avail = limit - pos
    if pos < 0 or avail < 8:
        return RecordProblem("header", f"truncated record: {max(avail, 0)} bytes left, TOTALSIZE and MAGICCODE "
                                       "need 8"), None
    total_size, magic = INT32_PAIR.unpack_from(mv, pos)
    minimum = _MIN_SIZE.get(magic)
    if minimum is None:
        return RecordProblem("magic", f"bad MAGICCODE 0x{magic & 0xFFFFFFFF:08X} (not a message or blank record)"), None
    if total_size < minimum:
        return RecordProblem("size", f"TOTALSIZE {total_size} is smaller than the smallest possible record"), None
    if total_size > avail:
        return RecordProblem("truncated", f"truncated record: TOTALSIZE {total_size} but only {avail} bytes "
                                          "remain in the file"), None
    end = pos + total_size
    (_, _, body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
     born_timestamp) = RECORD_HEAD.unpack_from(mv, pos)
    mid = _MID[bool(sys_flag & FLAG_BORNHOST_V6), bool(sys_flag & FLAG_STOREHOST_V6)]
    body_pos = pos + RECORD_HEAD.size + mid.size
    tl_width = 2 if magic == MAGIC_V2 else 1
    if body_pos + tl_width + 2 > end:
        return RecordProblem("hosts", f"TOTALSIZE {total_size} is too small for the hosts of SYSFLAG "
                                      f"0x{sys_flag:X}"), None
    (born_ip, born_port, store_timestamp, store_ip, store_port, reconsume_times, prepared_transaction_offset,
     body_len) = mid.unpack_from(mv, pos + RECORD_HEAD.size)
    if check_ports and not (0 <= born_port <= 0xFFFF and 0 <= store_port <= 0xFFFF):
        return RecordProblem("ports", f"port out of range (born {born_port}, store {store_port})"), None
    if body_len < 0 or body_pos + body_len + tl_width + 2 > end:
        return RecordProblem("body", f"BODY length {body_len} does not fit in a record of TOTALSIZE "
                                     f"{total_size}"), None
    if check_crc:
        problem = body_crc_problem(mv[body_pos:body_pos + body_len], body_crc)
        if problem is not None:
            return RecordProblem("crc", problem), None
    p = body_pos + body_len
    if tl_width == 2:
        (topic_len,) = INT16.unpack_from(mv, p)
    else:
        (topic_len,) = INT8.unpack_from(mv, p)     # Java reads a signed byte
    topic_pos = p + tl_width
    if topic_len < 0 or topic_pos + topic_len + 2 > end:
        return RecordProblem("topic", f"TOPIC length {topic_len} does not fit in a record of TOTALSIZE "
                                      f"{total_size}"), None
    (props_len,) = INT16.unpack_from(mv, topic_pos + topic_len)
    props_pos = topic_pos + topic_len + 2
    if props_len < 0:
        return RecordProblem("properties", f"negative PROPERTIES length {props_len}"), None
    if props_pos + props_len != end:
        return RecordProblem("formula", f"length formula gives {props_pos + props_len - pos} but TOTALSIZE is "
                                        f"{total_size}"), None
    if check_position and physical_offset != base_offset + pos:
        return RecordProblem("position", f"PHYSICALOFFSET field {physical_offset} does not match the record's "
                                         f"position {base_offset + pos}"), None
    return None, RecordLayout(total_size, magic, body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
                              born_timestamp, born_ip, born_port, store_timestamp, store_ip, store_port,
                              reconsume_times, prepared_transaction_offset, body_pos, body_len, topic_pos,
                              topic_len, props_pos, props_len)


def decode_record(buf: object, pos: int = 0, *, check_crc: bool = True, path: object = None,
                  base_offset: int = 0, check_position: bool = False) -> MessageRecord | None:
    """Decode the record starting at ``buf[pos]``; None for a BLANK (end-of-file) record.

    ``buf`` is anything with the buffer protocol (bytes, mmap, memoryview, uint8 ndarray). A record
    that fails ``check_record`` (with the port check; PHYSICALOFFSET only when ``check_position``)
    raises CorruptStoreError(path=path, offset=base_offset + pos) saying what is wrong.
    """
    mv = _as_bytes_view(buf)
    if 0 <= pos <= mv.nbytes - 8 and INT32_PAIR.unpack_from(mv, pos)[1] == BLANK_MAGIC:
        return None
    problem, r = check_record(mv, pos, base_offset=base_offset, check_crc=check_crc, check_ports=True,
                              check_position=check_position)
    if r is None:
        raise CorruptStoreError(str(problem), path=path, offset=base_offset + pos)
    # MessageDecoder.decode: new String(topic, UTF_8)
    topic = decode_java_utf8(mv[r.topic_pos:r.topic_pos + r.topic_len])
    properties = decode_properties(mv[r.props_pos:r.props_pos + r.props_len]) if r.props_len else {}
    return MessageRecord(
        r.total_size, r.magic, r.body_crc, r.queue_id, r.flag, r.queue_offset, r.physical_offset, r.sys_flag,
        r.born_timestamp, unpack_host(r.born_ip, r.born_port), r.store_timestamp, unpack_host(r.store_ip, r.store_port),
        r.reconsume_times, r.prepared_transaction_offset, mv[r.body_pos:r.body_pos + r.body_len].tobytes(), topic,
        properties)


# --- consume-queue units ----------------------------------------------------------------------
def encode_cq_unit(commit_log_offset: int, size: int, tags_code: int) -> bytes:
    """One 20-byte CQ unit: commitLogOffset int64, size int32, tagsCode int64."""
    return CQ_UNIT.pack(commit_log_offset, size, tags_code)



# --- client batch wire format (MessageDecoder.encodeMessages) ---------------------------------
class BatchEntry(NamedTuple):
    """One inner message of a client batch body."""

    flag: int
    body: bytes
    properties: dict[str, str]


def encode_batch_body(messages: Iterable[tuple[int, bytes, Mapping[str, str | None] | bytes]]) -> bytes:
    """Concatenate (flag, body, properties) inner records: TOTALSIZE, 0, 0, FLAG, B, BODY, P, PROPERTIES."""
    parts: list[bytes] = []
    for flag, body, properties in messages:
        props = properties if isinstance(properties, (bytes, bytearray)) else encode_properties(properties)
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise OptionError("properties", f"encoded length {len(props)} exceeds {MAX_PROPERTIES_LENGTH}")
        try:
            parts.append(_BATCH_HEAD.pack(_BATCH_HEAD.size + len(body) + 2 + len(props), 0, 0, flag, len(body)))
        except struct.error as exc:
            raise OptionError("flag", f"out of int32 range: {exc}", flag) from exc
        parts += (body, INT16.pack(len(props)), props)
    return b"".join(parts)


def decode_batch_body(raw: object, *, path: object = None, base_offset: int = 0) -> list[BatchEntry]:
    """Split a client batch body into its inner messages; CorruptStoreError names the inner offset."""
    mv = _as_bytes_view(raw)
    n = mv.nbytes
    pos = 0
    out: list[BatchEntry] = []
    while pos < n:
        where = base_offset + pos
        if n - pos < _BATCH_HEAD.size + 2:
            raise CorruptStoreError(f"truncated batch entry: {n - pos} bytes left", path=path, offset=where)
        total, _, _, flag, body_len = _BATCH_HEAD.unpack_from(mv, pos)
        if total < _BATCH_HEAD.size + 2 or total > n - pos:
            raise CorruptStoreError(f"batch entry TOTALSIZE {total} does not fit ({n - pos} bytes left)",
                                    path=path, offset=where)
        p = pos + _BATCH_HEAD.size
        if body_len < 0 or body_len + _BATCH_HEAD.size + 2 > total:
            raise CorruptStoreError(f"batch entry BODY length {body_len} exceeds TOTALSIZE {total}",
                                    path=path, offset=where)
        body = mv[p:p + body_len].tobytes()
        (props_len,) = INT16.unpack_from(mv, p + body_len)
        if props_len < 0 or _BATCH_HEAD.size + body_len + 2 + props_len != total:
            raise CorruptStoreError(f"batch entry lengths (body {body_len}, properties {props_len}) disagree "
                                    f"with TOTALSIZE {total}", path=path, offset=where)
        props_at = p + body_len + 2
        properties = decode_properties(mv[props_at:props_at + props_len])
        out.append(BatchEntry(flag, body, properties))
        pos += total
    return out

