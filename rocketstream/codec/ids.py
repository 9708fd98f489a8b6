"""Hosts, offset message ids and client UNIQ_KEYs (``MessageDecoder.createMessageId``,
``MessageClientIDSetter.createUniqID``)."""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import threading
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from rocketstream.codec.constants import INT32
from rocketstream.errors import OptionError

_IQ = struct.Struct(">iq")


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
        return len(pack_ip(self.host)) == 16

    @classmethod
    def parse(cls, text: str) -> HostAddress:
        """"1.2.3.4:10911" or "[::1]:10911" to a HostAddress."""
        host, sep, port = text.strip().rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise OptionError("host", "expected 'ip:port' or '[ipv6]:port'", text)
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        pack_ip(host)
        return cls(host, int(port))


@lru_cache(maxsize=1024)
def pack_ip(host: str) -> bytes:
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
def unpack_host(ip: bytes, port: int) -> HostAddress:
    family = socket.AF_INET if len(ip) == 4 else socket.AF_INET6
    return HostAddress(socket.inet_ntop(family, ip), port)


# --- message ids ------------------------------------------------------------------------------
@lru_cache(maxsize=256)
def _msg_id_prefix(host: str, port: int) -> str:
    return (pack_ip(host) + INT32.pack(port)).hex().upper()


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
    return unpack_host(raw[:-12], port), physical_offset


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
HEX_PAIRS = np.frombuffer(b"".join(b"%02X" % i for i in range(256)), dtype=np.uint8).reshape(256, 2)


def new_uniq_key_block(count: int) -> np.ndarray:
    """``count`` fresh UNIQ_KEYs as ASCII in a (count, 32) uint8 array, row i = the i-th key; the
    same keys new_uniq_keys would give, hex-formatted with numpy (the columnar put writes the rows
    straight into its records)."""
    prefix, first = _reserve_uniq_suffixes(count)
    out = np.empty((count, 32), dtype=np.uint8)
    out[:, :20] = np.frombuffer(prefix.encode("ascii"), dtype=np.uint8)
    suffix = (np.arange(first, first + count, dtype=np.int64) & _UNIQ_SUFFIX_MASK).astype(">i8")
    low6 = suffix.view(np.uint8).reshape(count, 8)[:, 2:]   # 48-bit time || counter, big-endian
    out[:, 20:] = HEX_PAIRS.take(low6, axis=0).reshape(count, 12)
    return out

