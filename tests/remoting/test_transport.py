"""FrameProtocol: frames cut from whatever pieces the socket delivers, large frames received in place,
bad lengths, end of stream in the middle of a frame, and reading paused while the reader lags."""

from __future__ import annotations

import asyncio
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstream.errors import FrameError
from rocketstream.remoting import transport as tr
from rocketstream.remoting.transport import FrameProtocol


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.paused = False
        self.pauses = 0

    def pause_reading(self) -> None:
        assert not self.paused
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        assert self.paused
        self.paused = False

    def get_extra_info(self, name, default=None):
        return default

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def framed(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def feed(proto: FrameProtocol, data: bytes, cuts: list[int]) -> None:
    """What the selector transport does: get_buffer, recv_into it (at most ``cut`` bytes), buffer_updated."""
    pos, i = 0, 0
    while pos < len(data):
        buf = proto.get_buffer(-1)
        want = cuts[i % len(cuts)] if cuts else len(data)
        i += 1
        n = min(len(buf), want, len(data) - pos)
        assert n > 0, "get_buffer returned an empty buffer"
        buf[:n] = data[pos:pos + n]
        proto.buffer_updated(n)
        pos += n


def whole(frame) -> bytes:
    """A delivered frame as its bytes: a large one comes as (the part before its body, the body)."""
    if isinstance(frame, tuple):
        head, body = frame
        assert type(head) is bytes and isinstance(body, np.ndarray) and body.dtype == np.uint8 and len(body) > 0
        return head + body.tobytes()
    return bytes(frame)


async def drain_frames(proto: FrameProtocol) -> list[bytes]:
    out = []
    while proto._frames:
        out.append(whole(await proto.next_frame()))
    return out


def new_protocol(max_frame: int = 16 << 20) -> tuple[FrameProtocol, FakeTransport]:
    proto = FrameProtocol(max_frame, addr="127.0.0.1:1")
    t = FakeTransport()
    proto.connection_made(t)
    return proto, t


sizes = st.one_of(st.integers(4, 300), st.integers(tr._RECV_BUFFER // 2 - 8, tr._RECV_BUFFER // 2 + 8),
                  st.integers(tr._RECV_BUFFER - 16, 3 * tr._RECV_BUFFER))


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(sizes, min_size=1, max_size=8),
       cuts=st.lists(st.one_of(st.integers(1, 7), st.integers(1, 70_000), st.integers(200_000, 1 << 20)),
                     min_size=1, max_size=6),
       header_lengths=st.lists(st.one_of(st.integers(0, 300), st.integers(0, 0xFFFFFF)), min_size=1, max_size=4),
       seed=st.integers(0, 255))
def test_frames_come_out_whole_and_in_order_whatever_the_pieces(lengths, cuts, header_lengths, seed):
    """Frames of every size in any pieces; a large frame whose header length field (the second 4 bytes) leaves
    a body is split into its header part and a body buffer, one that doesn't is delivered whole."""
    payloads = [bytes([(seed + i + k) % 251 for k in range(min(n, 64))]) * (n // 64 + 1) for i, n in
                enumerate(lengths)]
    payloads = [struct.pack(">I", header_lengths[i % len(header_lengths)]) + p[4:n] if n >= 4 else p[:n]
                for i, (p, n) in enumerate(zip(payloads, lengths, strict=True))]

    async def run():
        proto, _ = new_protocol()
        got = []
        data = framed(payloads)
        # the reader takes frames as they come (so reading is never paused here)
        pos, i = 0, 0
        while pos < len(data):
            step = max(cuts[i % len(cuts)], len(data) // 300)   # byte-sized pieces, but not a million of them
            i += 1
            feed(proto, data[pos:pos + step], [])
            pos += step
            got += await drain_frames(proto)
        return got, proto

    got, proto = asyncio.run(run())
    assert got == payloads
    assert proto.partial() == 0


def test_a_large_frame_body_is_received_into_its_own_buffer_without_copies():
    from rocketstream.remoting import RemotingCommand, decode_frame, encode_frame

    async def run():
        proto, _ = new_protocol()
        body = bytes(range(256)) * 4096   # 1 MiB > half the receive buffer
        cmd = RemotingCommand(code=0, opaque=7, flag=1, remark="FOUND", ext_fields={"nextBeginOffset": "9"},
                              body=body)
        data = encode_frame(cmd) + framed([b"tail"])
        feed(proto, data[:6], [])            # the length, but not yet the header length: waits
        assert proto._big is None
        feed(proto, data[6:100], [])         # the header is not all there yet: still waits
        assert proto._big is None
        head_end = 8 + (struct.unpack_from(">I", data, 4)[0] & 0xFFFFFF)
        feed(proto, data[100:head_end + 10], [])
        assert proto._big is not None and len(proto._big) == len(body)
        big = proto._big
        feed(proto, data[head_end + 10:], [65536])
        head, got = await proto.next_frame()
        assert got is big                     # the very buffer the socket wrote into
        assert got.tobytes() == body and head == data[4:head_end]
        decoded = decode_frame(head, body_apart=got)
        assert decoded.body is None and decoded.body_buffer is got
        assert (decoded.opaque, decoded.remark, decoded.ext_fields) == (7, "FOUND", {"nextBeginOffset": "9"})
        decoded.take_body_buffer()
        assert decoded.body == body and type(decoded.body) is bytes and decoded.body_buffer is None
        assert await proto.next_frame() == b"tail"
    asyncio.run(run())


def test_a_large_frame_without_a_body_or_with_a_huge_header_length_comes_whole():
    async def run():
        proto, _ = new_protocol()
        no_body = struct.pack(">I", 200_000 - 4) + b"h" * (200_000 - 4)        # header to the end
        huge = struct.pack(">I", 0xFFFFFF) + b"x" * 300_000                     # header length past the frame
        feed(proto, framed([no_body, huge]), [4096])
        for expected in (no_body, huge):
            frame = await proto.next_frame()
            assert type(frame) is memoryview and frame == expected
    asyncio.run(run())


@pytest.mark.parametrize("length", [0, 3, -1, (16 << 20) - 3])
def test_a_bad_length_is_a_frame_error_after_the_frames_before_it(length):
    async def run():
        proto, t = new_protocol()
        feed(proto, framed([b"okay"]) + struct.pack(">i", length) + b"x" * 8, [])
        assert await proto.next_frame() == b"okay"
        with pytest.raises(FrameError) as err:
            await proto.next_frame()
        assert "127.0.0.1:1" in str(err.value)
        assert t.paused   # nothing more is read from a connection being closed
        feed(proto, b"more bytes are dropped", [])
        with pytest.raises(FrameError):
            await proto.next_frame()
    asyncio.run(run())


@pytest.mark.parametrize("sent", [b"", b"\x00\x00", framed([b"abcdef"])[:7], framed([b"x" * 200_000])[:150_000],
                                  framed([struct.pack(">I", 10) + b"x" * 200_000])[:150_000],
                                  framed([struct.pack(">I", 10) + b"x" * 200_000])[:10]])
@pytest.mark.parametrize("lost", [False, True])
def test_end_of_stream_in_a_frame_is_an_incomplete_read_with_the_bytes_received(sent, lost):
    async def run():
        proto, _ = new_protocol()
        if sent:
            feed(proto, sent, [])
        proto.eof_received()
        if lost:   # the transport closed too: the unfinished frame's buffers are gone, its size is still told
            proto.connection_lost(None)
            assert proto._big is None
        with pytest.raises(asyncio.IncompleteReadError) as err:
            await proto.next_frame()
        assert len(err.value.partial) == len(sent)
    asyncio.run(run())


def test_a_connection_error_is_raised_after_the_frames_received():
    async def run():
        proto, _ = new_protocol()
        feed(proto, framed([b"one!", b"two!"]), [])
        proto.connection_lost(ConnectionResetError("reset by peer"))
        assert await proto.next_frame() == b"one!"
        assert await proto.next_frame() == b"two!"
        with pytest.raises(ConnectionResetError):
            await proto.next_frame()
        with pytest.raises(ConnectionResetError):
            await proto.drain()
    asyncio.run(run())


def test_reading_pauses_while_the_reader_lags_and_resumes_when_it_catches_up():
    async def run():
        proto, t = new_protocol()
        n = tr._PAUSE_FRAMES + 10
        feed(proto, framed([str(i).encode().ljust(4) for i in range(n)]), [])
        assert t.paused and t.pauses == 1
        got = [await proto.next_frame() for _ in range(n - tr._RESUME_FRAMES - 1)]
        assert t.paused
        got.append(await proto.next_frame())
        assert not t.paused
        got += [await proto.next_frame() for _ in range(tr._RESUME_FRAMES)]
        assert [int(g) for g in got] == list(range(n))
    asyncio.run(run())


def test_a_waiting_reader_is_woken_by_the_frame():
    async def run():
        proto, _ = new_protocol()
        task = asyncio.ensure_future(proto.next_frame())
        await asyncio.sleep(0)
        assert not task.done()
        feed(proto, framed([b"late"]), [1])
        assert await asyncio.wait_for(task, 1) == b"late"
    asyncio.run(run())


@pytest.mark.parametrize("split", [True, False])
def test_beyond_the_receive_ahead_budget_a_large_frame_buffer_grows_as_its_bytes_arrive(split):
    """Issue 19: a frame announcing 16 MiB made a 16 MiB buffer at once. Past the budgets the buffer is at
    most twice what arrived (or _GROW_FROM), and the frame still comes out whole and in place."""
    async def run():
        shared = tr.ReceiveAhead(6 << 20)
        proto = FrameProtocol(16 << 20, addr="127.0.0.1:1", ahead_limit=4 << 20, shared=shared)
        proto.connection_made(FakeTransport())
        other = FrameProtocol(16 << 20, addr="127.0.0.1:2", ahead_limit=4 << 20, shared=shared)
        other.connection_made(FakeTransport())
        length = (16 << 20) - 4
        head = struct.pack(">I", 2) + b"{}" if split else struct.pack(">I", 0xFFFFFF)
        payload = head + bytes(range(256)) * ((length - len(head)) // 256) + b"\x07" * ((length - len(head)) % 256)
        data = struct.pack(">i", length) + payload
        feed(proto, data[:8 + 2 * split], [])
        assert proto._big is not None and len(proto._big) == tr._GROW_FROM   # not 16 MiB
        pos = 8 + 2 * split
        while pos < len(data):
            n = min(100_000, len(data) - pos)
            feed(proto, data[pos:pos + n], [])
            pos += n
            if proto._big is not None:
                assert len(proto._big) <= max(tr._GROW_FROM, 2 * proto._big_got), (len(proto._big), proto._big_got)
        frame = await proto.next_frame()
        assert whole(frame) == payload
        assert shared.used == 0
        # within the budgets a frame's buffer is made whole at once (the fast path), and counted until filled
        small = struct.pack(">I", 2) + b"{}" + b"s" * (3 << 20)
        feed(other, framed([small])[:20], [])
        assert len(other._big) == (3 << 20) and shared.used == 3 << 20
        feed(proto, framed([small])[:20], [])   # 3 + 3 MiB fit the shared 6 MiB
        assert len(proto._big) == (3 << 20) and shared.used == 6 << 20
        third = FrameProtocol(16 << 20, addr="127.0.0.1:3", ahead_limit=4 << 20, shared=shared)
        third.connection_made(FakeTransport())
        feed(third, framed([small])[:20], [])   # the shared budget is spent: this one grows
        assert len(third._big) == tr._GROW_FROM and shared.used == 6 << 20
        other.connection_lost(ConnectionResetError("reset"))   # a lost connection gives its share back
        assert shared.used == 3 << 20 and other._big is None
        feed(proto, framed([small])[20:], [])
        assert whole(await proto.next_frame()) == small and shared.used == 0
    asyncio.run(run())


def test_reading_pauses_while_queued_frames_hold_many_bytes():
    async def run():
        proto, t = new_protocol()
        big = struct.pack(">I", 2) + b"{}" + b"b" * (3 << 20)
        feed(proto, framed([big] * 3), [])
        assert t.paused and len(proto._frames) == 3   # 9 MiB waiting: more than _PAUSE_BYTES
        await proto.next_frame()
        assert t.paused                                # 6 MiB still waiting
        await proto.next_frame()
        await proto.next_frame()
        assert not t.paused
    asyncio.run(run())


def test_the_error_kept_after_a_reset_has_no_traceback():
    async def run():
        proto, _ = new_protocol()
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError as exc:
            proto.connection_lost(exc)
        assert proto._error.__traceback__ is None and proto._error.__context__ is None
        with pytest.raises(ConnectionResetError, match="reset by peer") as err:
            await proto.next_frame()
        assert err.value is not proto._error
    asyncio.run(run())


def test_on_frame_takes_frames_only_while_none_wait_in_the_queue():
    """FrameProtocol.on_frame (Channel.take_responses): a frame it takes is not queued; one it gives back is,
    and while any frame waits in the queue later frames are queued without being offered (a response does not
    overtake a request the reader has not handled yet)."""
    async def go():
        proto, _ = new_protocol()
        offered: list[bytes] = []

        def on_frame(frame: bytes) -> bytes | None:
            offered.append(frame)
            return None if frame.startswith(b"resp") else frame

        proto.on_frame = on_frame
        feed(proto, framed([b"resp1", b"req1", b"resp2", b"req2"]), [])
        assert offered == [b"resp1", b"req1"]
        assert await drain_frames(proto) == [b"req1", b"resp2", b"req2"]
        feed(proto, framed([b"resp3", b"req3"]), [2, 5])   # in pieces: offered as each frame is whole
        assert offered[-2:] == [b"resp3", b"req3"] and await drain_frames(proto) == [b"req3"]
    asyncio.run(go())
