"""rocketstream/remoting/loop.py: uvloop's loop where it is installed, asyncio's with ROCKETSTREAM_UVLOOP=0, and a
round trip over our transport on whichever loop is chosen."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from rocketstream.remoting import RemotingCommand, RemotingServer, connect
from rocketstream.remoting import loop as rloop

HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None


@pytest.mark.parametrize("setting", ["0", "false", "OFF", "no"])
def test_the_setting_turns_uvloop_off(monkeypatch, setting):
    monkeypatch.setenv(rloop.UVLOOP_ENV, setting)
    assert rloop.loop_kind() == "asyncio"
    loop = rloop.new_event_loop()
    try:
        assert isinstance(loop, asyncio.BaseEventLoop) and not type(loop).__module__.startswith("uvloop")
    finally:
        loop.close()


@pytest.mark.skipif(not HAVE_UVLOOP, reason="uvloop is not installed")
def test_uvloop_is_the_default_where_installed(monkeypatch):
    monkeypatch.delenv(rloop.UVLOOP_ENV, raising=False)
    assert rloop.loop_kind() == "uvloop"

    async def kind() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert rloop.run(kind()).startswith("uvloop")


@pytest.mark.parametrize("setting", ["1", "0"])
def test_a_request_round_trip_on_the_chosen_loop(monkeypatch, setting):
    """The frame transport (a BufferedProtocol; uvloop's transports are not asyncio.Transport subclasses), a
    large body received apart, and a request from another thread (call_soon_threadsafe)."""
    monkeypatch.setenv(rloop.UVLOOP_ENV, setting)
    big = bytes(range(256)) * 4096   # 1 MiB: FrameProtocol's large-frame path

    async def main() -> None:
        server = RemotingServer("127.0.0.1", 0, idle_timeout_s=None)
        server.register(1000, lambda ch, req: req.response(0, "pong", body=req.body))
        await server.start()
        try:
            ch = await connect(server.address)
            small = await ch.invoke(RemotingCommand.request(1000, {"k": "v"}, b"abc"))
            assert (small.code, small.remark, small.body) == (0, "pong", b"abc")
            large = await ch.invoke(RemotingCommand.request(1000, None, big))
            assert large.body == big
            loop = asyncio.get_running_loop()
            done: asyncio.Future[RemotingCommand] = loop.create_future()

            def from_thread() -> None:
                async def call() -> None:
                    done.set_result(await ch.invoke(RemotingCommand.request(1000, None, b"t")))
                loop.call_soon_threadsafe(loop.create_task, call())

            await asyncio.to_thread(from_thread)
            assert (await asyncio.wait_for(done, 30)).body == b"t"
            await ch.aclose()
        finally:
            await server.stop()

    rloop.run(main())
