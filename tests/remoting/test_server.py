"""The asyncio server and client: unknown codes, processor errors, bad frames, oneway, timeouts,
server -> client requests. Everything on 127.0.0.1, servers always stopped."""

from __future__ import annotations

import asyncio
import struct

import pytest

from rocketstream.errors import RemotingConnectError, RemotingTimeoutError
from rocketstream.remoting import RemotingCommand, RemotingServer, ResponseCode, SerializeType, connect


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


class Fixture:
    def __init__(self):
        self.oneway_seen = asyncio.Event()
        self.server = RemotingServer("127.0.0.1", 0, idle_timeout_s=None)
        self.server.register(1000, lambda ch, req: req.response(0, "pong", body=req.body))
        self.server.register(1001, self._boom)
        self.server.register(1002, self._oneway)
        self.server.register(1003, self._slow)
        self.server.register(1004, self._ask_client)

    @staticmethod
    def _boom(ch, req):
        raise ValueError("processor failed on purpose")

    def _oneway(self, ch, req):
        self.oneway_seen.set()
        return req.response(0)   # must not be sent for a oneway request

    @staticmethod
    async def _slow(ch, req):
        await asyncio.sleep(float(req.field("sleep")))
        return req.response(0)

    @staticmethod
    async def _ask_client(ch, req):
        answer = await ch.invoke(RemotingCommand.request(40, {"consumerGroup": "g"}), timeout=5)
        return req.response(0, f"client said {answer.code} {answer.remark}")


async def _with_server(body):
    fx = Fixture()
    await fx.server.start()
    try:
        return await body(fx, fx.server.address)
    finally:
        await fx.server.stop()


@pytest.mark.parametrize("stype", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_request_response_unknown_code_and_processor_error(stype):
    async def body(fx, addr):
        ch = await connect(addr)
        try:
            ok = await ch.invoke(RemotingCommand.request(1000, {"k": "v"}, b"payload", serialize_type=stype))
            assert (ok.code, ok.remark, ok.body, ok.serialize_type) == (0, "pong", b"payload", stype)
            unknown = await ch.invoke(RemotingCommand.request(4242, serialize_type=stype))
            assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert "4242" in unknown.remark and "not supported" in unknown.remark
            err = await ch.invoke(RemotingCommand.request(1001, serialize_type=stype))
            assert err.code == ResponseCode.SYSTEM_ERROR and "processor failed on purpose" in err.remark
            again = await ch.invoke(RemotingCommand.request(1000))   # the connection survived
            assert again.code == 0
        finally:
            await ch.aclose()
    run(_with_server(body))


def test_oneway_gets_no_response_and_timeouts_name_the_address():
    async def body(fx, addr):
        ch = await connect(addr)
        try:
            await ch.invoke_oneway(RemotingCommand.request(1002))
            await asyncio.wait_for(fx.oneway_seen.wait(), 5)
            with pytest.raises(RemotingTimeoutError, match=addr) as exc:
                await ch.invoke(RemotingCommand.request(1003, {"sleep": "1"}), timeout=0.2)
            assert exc.value.addr == addr and exc.value.code == 1003
            # the late answer to the timed-out request is dropped; the connection still works
            await asyncio.sleep(1.0)
            assert (await ch.invoke(RemotingCommand.request(1000))).code == 0
        finally:
            await ch.aclose()
    run(_with_server(body))


def test_server_to_client_request_through_the_callback():
    seen = []

    def on_request(ch, req):
        seen.append(req.code)
        return req.response(0, "rebalanced")

    async def body(fx, addr):
        ch = await connect(addr, on_request=on_request)
        no_cb = await connect(addr)
        try:
            resp = await ch.invoke(RemotingCommand.request(1004))
            assert resp.remark == "client said 0 rebalanced" and seen == [40]
            resp = await no_cb.invoke(RemotingCommand.request(1004))   # a client without callback answers 3
            assert resp.remark.startswith("client said 3")
        finally:
            await ch.aclose()
            await no_cb.aclose()
    run(_with_server(body))


async def _raw(addr: str, payload: bytes) -> bytes:
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(payload)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5)   # until the server closes the connection
    writer.close()
    return data


@pytest.mark.parametrize("payload", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",                                  # garbage: length 0x47455420
    struct.pack(">i", 16 * 1024 * 1024),                                   # oversized frame (limit counts the prefix)
    struct.pack(">i", -5),                                                 # negative length
    struct.pack(">iI", 8, (7 << 24) | 0) + b"\0" * 4,                      # unknown serialize type
    struct.pack(">iI", 10, 6) + b"{nope}",                                  # bad JSON header
    struct.pack(">iI", 8, (1 << 24) | 100) + b"\0" * 4,                    # header longer than the frame
], ids=["garbage", "oversized", "negative", "type-byte", "bad-json", "header-length"])
def test_bad_frames_close_only_that_connection(payload):
    async def body(fx, addr):
        good = await connect(addr)
        try:
            assert await _raw(addr, payload) == b""   # closed without an answer, as NettyDecoder does
            assert (await good.invoke(RemotingCommand.request(1000))).code == 0
            for _ in range(50):
                if len(fx.server.channels) == 1:
                    break
                await asyncio.sleep(0.02)
            assert len(fx.server.channels) == 1
        finally:
            await good.aclose()
    run(_with_server(body))


def test_connect_errors_name_the_address():
    async def body():
        with pytest.raises(RemotingConnectError, match="127.0.0.1:1"):
            await connect("127.0.0.1:1")
    run(body())


def test_pending_requests_fail_when_the_server_goes_away():
    async def body():
        server = await RemotingServer("127.0.0.1", 0, idle_timeout_s=None).start()
        server.register(1, lambda ch, req: None)   # never answers
        ch = await connect(server.address)
        task = asyncio.create_task(ch.invoke(RemotingCommand.request(1), timeout=10))
        await asyncio.sleep(0.2)
        await server.stop()
        with pytest.raises(RemotingConnectError, match=server.address):
            await task
        await ch.aclose()
    run(body())


def test_idle_connections_are_closed():
    async def body():
        server = await RemotingServer("127.0.0.1", 0, idle_timeout_s=0.3).start()
        try:
            ch = await connect(server.address)
            await asyncio.wait_for(ch.wait_closed(), 5)
            assert not server.channels
        finally:
            await server.stop()
    run(body())


def test_many_idle_and_half_sent_connections_do_not_block_others():
    async def body(fx, addr):
        host, port = addr.rsplit(":", 1)
        idle = [await asyncio.open_connection(host, int(port)) for _ in range(200)]
        for _, w in idle[:100]:   # half a frame each, then nothing (slow clients)
            w.write(struct.pack(">i", 1000) + b"\x00\x00")
        ch = await connect(addr)
        try:
            for _ in range(20):
                assert (await ch.invoke(RemotingCommand.request(1000), timeout=5)).code == 0
        finally:
            await ch.aclose()
            for _, w in idle:
                w.close()
    run(_with_server(body))


def test_large_bodies_both_ways_and_a_body_buffer_only_for_the_caller_that_asked():
    """A 3 MiB body through the server's and the client's frame receive (the large-frame path: the body lands
    in its own buffer); the server's processor and an invoke without body_buffer see bytes, an invoke with it
    sees the buffer it was received into; a pull-answer-like response built from body_parts (views) arrives intact."""
    big = bytes(range(256)) * (3 * 4096)
    seen = []

    def echo_parts(ch, req):
        seen.append(type(req.body))
        resp = req.response(0, "parts")
        view = memoryview(req.body)
        resp.body_parts = [view[:1000], view[1000:]]
        return resp

    async def body(fx, addr):
        fx.server.register(1010, echo_parts)
        ch = await connect(addr)
        try:
            plain = await ch.invoke(RemotingCommand.request(1000, body=big), timeout=10)
            assert type(plain.body) is bytes and plain.body == big and plain.body_buffer is None
            kept = await ch.invoke(RemotingCommand.request(1000, body=big), timeout=10, body_buffer=True)
            assert kept.body is None and kept.body_buffer is not None and kept.body_buffer.tobytes() == big
            small = await ch.invoke(RemotingCommand.request(1000, body=b"tiny"), timeout=10, body_buffer=True)
            assert small.body == b"tiny" and small.body_buffer is None   # small frames: bytes as always
            parts = await ch.invoke(RemotingCommand.request(1010, body=big), timeout=10)
            assert parts.remark == "parts" and parts.body == big
            # several large answers in flight at once come back whole and matched
            many = await asyncio.gather(*(ch.invoke(RemotingCommand.request(1000, body=big[k:]), timeout=20)
                                          for k in range(4)))
            assert [m.body for m in many] == [big[k:] for k in range(4)]
        finally:
            await ch.aclose()
        assert seen == [bytes]

    run(_with_server(body))


async def _wait_for(what, predicate, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("how", ["reset", "close", "bad frame"])
def test_a_closed_connection_is_freed_without_a_garbage_collection(how):
    """Issue 19: the error of a reset connection kept a traceback through the transport back to the protocol
    (and its 16 MiB buffer): a cycle only a full GC freed. With the collector off, the channel, its protocol
    and the partial frame's buffer must go as soon as the connection is gone."""
    import gc
    import socket
    import weakref

    async def body():
        server = await RemotingServer("127.0.0.1", 0, idle_timeout_s=None).start()
        host, port = server.address.rsplit(":", 1)
        try:
            sock = socket.create_connection((host, int(port)))
            # a large frame's start: its header, then part of a 3 MiB body
            sock.sendall(struct.pack(">iI", 3 << 20, 2) + b"{}" + b"x" * 100_000)
            await _wait_for("the server channel", lambda: server.channels)
            (channel,) = server.channels
            await _wait_for("the large frame's buffer", lambda: channel._frames._big_got == 100_000)
            refs = [weakref.ref(channel), weakref.ref(channel._frames), weakref.ref(channel._frames._big)]
            channel = None
            if how == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
            elif how == "close":
                sock.close()
            else:
                sock.sendall(b"x" * (3 << 20) + struct.pack(">i", -1))   # the frame whole, then a bad length
            await _wait_for("the channel to close", lambda: not server.channels)
            await _wait_for("the channel to be freed", lambda: all(r() is None for r in refs))
            if how == "bad frame":
                sock.close()
        finally:
            await server.stop()

    gc.collect()
    gc.disable()
    try:
        run(body())
    finally:
        gc.enable()


def test_a_peer_that_does_not_read_is_cut_off_past_the_write_budget(caplog):
    """Answers written without waiting (as woken long-polling pulls are) to a peer that reads nothing: the
    connection is closed, with a logged reason, once more than max_write_buffer bytes wait; writing waits
    above the high water mark until the low one."""
    import socket

    from rocketstream.remoting.command import encode_frame
    from rocketstream.remoting.server import ServerLimits

    async def body():
        limits = ServerLimits(write_buffer_high_water_mark=128 << 10, write_buffer_low_water_mark=16 << 10,
                              max_write_buffer=8 << 20)
        server = RemotingServer("127.0.0.1", 0, idle_timeout_s=None, limits=limits)

        def flood(ch, req):
            for _ in range(int(req.field("n"))):
                ch.send_nowait(req.response(0, body=b"z" * (1 << 20)))
            return None

        server.register(1005, flood)
        await server.start()
        host, port = server.address.rsplit(":", 1)
        try:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)   # before connect: a small window
            sock.connect((host, int(port)))
            await _wait_for("the server channel", lambda: server.channels)
            (channel,) = server.channels
            assert channel._transport.get_write_buffer_limits() == (16 << 10, 128 << 10)
            sock.sendall(encode_frame(RemotingCommand.request(1005, {"n": 6})))   # 6 MiB: within the budget
            await _wait_for("the answers to wait", lambda: channel._transport.get_write_buffer_size() > 1 << 20)
            assert not channel.closed and channel._frames._write_paused
            sock.sendall(encode_frame(RemotingCommand.request(1005, {"n": 16})))   # 22 MiB: past it
            await _wait_for("the cut-off", lambda: channel.closed)
            assert "does not read" in channel.close_reason and "8388608-byte limit" in channel.close_reason
            await _wait_for("the transport to be gone", lambda: channel._transport.is_closing()
                            and channel._transport.get_write_buffer_size() == 0)
            assert not server.channels
            sock.close()
        finally:
            await server.stop()

    with caplog.at_level("WARNING", logger="rocketstream.remoting"):
        run(body())
    assert any("serverChannelMaxWriteBufferSize" in r.getMessage() for r in caplog.records)


def test_connection_limits_from_broker_conf(tmp_path):
    """broker.conf's NettyServerConfig water marks and our connection bounds reach the broker's server; 0 for
    the water marks keeps Netty's 64 KiB / 32 KiB (4.9.8's default); bad values name the property."""
    from rocketstream.broker.config import BrokerConfig
    from rocketstream.errors import StoreConfigError
    from rocketstream.remoting.server import ServerLimits

    assert BrokerConfig().server_limits() == ServerLimits()
    assert ServerLimits().water_marks == (64 << 10, 32 << 10)
    conf = tmp_path / "broker.conf"
    conf.write_text("writeBufferHighWaterMark=1048576\nwriteBufferLowWaterMark=262144\n"
                    "serverChannelMaxWriteBufferSize=100000000\nserverChannelMaxReceiveAheadSize=0\n"
                    "serverMaxReceiveAheadSize=123\n")
    limits = BrokerConfig.from_conf(conf).server_limits()
    assert limits == ServerLimits(write_buffer_high_water_mark=1 << 20, write_buffer_low_water_mark=256 << 10,
                                  max_write_buffer=100_000_000, max_receive_ahead=0, max_receive_ahead_total=123)
    assert limits.water_marks == (1 << 20, 256 << 10)
    assert ServerLimits(write_buffer_high_water_mark=0, write_buffer_low_water_mark=0).water_marks == \
        (64 << 10, 32 << 10)
    conf.write_text("writeBufferHighWaterMark=1000\nwriteBufferLowWaterMark=2000\n")
    with pytest.raises(StoreConfigError, match="writeBufferLowWaterMark.*broker.conf"):
        BrokerConfig.from_conf(conf)
    conf.write_text("serverChannelMaxWriteBufferSize=-1\n")
    with pytest.raises(StoreConfigError, match="serverChannelMaxWriteBufferSize"):
        BrokerConfig.from_conf(conf)


def test_requests_written_from_other_threads_keep_their_order_when_the_socket_is_full():
    """Channel.write_from_thread (a producer's send from the caller's thread): frames written by threads and by
    the loop never interleave — a frame the socket takes only in part is finished by the loop before anything
    else is written, and writes from threads wait (fall back to start_request) meanwhile. Every echo answer is
    its request's body."""
    import threading

    from rocketstream.remoting.channel import ResponseWaiter, next_opaque
    from rocketstream.remoting.command import encode_frame

    async def body(fx, addr):
        ch = await connect(addr)
        loop = asyncio.get_running_loop()
        outcomes = {True: 0, False: 0}
        lock = threading.Lock()

        def call(payload: bytes) -> RemotingCommand:
            req = RemotingCommand.request(1000, {"n": str(len(payload))}, payload)
            req.opaque = next_opaque()
            waiter = ResponseWaiter()
            direct = ch.write_from_thread(req.opaque, encode_frame(req), waiter)
            with lock:
                outcomes[direct] += 1
            if not direct:
                loop.call_soon_threadsafe(ch.start_request, req.opaque, encode_frame(req), waiter)
            resp = waiter.wait(20)
            assert resp is not None, "no answer"
            return resp

        def worker(k: int) -> None:
            for i in range(30):
                size = 12 << 20 if (k, i) in ((0, 0), (1, 10), (2, 20)) else 100 + 37 * i
                payload = bytes([k * 31 + i & 0xFF]) * size
                resp = call(payload)
                assert resp.code == 0 and resp.body == payload, (k, i)

        try:
            threads = [loop.run_in_executor(None, worker, k) for k in range(4)]
            # the loop writes too meanwhile
            for i in range(20):
                resp = await ch.invoke(RemotingCommand.request(1000, body=b"loop%d" % i), timeout=20)
                assert resp.body == b"loop%d" % i
            await asyncio.gather(*threads)
            assert outcomes[True] > 0 and outcomes[False] > 0, outcomes
        finally:
            await ch.aclose()
        assert not ch.write_from_thread(next_opaque(), b"x", ResponseWaiter())   # closed: nothing written
    run(_with_server(body))
