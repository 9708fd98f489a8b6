"""Fast decoding of pull bodies into :class:`MessageExt` (``PullAPIWrapper.processPullResult`` for the consumers).

A pull body is the stored records back to back. :func:`decode_pull_body` finds the record starts with one
TOTALSIZE read each, checks the magic codes, then reads every header field of all records at once with the
vectorized codec (:func:`rocketstream.codec.vectorized.decode_headers`, numpy gathers) and builds the
messages from plain lists: hosts are formatted once per distinct address, properties decoded with Java's UTF-8
rules. For a handful of records the per-record decoder of :mod:`rocketstream.client.api` is used instead
(the numpy set-up costs more than it saves below :data:`VECTORIZE_MIN_RECORDS`). Records that do not decode
raise BodyError naming the byte position, as the per-record decoder does.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Collection

from rocketstream.client.api import decode_messages
from rocketstream.client.common import (
    MessageExt,
    PullResult,
)
from rocketstream.client.subscription import SubscriptionData
from rocketstream.codec import (
    FLAG_COMPRESSED,
    MAGIC_V1,
    MAGIC_V2,
    HostAddress,
    decode_java_utf8,
    decompress_body,
)
from rocketstream.errors import BodyError, CorruptStoreError

__all__ = ["decode_pull_body", "process_pull_result_fast", "VECTORIZE_MIN_RECORDS"]

VECTORIZE_MIN_RECORDS = 32   # measured break-even ~24 records (tests/client/test_pull_decode.py)
_HEAD = struct.Struct(">ii")


def _record_starts(body: bytes, addr: str | None) -> list[int]:
    starts: list[int] = []
    pos, n = 0, len(body)
    unpack = _HEAD.unpack_from
    while pos < n:
        if pos + 8 > n:
            raise BodyError(f"pull body: truncated record header at byte {pos}", addr=addr)
        size, magic = unpack(body, pos)
        if magic != MAGIC_V1 and magic != MAGIC_V2:
            raise BodyError(f"pull body: record at byte {pos} has magic code {magic:#x}", addr=addr)
        if size <= 8 or pos + size > n:
            raise BodyError(f"pull body: record at byte {pos} has size {size} beyond the body ({n} bytes)",
                            addr=addr)
        starts.append(pos)
        pos += size
    return starts


def _host(raw: bytes, cache: dict[bytes, HostAddress]) -> HostAddress:
    h = cache.get(raw)
    if h is None:
        if len(raw) == 8:
            h = HostAddress(socket.inet_ntop(socket.AF_INET, raw[:4]), int.from_bytes(raw[4:], "big", signed=True))
        else:
            h = HostAddress(socket.inet_ntop(socket.AF_INET6, raw[:16]), int.from_bytes(raw[16:], "big", signed=True))
        cache[raw] = h
    return h


def _properties(raw: bytes) -> dict[str, str]:
    """``string2messageProperties`` (same rules as codec.decode_properties)."""
    out: dict[str, str] = {}
    for segment in decode_java_utf8(raw).split("\x02"):
        name, _, value = segment.partition("\x01")
        if name and value:
            out[name] = value
    return out


def decode_pull_body(body: bytes, *, broker_name: str = "", addr: str | None = None) -> list[MessageExt]:
    """Every record of a pull body as MessageExt (bodies decompressed)."""
    body = bytes(body)
    starts = _record_starts(body, addr)
    if len(starts) < VECTORIZE_MIN_RECORDS:
        return decode_messages(body, broker_name=broker_name, addr=addr)
    import numpy as np

    from rocketstream.codec.vectorized import decode_headers

    h = decode_headers(body, np.asarray(starts, dtype=np.int64))
    if not bool(np.all(h["in_bounds"])):
        return decode_messages(body, broker_name=broker_name, addr=addr)   # names the bad record
    hosts: dict[bytes, HostAddress] = {}
    topics: dict[bytes, str] = {}
    out: list[MessageExt] = []
    append = out.append
    host = _host
    props = _properties
    bhw = [20 if v else 8 for v in h["born_v6"].tolist()]
    shw = [20 if v else 8 for v in h["store_v6"].tolist()]
    for (start, qid, flag, qoff, poff, sys_flag, bts, sts, rtimes, pto, crc, size, bp, bl, tp, tl, pp, pl, bhp, bw,
         shp, sw) in zip(starts, *(h[k].tolist() for k in (
            "queue_id", "flag", "queue_offset", "physical_offset", "sys_flag", "born_timestamp", "store_timestamp",
            "reconsume_times", "prepared_transaction_offset", "body_crc", "total_size", "body_pos", "body_len",
            "topic_pos", "topic_len", "props_pos", "props_len", "born_host_pos")), bhw,
            h["store_host_pos"].tolist(), shw, strict=True):
        data = body[bp:bp + bl]
        if sys_flag & FLAG_COMPRESSED:
            try:
                data = decompress_body(data, sys_flag)
            except CorruptStoreError as exc:
                raise BodyError(f"pull body: record at byte {start}: {exc}", addr=addr) from exc
        traw = body[tp:tp + tl]
        topic = topics.get(traw)
        if topic is None:
            topic = topics[traw] = decode_java_utf8(traw)
        append(MessageExt(topic, data, props(body[pp:pp + pl]) if pl else {}, flag, qid, qoff, poff, sys_flag,
                          bts, host(body[bhp:bhp + bw], hosts), sts, host(body[shp:shp + sw], hosts), rtimes, pto,
                          crc, size, broker_name))
    return out


def process_pull_result_fast(result: PullResult, broker_name: str,
                             tags_filter: SubscriptionData | Collection[str] | None = None,
                             *, addr: str | None = None) -> list[MessageExt]:
    """``process_pull_result`` of :mod:`rocketstream.client.api` with :func:`decode_pull_body`."""
    from rocketstream.client.api import process_pull_result

    return process_pull_result(result, broker_name, tags_filter, addr=addr, decode=decode_pull_body)
