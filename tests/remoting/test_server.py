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
