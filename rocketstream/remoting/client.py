"""Client side of the remoting protocol (``NettyRemotingClient``): connect to ``host:port`` and get a
:class:`Channel` for ``invoke`` / ``invoke_oneway``; requests the server sends to us (broker ->
client) go to ``on_request`` (``ClientRemotingProcessor``), or are answered with code 3."""

from __future__ import annotations

import asyncio

from rocketstream.errors import RemotingConnectError
from rocketstream.remoting.channel import Channel, RequestHandler
from rocketstream.remoting.command import MAX_FRAME_LENGTH
from rocketstream.remoting.transport import FrameProtocol

__all__ = ["connect", "split_addr"]

CONNECT_TIMEOUT_S = 3.0   # NettyClientConfig.connectTimeoutMillis


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise RemotingConnectError(f"not a host:port address: {addr!r}", addr=addr)
    return host.strip("[]"), int(port)


async def connect(addr: str, *, on_request: RequestHandler | None = None,
                  timeout: float = CONNECT_TIMEOUT_S, max_frame: int = MAX_FRAME_LENGTH) -> Channel:
    """An open connection to ``addr`` ("host:port"); RemotingConnectError names the address."""
    host, port = split_addr(addr)
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await asyncio.wait_for(
            loop.create_connection(lambda: FrameProtocol(max_frame, addr), host, port), timeout)
    except asyncio.TimeoutError:
        raise RemotingConnectError(f"connect timed out after {timeout:g} s", addr=addr) from None
    except OSError as exc:
        raise RemotingConnectError(f"cannot connect: {exc}", addr=addr) from exc
    channel = Channel(transport, protocol, handler=on_request, max_frame=max_frame, name="client")
    channel.addr = addr
    return channel.start()
