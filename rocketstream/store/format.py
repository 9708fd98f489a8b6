"""RocketMQ 4.9 commit-log record, consume-queue unit and message-id codec (pure functions).

Everything here is bytes in, values out (or the reverse); no file I/O. Byte layouts follow
``spec/rocketmq-store-format.md`` sections 1 and 3; all integers are big-endian and signed.

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

import codecs
import ipaddress
import os
import re
import socket
import struct
import sys
import threading
import time
import zlib
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from rocketstream.errors import CorruptStoreError, OptionError, StoreConfigError

try:   # ISA-L's CRC32 is ~8x faster than zlib's on 4 KiB bodies (same IEEE polynomial, same results)
    from isal.isal_zlib import crc32 as crc32
except ImportError:  # pragma: no cover - isal is a dependency; keep working without it
    from zlib import crc32 as crc32

# --- constants ------------------------------------------------------------------------------
MAGIC_V1 = -626843481
MAGIC_V2 = -626843477
BLANK_MAGIC = -875286124
END_FILE_MIN_BLANK_LENGTH = 8
CQ_UNIT_SIZE = 20
MAX_PROPERTIES_LENGTH = 32767
MAX_TOPIC_LENGTH_V1 = 127
# ConsumeQueueExt.isExtAddr: a CQ unit's tagsCode <= Integer.MIN_VALUE - 1 is an address into
# consumequeue_ext/ (realOffset + Long.MIN_VALUE), not a tags code (spec 3.5).
EXT_ADDRESS_MAX = -(2**31) - 1

FLAG_COMPRESSED = 0x1
FLAG_MULTI_TAGS = 0x2
TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC
FLAG_BORNHOST_V6 = 0x10
FLAG_STOREHOST_V6 = 0x20
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_LZ4 = 1
COMPRESSION_ZSTD = 2
COMPRESSION_ZLIB = 3

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_TRAN_MSG = "TRAN_MSG"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

# messageDelayLevel default "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"; index = level - 1.
DELAY_LEVELS_MS: tuple[int, ...] = (
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
    420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
)

# Host-independent field positions, for readers that peek at a record without decoding it.
POS_TOTAL_SIZE, POS_MAGIC, POS_BODY_CRC, POS_QUEUE_ID, POS_FLAG = 0, 4, 8, 12, 16
POS_QUEUE_OFFSET, POS_PHYSICAL_OFFSET, POS_SYS_FLAG, POS_BORN_TIMESTAMP, POS_BORN_HOST = 20, 28, 36, 40, 48

CQ_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])

# --- precompiled structs ----------------------------------------------------------------------
_II = struct.Struct(">ii")
_I = struct.Struct(">i")
_H = struct.Struct(">h")
_B = struct.Struct(">b")
_CQ = struct.Struct(">qiq")
_IQ = struct.Struct(">iq")
_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGIC(0), BODYCRC(0), FLAG, BODY length
# TOTALSIZE .. BORNTIMESTAMP: identical for every host kind.
_HEAD = struct.Struct(">iiiiiqqiq")


def _mid_format(born_v6: bool, store_v6: bool) -> str:
    return f"{16 if born_v6 else 4}siq{16 if store_v6 else 4}siiqi"


# BORNHOST .. BODY length, keyed by (born_v6, store_v6).
_MID = {(b, s): struct.Struct(">" + _mid_format(b, s)) for b in (False, True) for s in (False, True)}
# The whole fixed header up to BODY length in one pack: the put hot path.
_FIXED = {(b, s): struct.Struct(">iiiiiqqiq" + _mid_format(b, s)) for b in (False, True) for s in (False, True)}

_CRC_MASK = 0x7FFFFFFF
_JAVA_INT = re.compile(r"[+-]?[0-9]+")


# ``crc32(data, value=0) -> int`` (imported above) is the one CRC32 of the store: put, recovery,
# check and the bulk reader's check_crc all use it (or masked_crc32 below).


def masked_crc32(data: bytes) -> int:
    """CRC32 (IEEE) with bit 31 cleared, as RocketMQ stores BODYCRC."""
    return crc32(data) & _CRC_MASK


@lru_cache(maxsize=4096)
def java_hash(s: str) -> int:
    """Java ``String.hashCode``: over UTF-16 code units, wrapping to a signed int32."""
    if s.isascii():
        units: Iterable[int] = s.encode("ascii")
    else:
        units = array("H", s.encode("utf-16-le" if sys.byteorder == "little" else "utf-16-be", "surrogatepass"))
    h = 0
    for unit in units:
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x80000000 else h


def is_ext_address(tags_code: int) -> bool:
    """True when a CQ unit's tagsCode is a ConsumeQueueExt address (``ConsumeQueueExt.isExtAddr``)."""
    return tags_code <= EXT_ADDRESS_MAX


def tags_code(tags: str | None) -> int:
    """Consume-queue tags code of a normal message: 0 without tags, else Java hash (sign-extended)."""
    return java_hash(tags) if tags else 0


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``messageDelayLevel`` ("1s 5s ... 2h") to milliseconds per level (index = level - 1)."""
    units = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    levels = []
    for item in text.split():
        if item[-1:] not in units or not item[:-1].isdigit():
            raise StoreConfigError(f"messageDelayLevel: bad level {item!r} in {text!r} (expected e.g. '1s 5m 2h')")
        levels.append(int(item[:-1]) * units[item[-1]])
    return tuple(levels)


def cq_tags_code(
    topic: str,
    properties: Mapping[str, str],
    store_timestamp: int,
    *,
    delay_levels: Sequence[int] | Mapping[int, int] = DELAY_LEVELS_MS,
    path: object = None,
    offset: int | None = None,
) -> int:
    """The tagsCode a dispatcher writes into the CQ unit of this record (spec 3.2 and 1.12 step 5).

    For SCHEDULE_TOPIC_XXXX with a DELAY property it is the delivery time: store time + delay of the
    level (level clamped to the highest; +1000 ms when the level has no delay configured).
    """
    if topic == SCHEDULE_TOPIC:
        raw = properties.get(PROPERTY_DELAY)
        if raw is not None:
            if not _JAVA_INT.fullmatch(raw) or not -(2**31) <= int(raw) < 2**31:
                raise CorruptStoreError(f"DELAY property {raw!r} of a {SCHEDULE_TOPIC} record is not an int32",
                                        path=path, offset=offset)
            if isinstance(delay_levels, Mapping):
                max_level = max(delay_levels, default=0)
                level = min(int(raw), max_level)
                delay = delay_levels.get(level)
            else:
                level = min(int(raw), len(delay_levels))
                delay = delay_levels[level - 1] if level > 0 else None
            if level > 0:
                return store_timestamp + (1000 if delay is None else delay)
    return tags_code(properties.get(PROPERTY_TAGS))


# --- hosts ------------------------------------------------------------------------------------
class HostAddress(NamedTuple):
    """A socket address as stored in a record: IPv4 dotted or IPv6 text, and a port.

    A NamedTuple (immutable, hashable) so it also unpacks and compares as ``(host, port)``.
    """

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def is_v6(self) -> bool:
        return len(_pack_ip(self.host)) == 16

    @classmethod
    def parse(cls, text: str) -> HostAddress:
        """"1.2.3.4:10911" or "[::1]:10911" to a HostAddress."""
        host, sep, port = text.strip().rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise OptionError("host", "expected 'ip:port' or '[ipv6]:port'", text)
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        _pack_ip(host)
        return cls(host, int(port))


@lru_cache(maxsize=1024)
def _pack_ip(host: str) -> bytes:
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return socket.inet_pton(socket.AF_INET, text)
    except OSError:
        pass
    try:
        return socket.inet_pton(socket.AF_INET6, text)
    except OSError:
        raise OptionError("host", "not an IPv4 or IPv6 address", host) from None


@lru_cache(maxsize=1024)
def _unpack_host(ip: bytes, port: int) -> HostAddress:
    family = socket.AF_INET if len(ip) == 4 else socket.AF_INET6
    return HostAddress(socket.inet_ntop(family, ip), port)


# --- message ids ------------------------------------------------------------------------------
@lru_cache(maxsize=256)
def _msg_id_prefix(host: str, port: int) -> str:
    return (_pack_ip(host) + _I.pack(port)).hex().upper()


def offset_msg_id(store_host: tuple[str, int], physical_offset: int) -> str:
    """Broker-assigned id: hex(store ip || port int32 || physical offset int64), upper case."""
    host, port = store_host
    return f"{_msg_id_prefix(host, port)}{physical_offset & 0xFFFF_FFFF_FFFF_FFFF:016X}"


def offset_msg_ids(store_host: tuple[str, int], physical_offsets: Sequence[int]) -> list[str]:
    """offset_msg_id of every offset (one hex conversion for the whole list)."""
    host, port = store_host
    prefix = _msg_id_prefix(host, port)
    digits = np.asarray(physical_offsets, dtype=np.int64).astype(">i8").tobytes().hex().upper()
    return [f"{prefix}{digits[i:i + 16]}" for i in range(0, len(digits), 16)]


def decode_offset_msg_id(msg_id: str) -> tuple[HostAddress, int]:
    """Inverse of offset_msg_id: ((ip, port), physical offset). 32 hex chars => IPv4, 56 => IPv6."""
    text = msg_id.strip()
    if len(text) not in (32, 56):
        raise OptionError("msgId", "an offset message id has 32 (IPv4) or 56 (IPv6) hex characters", msg_id)
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise OptionError("msgId", "not a hex string", msg_id) from None
    port, physical_offset = _IQ.unpack_from(raw, len(raw) - 12)
    return _unpack_host(raw[:-12], port), physical_offset


class _UniqKeyState:
    """Per-process part of UNIQ_KEY (IP, pid, random) plus the month window and counter."""

    def __init__(self, now_ms: int) -> None:
        self.pid = os.getpid()
        lt = time.localtime(now_ms / 1000)
        nxt_year, nxt_mon = (lt.tm_year + 1, 1) if lt.tm_mon == 12 else (lt.tm_year, lt.tm_mon + 1)
        self.month_start_ms = int(time.mktime((lt.tm_year, lt.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000)
        self.next_month_ms = int(time.mktime((nxt_year, nxt_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000)
        # The random part is redrawn each month so ids stay unique when the time field restarts.
        self.prefix = (_local_ipv4() + struct.pack(">H", self.pid & 0xFFFF) + os.urandom(4)).hex().upper()
        self.last_t = -1
        self.counter = 0xFFFF


def _local_ipv4() -> bytes:
    """First public IPv4 we can see, else a private non-loopback one, else loopback, else time bytes."""
    found: list[ipaddress.IPv4Address] = []
    try:  # a UDP "connect" sends nothing; it only picks the outgoing interface
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            found.append(ipaddress.IPv4Address(s.getsockname()[0]))
    except (OSError, ValueError):
        pass
    if not any(not a.is_loopback for a in found):
        try:
            found.append(ipaddress.IPv4Address(socket.gethostbyname(socket.gethostname())))
        except (OSError, ValueError):
            pass
    for test in (lambda a: a.is_global, lambda a: not a.is_loopback and not a.is_unspecified, lambda a: True):
        for addr in found:
            if test(addr):
                return addr.packed
    return struct.pack(">I", int(time.time() * 1000) & 0xFFFFFFFF)


_uniq_lock = threading.Lock()
_uniq_state: _UniqKeyState | None = None
_UNIQ_SUFFIX_MASK = 0xFFFF_FFFF_FFFF   # time (32 bits) || counter (16 bits)


def _reset_uniq_state() -> None:
    """A forked child has another pid: its ids must not repeat the parent's."""
    global _uniq_state, _uniq_lock
    _uniq_state = None
    _uniq_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_uniq_state)


def _reserve_uniq_suffixes(count: int) -> tuple[str, int]:
    """(per-process prefix, first time||counter value) of ``count`` consecutive fresh ids.

    (time, counter) strictly increases across calls: a new millisecond bumps the counter by one,
    otherwise the pair counts on as one 48-bit number, so a counter that wraps within one ms (or
    a clock that stepped back) advances the time field by one.
    """
    global _uniq_state
    with _uniq_lock:
        now_ms = time.time_ns() // 1_000_000
        st = _uniq_state
        if st is None or now_ms >= st.next_month_ms:
            st = _uniq_state = _UniqKeyState(now_ms)
        t = max(now_ms - st.month_start_ms, 0)
        if t > st.last_t:
            first = (t << 16) | ((st.counter + 1) & 0xFFFF)
        else:
            first = ((st.last_t << 16) | st.counter) + 1
        last = first + count - 1
        st.last_t, st.counter = last >> 16, last & 0xFFFF
        return st.prefix, first


def new_uniq_key() -> str:
    """A fresh client UNIQ_KEY: 32 upper-hex chars, IP + pid + random + ms-since-month-start + counter.

    Unique within the process (see _reserve_uniq_suffixes).
    """
    prefix, value = _reserve_uniq_suffixes(1)
    return f"{prefix}{value & _UNIQ_SUFFIX_MASK:012X}"


def new_uniq_keys(count: int) -> list[str]:
    """``count`` fresh UNIQ_KEYs in increasing order, as ``count`` calls of new_uniq_key would give
    within one millisecond (one clock read and one lock round for the whole batch)."""
    if count <= 0:
        return []
    prefix, first = _reserve_uniq_suffixes(count)
    # one hex conversion for the batch: 16 digits per value, of which the last 12 are the suffix
    digits = (np.arange(first, first + count, dtype=np.int64) & _UNIQ_SUFFIX_MASK).astype(">i8").tobytes().hex()
    digits = digits.upper()
    return [prefix + digits[i:i + 12] for i in range(4, 16 * count, 16)]


# byte value -> its two upper-hex digits
_HEX_PAIRS = np.frombuffer(b"".join(b"%02X" % i for i in range(256)), dtype=np.uint8).reshape(256, 2)


def new_uniq_key_block(count: int) -> np.ndarray:
    """``count`` fresh UNIQ_KEYs as ASCII in a (count, 32) uint8 array, row i = the i-th key; the
    same keys new_uniq_keys would give, hex-formatted with numpy (the columnar put writes the rows
    straight into its records)."""
    prefix, first = _reserve_uniq_suffixes(count)
    out = np.empty((count, 32), dtype=np.uint8)
    out[:, :20] = np.frombuffer(prefix.encode("ascii"), dtype=np.uint8)
    suffix = (np.arange(first, first + count, dtype=np.int64) & _UNIQ_SUFFIX_MASK).astype(">i8")
    low6 = suffix.view(np.uint8).reshape(count, 8)[:, 2:]   # 48-bit time || counter, big-endian
    out[:, 20:] = _HEX_PAIRS.take(low6, axis=0).reshape(count, 12)
    return out


# --- properties -------------------------------------------------------------------------------
def encode_properties(props: Mapping[str, str | None]) -> bytes:
    """``name\\x01value\\x02`` per entry (every entry ends with \\x02), UTF-8; None values skipped."""
    items = [(k, v) for k, v in props.items() if v is not None]
    text = "".join([f"{k}\x01{v}\x02" for k, v in items])
    # A separator inside a name or value would silently change what a reader decodes.
    if text.count("\x01") != len(items) or text.count("\x02") != len(items):
        raise OptionError("properties", "names and values must not contain \\x01 or \\x02", dict(props))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise OptionError("properties", f"not encodable as UTF-8: {exc}") from exc


def decode_properties(raw: object, *, path: object = None, offset: int | None = None) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties(new String(raw, UTF_8))`` (spec 1.6); never fails.

    The bytes are decoded as Java does (:func:`decode_java_utf8`), then split on \\x02 and each
    segment at its first \\x01; segments with an empty name or value are dropped; a final segment
    without \\x02 counts like any other (4.9.1-5.1.4 brokers write no trailing \\x02, older and
    5.2+ ones do); a later duplicate name wins. ``path``/``offset`` are accepted for callers that
    pass them and unused: no property bytes are an error."""
    del path, offset
    out: dict[str, str] = {}
    for segment in decode_java_utf8(raw).split("\x02"):
        name, _, value = segment.partition("\x01")
        if name and value:
            out[name] = value
    return out


def _java_utf8_replace(exc: UnicodeError) -> tuple[str, int]:
    """Error handler giving the U+FFFD that Java's UTF-8 decoder (``new String(bytes, UTF_8)``,
    JDK 17) gives for a malformed sequence.

    Python replaces each maximal valid prefix of a sequence with one U+FFFD, and so does Java, except
    for an encoded UTF-16 surrogate (ED A0..BF ..): Python stops after ED (ED only continues with
    80..9F) and replaces ED, A0..BF and the third byte separately; Java reads the sequence as one
    three-byte character, finds a surrogate and replaces the whole of it — the first two bytes
    alone when the third is not a continuation byte or the input ends. Checked against the JDK
    (tests/store/test_foreign_bytes.py runs ``new String(b, UTF_8)`` on 20,000 malformed inputs).
    No replaced sequence ever includes an ASCII byte, so 0x01/0x02 survive as separators.
    """
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    raw, start = exc.object, exc.start
    if raw[start] == 0xED and start + 1 < len(raw) and 0xA0 <= raw[start + 1] <= 0xBF:
        third = start + 2 < len(raw) and 0x80 <= raw[start + 2] <= 0xBF
        return "\ufffd", start + (3 if third else 2)
    return "\ufffd", exc.end


codecs.register_error("rocketstream.java_utf8", _java_utf8_replace)


def decode_java_utf8(raw: object) -> str:
    """The string Java's ``new String(raw, StandardCharsets.UTF_8)`` builds: never fails, each
    malformed sequence becomes U+FFFD exactly where and as often as Java puts one."""
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError:
        return bytes(raw).decode("utf-8", "rocketstream.java_utf8")


def java_utf8_bytes(raw: object) -> bytes:
    """UTF-8 of :func:`decode_java_utf8` (the bytes themselves when they are valid UTF-8)."""
    return decode_java_utf8(raw).encode("utf-8")


# --- compression ------------------------------------------------------------------------------
_COMPRESSION_NAMES = {0: "zlib", COMPRESSION_LZ4: "lz4", COMPRESSION_ZSTD: "zstd", COMPRESSION_ZLIB: "zlib"}


def compress_body(body: bytes, level: int = 5, *, compression: int = COMPRESSION_ZLIB) -> tuple[bytes, int]:
    """Compress a producer body; returns (stored bytes, SYSFLAG bits to OR in: bit 0 + type bits)."""
    if compression == COMPRESSION_ZLIB:
        data = zlib.compress(body, level)
    elif compression == COMPRESSION_LZ4:
        import lz4.frame

        data = lz4.frame.compress(body, compression_level=level)
    elif compression == COMPRESSION_ZSTD:
        import zstandard

        data = zstandard.ZstdCompressor(level=level).compress(body)
    else:
        raise OptionError("compression", "must be COMPRESSION_ZLIB, COMPRESSION_LZ4 or COMPRESSION_ZSTD", compression)
    return data, FLAG_COMPRESSED | (compression << 8)


def decompress_body(body: bytes, sys_flag: int, *, path: object = None, offset: int | None = None) -> bytes:
    """Body as the producer sent it: undo compression named by SYSFLAG bits 8-10 (0 means zlib)."""
    if not sys_flag & FLAG_COMPRESSED:
        return body
    kind = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    name = _COMPRESSION_NAMES.get(kind)
    if name is None:
        raise CorruptStoreError(f"unknown compression type {kind} in SYSFLAG 0x{sys_flag:X}", path=path, offset=offset)
    try:
        if name == "zlib":
            return zlib.decompress(body)
        if name == "lz4":
            import lz4.frame

            return lz4.frame.decompress(body)
        import zstandard

        # decompressobj copes with frames that do not record their content size.
        dobj = zstandard.ZstdDecompressor().decompressobj()
        data = dobj.decompress(body)
        if not dobj.eof:
            raise ValueError("truncated zstd frame")
        return data
    except Exception as exc:  # zlib.error, lz4's RuntimeError, ZstdError ... all mean "bad bytes"
        raise CorruptStoreError(f"cannot decompress {name} body ({len(body)} bytes): {exc}",
                                path=path, offset=offset) from exc


# --- records ----------------------------------------------------------------------------------
def record_size(body_len: int, topic_len: int, props_len: int, *, born_v6: bool = False, store_v6: bool = False,
                v2: bool = False) -> int:
    """TOTALSIZE of a record from its variable lengths (the spec 1.2 length formula)."""
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + (20 if born_v6 else 8) + 8 + (20 if store_v6 else 8) + 4 + 8
            + 4 + body_len + (2 if v2 else 1) + topic_len + 2 + props_len)


@lru_cache(maxsize=4096)
def _topic_part(topic: str, v2: bool) -> bytes | None:
    """Length prefix + UTF-8 topic, or None when too long for the version's length field."""
    try:
        raw = topic.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise OptionError("topic", f"not encodable as UTF-8: {exc}") from exc
    if len(raw) > (MAX_PROPERTIES_LENGTH if v2 else MAX_TOPIC_LENGTH_V1):
        return None
    return (_H.pack(len(raw)) if v2 else _B.pack(len(raw))) + raw


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

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & TRANSACTION_MASK

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
        topic_part = _topic_part(topic, v2)
        if topic_part is None and not v2:  # short in chars but long in UTF-8 bytes
            v2, topic_part = True, _topic_part(topic, True)
        magic = MAGIC_V2 if v2 else MAGIC_V1
    elif magic in (MAGIC_V1, MAGIC_V2):
        topic_part = _topic_part(topic, magic == MAGIC_V2)
    else:
        raise OptionError("magic", "must be MAGIC_V1, MAGIC_V2 or None", magic)
    if topic_part is None:
        limit = MAX_PROPERTIES_LENGTH if magic == MAGIC_V2 else MAX_TOPIC_LENGTH_V1
        raise OptionError("topic", f"longer than {limit} UTF-8 bytes allowed by this magic", topic)
    props = properties if isinstance(properties, (bytes, bytearray)) else encode_properties(properties)
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise OptionError("properties", f"encoded length {len(props)} exceeds {MAX_PROPERTIES_LENGTH}")
    born_ip = _pack_ip(born_host[0])
    store_ip = _pack_ip(store_host[0])
    if not (0 <= born_host[1] <= 0xFFFF and 0 <= store_host[1] <= 0xFFFF):
        raise OptionError("port", "must be in [0, 65535]", (born_host[1], store_host[1]))
    born_v6 = len(born_ip) == 16
    store_v6 = len(store_ip) == 16
    sys_flag = (sys_flag & ~(FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6)) | (FLAG_BORNHOST_V6 if born_v6 else 0) \
        | (FLAG_STOREHOST_V6 if store_v6 else 0)
    fixed = _FIXED[born_v6, store_v6]
    total = fixed.size + len(body) + len(topic_part) + 2 + len(props)
    try:
        head = fixed.pack(total, magic, crc32(body) & _CRC_MASK, queue_id, flag, queue_offset, physical_offset,
                          sys_flag, born_timestamp, born_ip, born_host[1], store_timestamp, store_ip, store_host[1],
                          reconsume_times, prepared_transaction_offset, len(body))
    except struct.error as exc:
        raise OptionError("record", f"a field is out of range for its int32/int64 slot: {exc}") from exc
    return b"".join((head, body, topic_part, _H.pack(len(props)), props))


def encode_blank(max_blank: int) -> bytes:
    """The 8-byte end-of-file record: TOTALSIZE = bytes left in the file, BLANK magic."""
    if not END_FILE_MIN_BLANK_LENGTH <= max_blank < 2**31:
        raise OptionError("max_blank", f"must be in [{END_FILE_MIN_BLANK_LENGTH}, 2^31)", max_blank)
    return _II.pack(max_blank, BLANK_MAGIC)


def _as_bytes_view(buf: object) -> memoryview:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)  # type: ignore[arg-type]
    return mv if mv.format in ("B", "b", "c") and mv.ndim == 1 else mv.cast("B")


def decode_record(buf: object, pos: int = 0, *, check_crc: bool = True, path: object = None,
                  base_offset: int = 0) -> MessageRecord | None:
    """Decode the record starting at ``buf[pos]``; None for a BLANK (end-of-file) record.

    ``buf`` is anything with the buffer protocol (bytes, mmap, memoryview, uint8 ndarray). Every
    inconsistency raises CorruptStoreError(path=path, offset=base_offset + pos) saying what is wrong.
    """
    mv = _as_bytes_view(buf)
    where = base_offset + pos

    def corrupt(message: str) -> CorruptStoreError:
        return CorruptStoreError(message, path=path, offset=where)

    avail = mv.nbytes - pos
    if pos < 0 or avail < 8:
        raise corrupt(f"truncated record: {max(avail, 0)} bytes left, TOTALSIZE and MAGICCODE need 8")
    total_size, magic = _II.unpack_from(mv, pos)
    if magic == BLANK_MAGIC:
        return None
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise corrupt(f"bad MAGICCODE 0x{magic & 0xFFFFFFFF:08X} (not a message or blank record)")
    v2 = magic == MAGIC_V2
    if total_size < record_size(0, 0, 0, v2=v2):
        raise corrupt(f"TOTALSIZE {total_size} is smaller than the smallest possible record")
    if total_size > avail:
        raise corrupt(f"truncated record: TOTALSIZE {total_size} but only {avail} bytes remain")
    end = pos + total_size
    (_, _, body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
     born_timestamp) = _HEAD.unpack_from(mv, pos)
    mid = _MID[bool(sys_flag & FLAG_BORNHOST_V6), bool(sys_flag & FLAG_STOREHOST_V6)]
    p = pos + _HEAD.size + mid.size
    if p + (2 if v2 else 1) + 2 > end:
        raise corrupt(f"TOTALSIZE {total_size} is too small for the hosts of SYSFLAG 0x{sys_flag:X}")
    (born_ip, born_port, store_timestamp, store_ip, store_port, reconsume_times, prepared_transaction_offset,
     body_len) = mid.unpack_from(mv, pos + _HEAD.size)
    if not (0 <= born_port <= 0xFFFF and 0 <= store_port <= 0xFFFF):
        raise corrupt(f"port out of range (born {born_port}, store {store_port})")
    if body_len < 0 or p + body_len + (2 if v2 else 1) + 2 > end:
        raise corrupt(f"BODY length {body_len} does not fit in a record of TOTALSIZE {total_size}")
    body = mv[p:p + body_len].tobytes()
    p += body_len
    if check_crc and body_len > 0:
        crc = crc32(body) & _CRC_MASK
        if crc != body_crc:
            raise corrupt(f"BODYCRC mismatch: stored {body_crc}, computed {crc}")
    if v2:
        (topic_len,) = _H.unpack_from(mv, p)
        p += 2
    else:
        (topic_len,) = _B.unpack_from(mv, p)
        p += 1
    if topic_len < 0 or p + topic_len + 2 > end:
        raise corrupt(f"TOPIC length {topic_len} does not fit in a record of TOTALSIZE {total_size}")
    topic = decode_java_utf8(mv[p:p + topic_len])   # MessageDecoder.decode: new String(topic, UTF_8)
    p += topic_len
    (props_len,) = _H.unpack_from(mv, p)
    p += 2
    if props_len < 0:
        raise corrupt(f"negative PROPERTIES length {props_len}")
    if p + props_len != end:
        raise corrupt(f"length formula gives {p + props_len - pos} but TOTALSIZE is {total_size}")
    properties = decode_properties(mv[p:end]) if props_len else {}
    return MessageRecord(
        total_size, magic, body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_timestamp,
        _unpack_host(born_ip, born_port), store_timestamp, _unpack_host(store_ip, store_port), reconsume_times,
        prepared_transaction_offset, body, topic, properties)


# --- consume-queue units ----------------------------------------------------------------------
def encode_cq_unit(commit_log_offset: int, size: int, tags_code: int) -> bytes:
    """One 20-byte CQ unit: commitLogOffset int64, size int32, tagsCode int64."""
    return _CQ.pack(commit_log_offset, size, tags_code)


def decode_cq_units(buf: object, *, path: object = None, offset: int = 0) -> np.ndarray:
    """Zero-copy CQ_DTYPE view over whole 20-byte units (``offset`` only labels errors)."""
    mv = _as_bytes_view(buf)
    if mv.nbytes % CQ_UNIT_SIZE:
        raise CorruptStoreError(f"{mv.nbytes} bytes is not a whole number of {CQ_UNIT_SIZE}-byte CQ units",
                                path=path, offset=offset)
    return np.frombuffer(mv, dtype=CQ_DTYPE)


# --- client batch wire format (spec 1.8) -------------------------------------------------------
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
        parts += (body, _H.pack(len(props)), props)
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
        (props_len,) = _H.unpack_from(mv, p + body_len)
        if props_len < 0 or _BATCH_HEAD.size + body_len + 2 + props_len != total:
            raise CorruptStoreError(f"batch entry lengths (body {body_len}, properties {props_len}) disagree "
                                    f"with TOTALSIZE {total}", path=path, offset=where)
        props_at = p + body_len + 2
        properties = decode_properties(mv[props_at:props_at + props_len])
        out.append(BatchEntry(flag, body, properties))
        pos += total
    return out
