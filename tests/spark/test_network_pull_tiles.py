"""The network read's pulls of one queue range (spark/network/puller.py ``_RangePuller``) against a fake broker
with RocketMQ's pull semantics (a count and a byte limit per pull, PULL_NOT_FOUND with a later nextBeginOffset
over messages that are gone): every offset of the range comes exactly once and in order, nothing past the
range end, tiles of the learned batch overlap, a short answer makes the next round learn the batch again,
and with a tag filter pulls stay sequential. No sockets, no Spark."""

from __future__ import annotations

import asyncio
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstream.client.common import PullResult, PullStatus
from rocketstream.errors import DataLossError
from rocketstream.spark.network import puller as nv

_REC = struct.Struct(">q")


class FakeBroker:
    """Queue offsets 0..n-1; message i's "record" is 8 bytes of i padded to sizes[i]."""

    def __init__(self, n: int, *, cap: int = 32, max_bytes: int = 1 << 30, sizes=None, gone=range(0)) -> None:
        self.n, self.cap, self.max_bytes = n, cap, max_bytes
        self.sizes = sizes or [16] * n
        self.gone = gone
        self.calls: list[tuple[int, int]] = []
        self.in_flight = self.max_in_flight = 0

    async def pull(self, addr, *, group, topic, queue_id, offset, max_nums, sys_flag, subscription, timeout,
                   body_buffer=False):
        assert body_buffer   # the read asks for large bodies to stay in their receive buffers
        self.calls.append((offset, max_nums))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0)
        self.in_flight -= 1
        if offset >= self.n:
            return PullResult(PullStatus.NO_NEW_MSG, offset, 0, self.n)
        if offset in self.gone:   # OFFSET_FOUND_NULL: the broker points past what is gone
            return PullResult(PullStatus.NO_NEW_MSG, self.gone.stop, 0, self.n)
        out, used, i = [], 0, offset
        while i < self.n and i not in self.gone:
            # DefaultMessageStore.isTheBatchFull, before each unit
            if out and (len(out) >= max_nums or len(out) >= self.cap or used + self.sizes[i] > self.max_bytes):
                break
            out.append(_REC.pack(i).ljust(self.sizes[i], b"\0"))
            used += self.sizes[i]
            i += 1
        body = b"".join(out)
        if len(self.calls) % 2:   # half the answers as a large one comes: left in its receive buffer
            return PullResult(PullStatus.FOUND, i, 0, self.n, 0, None,
                              body_buffer=np.frombuffer(body, dtype=np.uint8).copy())
        return PullResult(PullStatus.FOUND, i, 0, self.n, 0, body)


def _read(broker: FakeBroker, start: int, end: int, *, tags=None, fail_on_data_loss=True) -> list[int]:
    target = nv.PullTarget(broker, "127.0.0.1:1", "b", "g")
    puller = nv._RangePuller(target, "T", 0, start, end, tags, fail_on_data_loss)

    async def drain() -> list[bytes]:
        got: list[bytes] = []
        while not puller.done:
            got += await puller.next_chunk()
        return got

    data = b"".join(asyncio.run(drain()))
    offsets, pos = [], 0
    while pos < len(data):
        i = _REC.unpack_from(data, pos)[0]
        offsets.append(i)
        pos += broker.sizes[i]
    return offsets


@pytest.mark.parametrize("cap,start,end", [(32, 0, 1000), (32, 5, 999), (1024, 0, 5000), (7, 3, 4), (1, 0, 40)])
def test_every_offset_once_in_order_and_tiles_overlap(cap, start, end):
    broker = FakeBroker(6000, cap=cap)
    assert _read(broker, start, end) == list(range(start, end))
    assert all(o + n <= max(end, o + 1) for o, n in broker.calls[1:]), "no pull asks past the range end"
    if end - start > 3 * cap:
        assert broker.max_in_flight > 1
        # each offset asked for once: no tile is thrown away when the broker answers every tile in full
        assert len(broker.calls) == -(-(end - start - cap) // cap) + 1


def test_short_answers_by_bytes_relearn_the_batch_and_skip_nothing():
    sizes = [16 if i % 50 else 400 for i in range(3000)]   # a big message now and then hits the byte limit
    broker = FakeBroker(3000, cap=32, max_bytes=600, sizes=sizes)
    assert _read(broker, 10, 2990) == list(range(10, 2990))


def test_messages_gone_in_the_middle():
    broker = FakeBroker(2000, cap=32, gone=range(500, 700))
    with pytest.raises(DataLossError, match=r"messages \[500, 700\)"):
        _read(broker, 0, 2000)
    broker = FakeBroker(2000, cap=32, gone=range(500, 700))
    assert _read(broker, 0, 2000, fail_on_data_loss=False) == [*range(500), *range(700, 2000)]


def test_a_tag_filter_pulls_sequentially():
    broker = FakeBroker(1000, cap=32)
    assert _read(broker, 0, 1000, tags=["a"]) == list(range(1000))
    assert broker.max_in_flight == 1
    assert [o for o, _ in broker.calls] == list(range(0, 1000, 32))


def test_record_starts_of_a_pull_body_and_bad_bodies():
    from rocketstream import codec
    from rocketstream.errors import BodyError

    rec = bytearray(100)
    struct.pack_into(">ii", rec, 0, 100, codec.MAGIC_V2)
    body = bytes(rec) * 3
    assert nv.record_starts(body).tolist() == [0, 100, 200] and nv.record_starts(b"").tolist() == []
    for bad, what in ((body[:-1], "byte 200 has size 100 beyond the body"), (body + b"\0\0", "byte 300 is truncated"),
                      (body[:100] + struct.pack(">i", 5) + body[104:], "byte 100 has size 5"),
                      (body[:104] + struct.pack(">i", 1) + body[108:], "byte 100 has magic code 0x1")):
        with pytest.raises(BodyError, match=what):
            nv.record_starts(bad)


def _walk_starts(body: bytes) -> list[int]:
    """The plain walk record_starts must agree with: each start from the previous TOTALSIZE."""
    out, pos = [], 0
    while pos + 4 <= len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        if size <= 8:
            break
        out.append(pos)
        pos += size
    return out if pos == len(body) else None


def _records(sizes: list[int]) -> bytes:
    from rocketstream import codec
    out = bytearray()
    for size in sizes:
        rec = bytearray(size)
        struct.pack_into(">ii", rec, 0, size, codec.MAGIC_V1)
        out += rec
    return bytes(out)


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(9, 80), st.integers(1, 40)), min_size=0, max_size=12),
       damage=st.one_of(st.none(), st.tuples(st.integers(0, 10_000), st.integers(-3, 200))))
def test_record_starts_agrees_with_the_plain_walk_or_refuses_the_body(runs, damage):
    """Runs of records of one size mixed with sizes that change every record; a size field damaged anywhere
    makes both the plain walk and record_starts refuse the body (or agree on it)."""
    from rocketstream.errors import BodyError

    sizes = [size for size, count in runs for _ in range(count)]
    sizes += [9 + (i * 7) % 50 for i in range(len(sizes) // 3)]   # a varying tail
    body = bytearray(_records(sizes))
    if damage is not None and len(body) >= 4:
        struct.pack_into(">i", body, min(damage[0] % len(body), len(body) - 4), damage[1])
    body = bytes(body)
    expected = _walk_starts(body)
    if expected is not None:
        magic_ok = all(struct.unpack_from(">i", body, p + 4)[0] in (codec_magics()) for p in expected
                       if p + 8 <= len(body)) and all(p + 8 <= len(body) for p in expected)
    if expected is None or not magic_ok:
        with pytest.raises(BodyError):
            nv.record_starts(body)
    else:
        assert nv.record_starts(body).tolist() == expected


def codec_magics() -> tuple[int, int]:
    from rocketstream import codec
    return codec.MAGIC_V1, codec.MAGIC_V2


def test_record_starts_of_many_records():
    body = _records([300] * 5000 + [301] + [300] * 7)
    assert nv.record_starts(body).tolist() == [300 * i for i in range(5001)] + [300 * 5001 + 1 + 300 * i
                                                                                for i in range(7)]


def test_pull_bodies_are_packed_into_decode_units_in_order():
    half = nv._ALONE_BYTES
    small, big = b"s" * 1000, b"B" * half
    bodies = [small, small, big, small, b"x" * (nv.BATCH_BYTES - 500), small]
    units = list(nv._pack(bodies))
    assert b"".join(units) == b"".join(bodies)
    assert units[0] == small * 2 and units[1] is big and units[2] == small and len(units) == 5
    assert all(len(u) <= nv.BATCH_BYTES or u is big for u in units)
    assert list(nv._pack([])) == [] and list(nv._pack([small])) == [small]
