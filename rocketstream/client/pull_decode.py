"""Fast decoding of pull bodies into :class:`MessageExt` (``PullAPIWrapper.processPullResult`` for the consumers).

A pull body is the stored records back to back (``MessageDecoder.decodes``). :func:`decode_pull_body` decodes a
whole body at once:

1. one walk over the records: of the fixed 88-byte header of each (TOTALSIZE .. BODY length, two IPv4 hosts)
   the fields the walk needs (size, magic, queue offset, sysFlag, ports, body length) read by one
   ``struct.unpack_from`` of ``codec.HEADER_V4`` with the other fields skipped (the struct form of the one header
   layout, ``constants.HEADER_V4_FIELDS``, whose numpy form the batch decoder gathers with; a C call per record,
   measured faster than gathering the headers with numpy first for the 32-record bodies consumers pull),
   TOTALSIZE giving the next record's start; the header's 88 bytes are kept for the other fields;
2. per record only what depends on the body length: the TOPIC and PROPERTIES lengths, the checks of
   ``record.check_record`` (sizes, ports, the length formula), the body slice (decompressed when the sysFlag
   says so), the topic and hosts from small caches (a pull body holds one topic and a few hosts);
3. a :class:`MessageExt` whose properties stay encoded until first used (:attr:`MessageExt.properties`) and
   whose header fields the walk skipped are unpacked from the kept header bytes on the first read of any of
   them: consumers that only look at bodies and offsets never decode them.

Records with an IPv6 born or store host (sysFlag bits 0x10 / 0x20) have a longer header; they are decoded
one by one with :func:`rocketstream.codec.decode_record`. A body that fails any check is handed to the
per-record decoder (:func:`rocketstream.client.api.decode_messages`), which raises BodyError naming the byte
position and the problem; so both decoders give equal messages and the same errors
(tests/client/test_pull_decode.py).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection

from rocketstream.client.api import decode_messages, process_pull_result
from rocketstream.client.common import (
    LAZY_FIELDS,
    PROPERTY_MAX_OFFSET,
    PROPERTY_MIN_OFFSET,
    MessageExt,
    PullResult,
    PullStatus,
)
from rocketstream.client.subscription import SubscriptionData
from rocketstream.codec import (
    FLAG_BORNHOST_V6,
    FLAG_COMPRESSED,
    FLAG_STOREHOST_V6,
    HEADER_V4,
    HEADER_V4_FIELDS,
    INT32_PAIR,
    MAGIC_V1,
    MAGIC_V2,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED,
    HostAddress,
    decode_java_utf8,
    decompress_body,
)
from rocketstream.errors import BodyError, CorruptStoreError

__all__ = ["decode_pull_body", "process_pull_result_fast"]

_HEAD_SIZE = HEADER_V4.size   # 88
_V6_BITS = FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6
_MIN_V4_RECORD = _HEAD_SIZE + 1 + 2   # empty body, topic and properties (V1 topic length byte)
# The header fields the walk reads (the record's size and kind, the checks of check_record, the queue offset
# every consumer reads): HEADER_V4 with the others skipped as pad bytes, whose values a lazy MessageExt gets
# from its header bytes when first read (_filler). One C call per record as HEADER_V4's, a 7-tuple not a 17-tuple.
_WALKED = ("total_size", "magic", "queue_offset", "sys_flag", "born_port", "store_port", "body_len")
_HEADER_WALK = struct.Struct(">" + "".join(code if name in _WALKED else f"{struct.calcsize(code)}x"
                                           for name, code in HEADER_V4_FIELDS))
assert _HEADER_WALK.size == _HEAD_SIZE and [n for n, _ in HEADER_V4_FIELDS if n in _WALKED] == list(_WALKED)


class _Fallback(Exception):
    """Something the fast path does not decode: the per-record decoder says what (or decodes it)."""


def _v4_host(ip: int, port: int, cache: dict[tuple[int, int], HostAddress]) -> HostAddress:
    key = (ip, port)
    h = cache.get(key)
    if h is None:
        h = cache[key] = HostAddress(f"{ip >> 24}.{(ip >> 16) & 255}.{(ip >> 8) & 255}.{ip & 255}", port)
    return h


def decode_pull_body(body: bytes, *, broker_name: str = "", addr: str | None = None,
                     put: tuple[tuple[str, str], ...] | None = None,
                     prepared: list[MessageExt] | None = None) -> list[MessageExt]:
    """Every record of a pull body as MessageExt (bodies decompressed, properties decoded on first use).
    ``put``: properties every message gets, as by :meth:`MessageExt.put_properties` (shared, not decoded).
    ``prepared``: the transaction half messages (sysFlag TRANSACTION_PREPARED_TYPE) are appended to it."""
    body = bytes(body)
    try:
        return _decode(body, broker_name, addr, put, prepared)
    except _Fallback:
        msgs = decode_messages(body, broker_name=broker_name, addr=addr)
        if put:
            for m in msgs:
                m.put_properties(put)
        if prepared is not None:
            prepared += [m for m in msgs if m.sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED]
        return msgs


def _filler(broker_name: str) -> Callable[[bytes], tuple[object, ...]]:
    """The ``fill`` of the lazy MessageExt of one pull body (MessageExt's docstring): a record's
    :data:`LAZY_FIELDS` from its 88 ``HEADER_V4`` bytes (the hosts from a cache: a body holds a few)."""
    hosts: dict[tuple[int, int], HostAddress] = {}
    unpack = HEADER_V4.unpack

    def fill(head: bytes) -> tuple[object, ...]:
        (size, _magic, crc, qid, flag, _qoff, poff, sys_flag, bts, bip, bport, sts, sip, sport, rtimes, pto,
         _blen) = unpack(head)
        return (flag, qid, poff, sys_flag, bts, _v4_host(bip, bport, hosts), sts, _v4_host(sip, sport, hosts),
                rtimes, pto, crc, size, broker_name)
    return fill


assert LAZY_FIELDS == ("flag", "queue_id", "commit_log_offset", "sys_flag", "born_timestamp", "born_host",
                       "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset",
                       "body_crc", "store_size", "broker_name")   # the order _filler's fill answers in


def _decode(body: bytes, broker_name: str, addr: str | None,
            put: tuple[tuple[str, str], ...] | None = None,
            prepared: list[MessageExt] | None = None) -> list[MessageExt]:
    topics: dict[bytes, str] = {}
    out: list[MessageExt] = []
    append = out.append
    cls = MessageExt
    new = cls.__new__
    fill = _filler(broker_name)
    unpack = _HEADER_WALK.unpack_from
    last_traw = b""
    last_tl = -1
    topic = ""
    v1, v2, head, special = MAGIC_V1, MAGIC_V2, _HEAD_SIZE, _V6_BITS | FLAG_COMPRESSED
    start, n = 0, len(body)
    while start < n:
        if start + head > n:
            raise _Fallback   # a truncated record: the per-record decoder names the position
        size, magic, qoff, sys_flag, bport, sport, blen = unpack(body, start)
        end = start + size
        if (magic != v1 and magic != v2) or size < _MIN_V4_RECORD or end > n:
            raise _Fallback
        if sys_flag & special and sys_flag & _V6_BITS:
            m = _decode_one(body, start, broker_name, addr)
            if put:
                m.put_properties(put)
            append(m)
            if prepared is not None and sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED:
                prepared.append(m)
            start = end
            continue
        if (bport | sport) >> 16:   # a port outside 0..65535 (negative ones included)
            raise _Fallback
        bp = start + head
        tp = bp + blen   # the TOPIC length field
        if magic == v2:
            if blen < 0 or tp + 4 > end:
                raise _Fallback
            tl = (body[tp] << 8) | body[tp + 1]
            tp += 2
        else:
            if blen < 0 or tp + 3 > end:
                raise _Fallback
            tl = body[tp]
            tp += 1
        pp = tp + tl     # the PROPERTIES length field
        if tl >= 0x8000 or (tl >= 0x80 and magic == v1) or pp + 2 > end:
            raise _Fallback   # a negative Java length, or past the record
        pl = (body[pp] << 8) | body[pp + 1]
        if pp + 2 + pl != end or pl >= 0x8000:
            raise _Fallback
        data = body[bp:bp + blen]
        if sys_flag & special:   # compressed (IPv6 went above)
            try:
                data = decompress_body(data, sys_flag)
            except CorruptStoreError:
                raise _Fallback from None   # the per-record decoder raises BodyError naming the record
        if tl != last_tl or not body.startswith(last_traw, tp):
            last_traw = body[tp:pp]
            last_tl = tl
            known = topics.get(last_traw)
            if known is None:
                known = topics[last_traw] = decode_java_utf8(last_traw)
            topic = known
        # a lazy MessageExt (its docstring): the fields the consume path reads, the rest from h when first read
        m = new(cls)
        m.topic = topic
        m.body = data
        m.queue_offset = qoff
        m._raw_props = body[pp + 2:end]
        m._props = None
        m._pending = put
        m._src = (fill, body[start:bp])
        append(m)
        if prepared is not None and sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED:
            prepared.append(m)
        start = end
    return out


def _decode_one(body: bytes, start: int, broker_name: str, addr: str | None) -> MessageExt:
    """A record with an IPv6 host: the per-record decoder on that record alone."""
    size = INT32_PAIR.unpack_from(body, start)[0]
    try:
        (msg,) = decode_messages(body[start:start + size], broker_name=broker_name, addr=addr)
    except BodyError:
        raise _Fallback from None   # again on the whole body, for the error's byte position
    return msg


def process_pull_result_fast(result: PullResult, broker_name: str,
                             tags_filter: SubscriptionData | Collection[str] | None = None,
                             *, addr: str | None = None) -> list[MessageExt]:
    """``process_pull_result`` of :mod:`rocketstream.client.api` with :func:`decode_pull_body`. Without a tag
    filter (``*``, the usual subscription) MIN_OFFSET / MAX_OFFSET are put while decoding, in the one pass
    over the records; with one, api.process_pull_result filters the decoded messages by their TAGS."""
    if isinstance(tags_filter, SubscriptionData):
        tags: Collection[str] | None = None if tags_filter.sub_all else tags_filter.tags
    else:
        tags = tags_filter or None
    if tags is not None:
        return process_pull_result(result, broker_name, tags_filter, addr=addr, decode=decode_pull_body)
    if result.status is not PullStatus.FOUND or not result.body:
        result.messages = []
        result.body = None
        return result.messages
    offsets = ((PROPERTY_MIN_OFFSET, str(result.min_offset)), (PROPERTY_MAX_OFFSET, str(result.max_offset)))
    prepared: list[MessageExt] = []
    msgs = decode_pull_body(result.body, broker_name=broker_name, addr=addr, put=offsets, prepared=prepared)
    for m in prepared:   # PullAPIWrapper.processPullResult: a half message's transaction id is its UNIQ_KEY
        if PROPERTY_UNIQ_KEY in m.properties:
            m.properties.setdefault("__transactionId__", m.properties[PROPERTY_UNIQ_KEY])
    result.messages = msgs
    result.body = None
    return msgs
