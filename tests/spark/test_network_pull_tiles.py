"""The network read's pulls of one queue range (spark/network/puller.py ``_RangePuller``) against a fake broker
with RocketMQ's pull semantics (a count and a byte limit per pull, PULL_NOT_FOUND with a later nextBeginOffset
over messages that are gone): every offset of the range comes exactly once and in order, nothing past the
range end, tiles of the learned batch overlap, a short answer makes the next round learn the batch again,
and with a tag filter pulls stay sequential. No sockets, no Spark."""

from __future__ import annotations

import asyncio
import struct

import numpy as np
import pyarrow as pa
import pytest

from rocketstream.client.common import PullResult, PullStatus
from rocketstream.errors import DataLossError, RemotingConnectError, RemotingTimeoutError
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


def _drain(broker, start: int, end: int, *, tags=None, fail_on_data_loss=True, retries: int | None = None) -> bytes:
    """The bytes a ``_RangePuller`` of queue T/0 hands out for [start, end) from ``broker``, chunk by chunk."""
    extra = {} if retries is None else {"retries": retries}
    target = nv.PullTarget(broker, "127.0.0.1:1", "b", "g", **extra)
    puller = nv._RangePuller(target, "T", 0, start, end, tags, fail_on_data_loss)

    async def drain() -> list[bytes]:
        got: list[bytes] = []
        while not puller.done:
            got += await puller.next_chunk()
        return got

    return b"".join(asyncio.run(drain()))


def _read(broker: FakeBroker, start: int, end: int, *, tags=None, fail_on_data_loss=True) -> list[int]:
    data = _drain(broker, start, end, tags=tags, fail_on_data_loss=fail_on_data_loss)
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
    tiles = TilesBroker(1000, cap=32)   # through pull_tiles, one pull per call
    assert _read(tiles, 0, 1000, tags=["a"]) == list(range(1000))
    assert tiles.rounds == [1] * 32 and [o for o, _ in tiles.calls] == list(range(0, 1000, 32))


def test_timestamp_search_reads_the_store_time_after_an_ipv6_born_host():
    """``search_offset`` checks the message the broker found by its STORETIMESTAMP, which follows BORNHOST:
    12 bytes further when the born host is IPv6 (MessageDecoder.decode). Read at the IPv4 position, an IPv6
    record's timestamp is the host's bytes, and the search answers the wrong offset."""
    from rocketstream import codec
    from rocketstream.client.common import PullResult, PullStatus
    from rocketstream.spark.network.view import NetworkBroker, NetworkBrokerView

    def record(born_host: tuple[str, int], store_ms: int) -> bytes:
        return codec.encode_record(topic="T", queue_id=0, body=b"x", properties={}, queue_offset=7,
                                   physical_offset=0, sys_flag=0, born_timestamp=1, born_host=born_host,
                                   store_timestamp=store_ms, store_host=("10.0.0.1", 10911))

    class Api:
        body = b""

        async def search_offset(self, addr, topic, queue_id, timestamp_ms, timeout):
            return 7

        async def max_offset(self, addr, topic, queue_id, timeout):
            return 8

        async def pull(self, addr, **kwargs):
            return PullResult(PullStatus.FOUND, 8, 0, 8, body=self.body)

    view = NetworkBrokerView(NetworkBroker("b", "127.0.0.1:1", "127.0.0.1:2", "g", (("T", (0,)),)))
    view.api = Api()
    for host in (("10.1.2.3", 5), ("fe80::1:2", 40000)):
        view.api.body = record(host, 1_000)
        # the found message is stored at 1,000: at or after 1,000 it is the answer, after 1,001 the next one
        assert view.search_offset("T", 0, 1_000) == 7, host
        assert view.search_offset("T", 0, 1_001) == 8, host


class TilesBroker(FakeBroker):
    """A FakeBroker with MQClientAPI's ``pull_tiles``: the tiles of a round in one call; the first ``fail``
    tiles asked of it are answered as unanswered (RemotingTimeoutError), as a lost answer would be."""

    def __init__(self, n: int, *, fail: int = 0, no_connection: int = 0, **kw) -> None:
        super().__init__(n, **kw)
        self.fail = fail
        self.no_connection = no_connection   # calls that cannot connect (MQClientAPI.channel raises)
        self.rounds: list[int] = []

    async def pull_tiles(self, addr, *, group, topic, queue_id, tiles, sys_flag, subscription, timeout,
                         body_buffer=False):
        if self.no_connection:
            self.no_connection -= 1
            raise RemotingConnectError("cannot connect", addr=addr)
        self.rounds.append(len(tiles))
        out: list = []
        for o, n in tiles:
            if self.fail:
                self.fail -= 1
                out.append(RemotingTimeoutError("no answer", addr=addr, code=11, timeout_s=timeout))
            else:
                out.append(await self.pull(addr, group=group, topic=topic, queue_id=queue_id, offset=o, max_nums=n,
                                           sys_flag=sys_flag, subscription=subscription, timeout=timeout,
                                           body_buffer=body_buffer))
        return out


def _read_retrying(broker: FakeBroker, start: int, end: int, retries: int) -> list[int]:
    data = _drain(broker, start, end, retries=retries)
    return [_REC.unpack_from(data, pos)[0] for pos in range(0, len(data), 16)]


def test_tiles_go_in_one_call_and_unanswered_ones_are_sent_again():
    broker = TilesBroker(3000, cap=32)
    assert _read_retrying(broker, 0, 3000, 0) == list(range(3000))
    assert max(broker.rounds) > 1 and len(broker.calls) == -(-(3000 - 32) // 32) + 1
    broker = TilesBroker(3000, cap=32, fail=3)   # three tiles of the first round unanswered, each sent again
    assert _read_retrying(broker, 0, 3000, 1) == list(range(3000))
    assert len(broker.calls) == -(-(3000 - 32) // 32) + 1
    with pytest.raises(RemotingTimeoutError):     # no pullRetries: the task fails (Spark retries it)
        _read_retrying(TilesBroker(3000, cap=32, fail=1), 0, 3000, 0)
    broker = TilesBroker(3000, cap=32, no_connection=1)   # a round that could not connect: each tile again
    assert _read_retrying(broker, 0, 3000, 1) == list(range(3000))
    assert len(broker.calls) == -(-(3000 - 32) // 32) + 1
    with pytest.raises(RemotingConnectError):
        _read_retrying(TilesBroker(3000, cap=32, no_connection=1), 0, 3000, 0)


def test_a_chunk_is_one_decode_unit():
    """A chunk ends before a pull that would take it past BATCH_BYTES: pack_pull_bodies makes it one unit,
    not a full one and one of a single pull (whose decode costs ~14 us a message at 32 messages)."""
    from rocketstream.codec.arrow_records import BATCH_BYTES, pack_pull_bodies

    broker = FakeBroker(20000, cap=32, sizes=[1100] * 20000)
    puller = nv._RangePuller(nv.PullTarget(broker, "127.0.0.1:1", "b", "g"), "T", 0, 0, 20000, None, True)

    async def drain() -> list[list[bytes]]:
        chunks = []
        while not puller.done:
            chunks.append(await puller.next_chunk())
        return chunks

    chunks = asyncio.run(drain())
    assert len(chunks) > 3
    for chunk in chunks:
        assert len(list(pack_pull_bodies(chunk))) == 1
    assert all(sum(map(len, c)) > BATCH_BYTES - 2 * 32 * 1100 for c in chunks[:-1])


def test_small_last_units_go_with_the_next_chunk(monkeypatch):
    """Pull sizes that vary (a chunk's estimate falls short): the small last unit of a chunk is decoded with
    the next chunk's bodies, so every unit but a range's last is over half of BATCH_BYTES; rows in order."""
    import concurrent.futures

    from rocketstream.codec.arrow_records import ALONE_BYTES

    rng = np.random.default_rng(7)
    sizes = [int(s) for s in rng.integers(200, 2400, 40000)]
    sizes[:32] = [200] * 32   # the first pull (the estimate of a pull's bytes) is small
    broker = FakeBroker(40000, cap=32, sizes=sizes)
    units: list[tuple[int, int]] = []
    seen: list[int] = []

    class Decoder:
        def __init__(self, *args) -> None:
            pass

        def decode(self, body, topic, queue_id, start, end):
            data, pos = bytes(body), 0
            while pos < len(data):
                seen.append(_REC.unpack_from(data, pos)[0])
                pos += sizes[seen[-1]]
            units.append((queue_id, len(data)))
            return pa.record_batch([pa.array([0])], names=["x"])

    class Client:
        def submit(self, coro):
            fut: concurrent.futures.Future = concurrent.futures.Future()
            fut.set_result(asyncio.run(coro))
            return fut

    monkeypatch.setattr(nv, "PullBodyDecoder", Decoder)
    monkeypatch.setattr(nv, "project_schema", lambda columns: None)
    target = nv.PullTarget(broker, "127.0.0.1:1", "b", "g")
    list(nv.pull_ranges(Client(), target, [("T", 0, 0, 20000), ("T", 1, 20000, 40000)], columns=["x"], tags=None,
                        check_crc=False, fail_on_data_loss=True))
    assert seen == list(range(40000))
    for q in (0, 1):
        mine = [n for queue_id, n in units if queue_id == q]
        assert len(mine) > 3 and all(n >= ALONE_BYTES for n in mine[:-1]), mine
