"""An asyncio remoting server (``NettyRemotingServer``): processors registered by request code, a
default processor for the rest, one :class:`Channel` per connection, idle connections closed after
``serverChannelMaxIdleTimeSeconds`` (120 s), channel-close listeners (``ChannelEventListener``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from rocketstream.remoting.channel import Channel, RequestHandler, unsupported
from rocketstream.remoting.command import MAX_FRAME_LENGTH, RemotingCommand
from rocketstream.remoting.transport import FrameProtocol

__all__ = ["RemotingServer", "RequestHook", "parse_listen"]

log = logging.getLogger("rocketstream.remoting")

SERVER_CHANNEL_MAX_IDLE_S = 120.0   # NettyServerConfig.serverChannelMaxIdleTimeSeconds


def parse_listen(text: str, default_port: int) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``HOST`` -> (host, port); the host defaults to 127.0.0.1."""
    from rocketstream.errors import OptionError

    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(default_port)
    host = host.strip("[]") or "127.0.0.1"
    try:
        value = int(port)
    except ValueError:
        raise OptionError("--listen", "expected HOST:PORT", text) from None
    if not 0 <= value <= 65535:
        raise OptionError("--listen", "port must be 0..65535", text)
    return host, value


RequestHook = Callable[[Channel, RemotingCommand], "RemotingCommand | None"]


class RemotingServer:
    """``server.register(code, fn)``; ``fn(channel, request)`` returns a response, ``None`` (no
    answer) or an awaitable of one. Unregistered codes go to ``default_processor`` or get code 3.

    ``request_hooks`` run before any processor (``RPCHook.doBeforeRequest``, e.g. ACL): a hook that
    returns a response answers the request with it and the processor is not called."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, name: str = "remoting",
                 max_frame: int = MAX_FRAME_LENGTH, idle_timeout_s: float | None = SERVER_CHANNEL_MAX_IDLE_S) -> None:
        self.host = host
        self.port = port
        self.name = name
        self.max_frame = max_frame
        self.idle_timeout_s = idle_timeout_s
        self.processors: dict[int, RequestHandler] = {}
        self.default_processor: RequestHandler | None = None
        self.channels: set[Channel] = set()
        self.close_listeners: list[Callable[[Channel], None]] = []
        self.request_hooks: list[RequestHook] = []
        self._server: asyncio.base_events.Server | None = None
        self._idle_task: asyncio.Task | None = None

    def register(self, code: int, processor: RequestHandler) -> None:
        self.processors[code] = processor

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> RemotingServer:
        self._server = await asyncio.get_running_loop().create_server(
            lambda: FrameProtocol(self.max_frame, on_connected=self._accept), self.host, self.port,
            reuse_address=True)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        if self.idle_timeout_s:
            self._idle_task = asyncio.get_running_loop().create_task(self._close_idle(self.idle_timeout_s))
        return self

    def _dispatch(self, channel: Channel, request: RemotingCommand):
        for hook in self.request_hooks:
            refused = hook(channel, request)
            if refused is not None:
                return refused
        processor = self.processors.get(request.code, self.default_processor)
        if processor is None:
            return unsupported(request)
        return processor(channel, request)

    def _accept(self, transport: asyncio.Transport, protocol: FrameProtocol) -> None:
        channel = Channel(transport, protocol, handler=self._dispatch, max_frame=self.max_frame,
                          on_close=self._channel_closed, name=self.name)
        self.channels.add(channel)
        channel.start()

    def _channel_closed(self, channel: Channel) -> None:
        self.channels.discard(channel)
        for listener in self.close_listeners:
            listener(channel)

    async def _close_idle(self, idle_timeout_s: float) -> None:
        period = max(0.05, min(idle_timeout_s / 4, 10.0))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for channel in list(self.channels):
                if now - channel.last_activity > idle_timeout_s:
                    log.info("%s: closing idle connection %s", self.name, channel.addr)
                    channel.close(f"idle for more than {idle_timeout_s:g} s")

    async def stop(self) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_task
        if self._server is not None:
            self._server.close()
        for channel in list(self.channels):
            await channel.aclose()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
