"""An asyncio remoting server (``NettyRemotingServer``): processors registered by request code, a
default processor for the rest, one :class:`Channel` per connection, idle connections closed after
``serverChannelMaxIdleTimeSeconds`` (120 s), channel-close listeners (``ChannelEventListener``).

What one connection may hold is bounded (:class:`ServerLimits`): the write buffer's water marks
(``NettyServerConfig.writeBufferHighWaterMark`` / ``writeBufferLowWaterMark``), the write buffer past which a
peer that does not read is cut off, and the frame buffers allocated ahead of their bytes, per connection
and for all connections (remoting/transport.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from rocketstream.remoting.channel import Channel, RequestHandler, unsupported
from rocketstream.remoting.command import MAX_FRAME_LENGTH, RemotingCommand
from rocketstream.remoting.transport import FrameProtocol, ReceiveAhead

__all__ = ["RemotingServer", "RequestHook", "ServerLimits", "parse_listen"]

log = logging.getLogger("rocketstream.remoting")

SERVER_CHANNEL_MAX_IDLE_S = 120.0   # NettyServerConfig.serverChannelMaxIdleTimeSeconds


@dataclass(frozen=True)
class ServerLimits:
    """Per-connection and server-wide memory bounds, in bytes (BrokerConfig reads them from broker.conf by the
    names in the comments)."""

    # writeBufferHighWaterMark / writeBufferLowWaterMark: writing waits above the high mark until the buffer is
    # below the low one. 4.9.8's NettyServerConfig leaves both 0, which keeps Netty's WriteBufferWaterMark.DEFAULT
    # (64 KiB / 32 KiB); 0 here means the same
    write_buffer_high_water_mark: int = 64 << 10
    write_buffer_low_water_mark: int = 32 << 10
    # serverChannelMaxWriteBufferSize: a connection with more bytes waiting to be written is closed (0: never).
    # Two largest frames: one whole answer always fits, with whatever is left of the one before it
    max_write_buffer: int = 2 * MAX_FRAME_LENGTH
    # serverChannelMaxReceiveAheadSize: the largest frame buffer allocated whole before its bytes arrive
    # (MessageStoreConfig.maxMessageSize's 4 MiB: a send's body); larger ones grow as their bytes come
    max_receive_ahead: int = 4 << 20
    # serverMaxReceiveAheadSize: all such buffers of the server's connections together
    max_receive_ahead_total: int = 64 << 20

    NAMES = {"write_buffer_high_water_mark": "writeBufferHighWaterMark",
             "write_buffer_low_water_mark": "writeBufferLowWaterMark",
             "max_write_buffer": "serverChannelMaxWriteBufferSize",
             "max_receive_ahead": "serverChannelMaxReceiveAheadSize",
             "max_receive_ahead_total": "serverMaxReceiveAheadSize"}

    def __post_init__(self) -> None:
        from rocketstream.errors import OptionError

        for attr, name in self.NAMES.items():
            if getattr(self, attr) < 0:
                raise OptionError(name, "must be >= 0", getattr(self, attr))
        high, low = self.water_marks
        if low > high:
            raise OptionError("writeBufferLowWaterMark", f"must not exceed writeBufferHighWaterMark ({high})", low)

    @property
    def water_marks(self) -> tuple[int, int]:
        """(high, low) in force: Netty's defaults unless both are set (NettyRemotingServer sets
        WRITE_BUFFER_WATER_MARK only when both are > 0)."""
        high, low = self.write_buffer_high_water_mark, self.write_buffer_low_water_mark
        return (high, low) if high > 0 and low > 0 else (64 << 10, 32 << 10)


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
                 max_frame: int = MAX_FRAME_LENGTH, idle_timeout_s: float | None = SERVER_CHANNEL_MAX_IDLE_S,
                 limits: ServerLimits | None = None) -> None:
        self.host = host
        self.port = port
        self.name = name
        self.max_frame = max_frame
        self.idle_timeout_s = idle_timeout_s
        self.limits = limits or ServerLimits()
        self.receive_ahead = ReceiveAhead(self.limits.max_receive_ahead_total)
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
            self._protocol, self.host, self.port, reuse_address=True)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        if self.idle_timeout_s:
            self._idle_task = asyncio.get_running_loop().create_task(self._close_idle(self.idle_timeout_s))
        return self

    def _protocol(self) -> FrameProtocol:
        high, low = self.limits.water_marks
        return FrameProtocol(self.max_frame, on_connected=self._accept, ahead_limit=self.limits.max_receive_ahead,
                             shared=self.receive_ahead, write_buffer_high=high, write_buffer_low=low)

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
                          on_close=self._channel_closed, name=self.name,
                          max_write_buffer=self.limits.max_write_buffer or None)
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
