"""An asyncio remoting server (``NettyRemotingServer``): processors registered by request code, a
default processor for the rest, one :class:`Channel` per connection, idle connections closed after
``serverChannelMaxIdleTimeSeconds`` (120 s), channel-close listeners (``ChannelEventListener``).

What one connection may hold is bounded (:class:`ServerLimits`): the write buffer's water marks
(``NettyServerConfig.writeBufferHighWaterMark`` / ``writeBufferLowWaterMark``), the write buffer past which a
peer that does not read is cut off, and the frame buffers allocated ahead of their bytes, per connection
and for all connections (remoting/transport.py).

With a :class:`~rocketstream.remoting.tls.ServerTlsConfig` whose mode is ``permissive`` or ``enforcing`` the
server accepts connections itself, peeks at each one's first byte (``HandshakeHandler``) and then hands the
socket to asyncio as TLS (``connect_accepted_socket(..., ssl=...)``, handshake bounded by its timeout) or, when
permissive, as plain TCP; an enforcing server closes a plain connection without an answer (remoting/tls.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from rocketstream.remoting.channel import Channel, RequestHandler, unsupported
from rocketstream.remoting.command import MAX_FRAME_LENGTH, RemotingCommand
from rocketstream.remoting.tls import HANDSHAKE_MAGIC_CODE, ServerTlsConfig, describe_handshake_error, peek_first_byte
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


def _peer_name(peer: object) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)


RequestHook = Callable[[Channel, RemotingCommand], "RemotingCommand | None"]


class RemotingServer:
    """``server.register(code, fn)``; ``fn(channel, request)`` returns a response, ``None`` (no
    answer) or an awaitable of one. Unregistered codes go to ``default_processor`` or get code 3.

    ``request_hooks`` run before any processor (``RPCHook.doBeforeRequest``, e.g. ACL): a hook that
    returns a response answers the request with it and the processor is not called.

    ``tls``: serve TLS (see the module text); None or mode ``disabled``: plain TCP only."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, name: str = "remoting",
                 max_frame: int = MAX_FRAME_LENGTH, idle_timeout_s: float | None = SERVER_CHANNEL_MAX_IDLE_S,
                 limits: ServerLimits | None = None, tls: ServerTlsConfig | None = None) -> None:
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
        self.tls = tls if tls is not None and tls.enabled else None
        self._ssl: ssl.SSLContext | None = self.tls.ssl_context() if self.tls is not None else None
        self._listener: socket.socket | None = None
        self._accept_task: asyncio.Task | None = None
        self._handshakes: set[asyncio.Task] = set()   # connections between accept and their channel

    def register(self, code: int, processor: RequestHandler) -> None:
        self.processors[code] = processor

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> RemotingServer:
        loop = asyncio.get_running_loop()
        if self.tls is None:
            self._server = await loop.create_server(self._protocol, self.host, self.port, reuse_address=True)
            sock = self._server.sockets[0]
        else:
            sock = self._listener = await self._listen(loop)
            self._accept_task = loop.create_task(self._accept_loop(sock), name=f"{self.name}-accept")
        self.port = sock.getsockname()[1]
        if self.idle_timeout_s:
            self._idle_task = asyncio.get_running_loop().create_task(self._close_idle(self.idle_timeout_s))
        return self

    def _protocol(self) -> FrameProtocol:
        high, low = self.limits.water_marks
        return FrameProtocol(self.max_frame, on_connected=self._accept, ahead_limit=self.limits.max_receive_ahead,
                             shared=self.receive_ahead, write_buffer_high=high, write_buffer_low=low)

    async def _listen(self, loop: asyncio.AbstractEventLoop) -> socket.socket:
        """A listening socket as ``create_server`` makes it (the first address ``host`` resolves to,
        SO_REUSEADDR, non-blocking)."""
        infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, sockaddr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(sockaddr)
            sock.listen(100)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return sock

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(listener)
            except (ConnectionAbortedError, InterruptedError):
                continue
            except OSError as exc:   # e.g. out of file descriptors: as asyncio's own accept loop, wait a second
                log.error("%s: accept failed: %s", self.name, exc)
                await asyncio.sleep(1.0)
                continue
            conn.setblocking(False)
            task = loop.create_task(self._handshake(conn, _peer_name(peer)))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, conn: socket.socket, peer: str) -> None:
        """One accepted connection: peek its first byte, then TLS, plain TCP (permissive) or closed."""
        assert self.tls is not None
        loop = asyncio.get_running_loop()
        # a plain client may connect before it has anything to send: it waits as long as an idle connection may
        wait_first = self.idle_timeout_s or SERVER_CHANNEL_MAX_IDLE_S
        if self.tls.mode == "enforcing":
            wait_first = min(wait_first, self.tls.handshake_timeout_s)
        try:
            try:
                first = await peek_first_byte(conn, wait_first)
            except (TimeoutError, asyncio.TimeoutError):
                log.info("%s: closing connection %s: nothing received within %g s", self.name, peer, wait_first)
                conn.close()
                return
            if first is None:
                conn.close()
                return
            if first != HANDSHAKE_MAGIC_CODE:
                if self.tls.mode == "enforcing":
                    log.warning("%s: closing connection %s: a plain (non-TLS) client while this server runs in "
                                "TLS enforcing mode", self.name, peer)
                    conn.close()
                    return
                await loop.connect_accepted_socket(self._protocol, conn)
                return
            try:
                await loop.connect_accepted_socket(self._protocol, conn, ssl=self._ssl,
                                                   ssl_handshake_timeout=self.tls.handshake_timeout_s)
            except (ssl.SSLError, OSError, asyncio.TimeoutError) as exc:
                log.warning("%s: TLS handshake with %s failed: %s", self.name, peer, describe_handshake_error(exc))
                conn.close()
        except OSError as exc:
            log.info("%s: connection %s failed before it started: %s", self.name, peer, exc)
            conn.close()
        except BaseException:
            conn.close()
            raise

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
        if self._accept_task is not None:
            self._accept_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accept_task
        if self._listener is not None:
            self._listener.close()
        for task in list(self._handshakes):
            task.cancel()
        if self._handshakes:
            await asyncio.gather(*self._handshakes, return_exceptions=True)
        for channel in list(self.channels):
            await channel.aclose()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
