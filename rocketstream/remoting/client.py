"""Client side of the remoting protocol (``NettyRemotingClient``): connect to ``host:port`` and get a
:class:`Channel` for ``invoke`` / ``invoke_oneway``; requests the server sends to us (broker ->
client) go to ``on_request`` (``ClientRemotingProcessor``), or are answered with code 3.

``ssl``: a client-side :class:`ssl.SSLContext` makes the connection TLS (``TlsHelper.buildSslContext(true)`` in
RocketMQ's client); the host of ``addr`` is the name the server's certificate must carry when the context checks
host names (``server_hostname`` overrides it). A failed handshake is a :class:`~rocketstream.errors.TlsError`
naming the address and why (remoting/tls.py ``describe_handshake_error``); the handshake counts against the
connect timeout."""

from __future__ import annotations

import asyncio
import ssl as _ssl

from rocketstream.errors import RemotingConnectError, TlsError
from rocketstream.remoting.channel import Channel, RequestHandler
from rocketstream.remoting.command import MAX_FRAME_LENGTH
from rocketstream.remoting.tls import describe_handshake_error
from rocketstream.remoting.transport import FrameProtocol

__all__ = ["connect", "split_addr"]

CONNECT_TIMEOUT_S = 3.0   # NettyClientConfig.connectTimeoutMillis


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise RemotingConnectError(f"not a host:port address: {addr!r}", addr=addr)
    return host.strip("[]"), int(port)


async def connect(addr: str, *, on_request: RequestHandler | None = None,
                  timeout: float = CONNECT_TIMEOUT_S, max_frame: int = MAX_FRAME_LENGTH,
                  ssl: _ssl.SSLContext | None = None, server_hostname: str | None = None) -> Channel:
    """An open connection to ``addr`` ("host:port"), TLS with ``ssl``; RemotingConnectError (TlsError for a
    failed handshake) names the address."""
    host, port = split_addr(addr)
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await asyncio.wait_for(loop.create_connection(
            lambda: FrameProtocol(max_frame, addr), host, port, ssl=ssl,
            server_hostname=(server_hostname or host) if ssl is not None else None,
            ssl_handshake_timeout=timeout if ssl is not None else None), timeout)
    except asyncio.TimeoutError:
        what = "connect and TLS handshake" if ssl is not None else "connect"
        raise RemotingConnectError(f"{what} timed out after {timeout:g} s", addr=addr) from None
    except _ssl.SSLError as exc:
        raise TlsError(f"TLS handshake failed: {describe_handshake_error(exc)}", addr=addr) from exc
    except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as exc:
        if ssl is not None:   # connected, then lost during the handshake (or asyncio's handshake timeout)
            raise TlsError(f"TLS handshake failed: {describe_handshake_error(exc)}", addr=addr) from exc
        raise RemotingConnectError(f"cannot connect: {exc}", addr=addr) from exc
    except OSError as exc:
        raise RemotingConnectError(f"cannot connect: {exc}", addr=addr) from exc
    channel = Channel(transport, protocol, handler=on_request, max_frame=max_frame, name="client")
    channel.addr = addr
    return channel.take_responses().start()

