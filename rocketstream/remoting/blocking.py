"""Blocking connections for synchronous requests made from user threads (a producer's sync sends).

``invokeSync`` from a thread that is not the event loop's, without the loop: the calling thread takes an idle
plain-TCP connection to the address from :class:`BlockingPool` (or opens one), writes the encoded request,
blocks in ``recv`` (the GIL released) until the frame with the request's opaque is there, decodes it and gives
the connection back. No event-loop wake-up and no cross-thread hand-over per answer (RocketMQ's Java caller
blocks on ``ResponseFuture.waitResponse`` until a Netty I/O thread completes it; in CPython each such
hand-over is one more thread that must take the GIL before the caller can go on).

A connection carries one request at a time, so the next frame on it is that request's answer
(``NettyRemotingAbstract.processResponseCommand`` matches by opaque: so do we, and a frame with another
opaque is logged and dropped). A connection whose request timed out, failed or was cut short is closed, never
reused: an answer arriving late can never be taken for the next request's. The broker knows these connections
from no heartbeat, so it sends them no requests (CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED go to
the client's event-loop connection); one that comes anyway is logged and dropped.

Timeouts are the socket's own (``SO_RCVTIMEO`` / ``SO_SNDTIMEO``) on a blocking socket: one ``recv`` system
call per wait, where a Python socket timeout would add a ``poll`` (and a second GIL hand-over) to each.
Plain TCP only: a TLS connection stays on the event loop (rocketstream.remoting.channel).
"""

from __future__ import annotations

import logging
import select
import socket
import struct
import threading
import time

from rocketstream.errors import RemotingConnectError, RemotingTimeoutError
from rocketstream.remoting.client import CONNECT_TIMEOUT_S, split_addr
from rocketstream.remoting.codes import code_name
from rocketstream.remoting.command import MAX_FRAME_LENGTH, RemotingCommand, decode_frame, frame_body_length

__all__ = ["BlockingPool", "IDLE_CHECK_S", "MAX_IDLE_S", "MAX_PER_ADDR"]

log = logging.getLogger("rocketstream.remoting")

MAX_IDLE_S = 60.0      # an idle connection older than this is closed, not reused (the broker closes channels idle
                       # for serverChannelMaxIdleTimeSeconds, 120 s, NettyServerConfig)
IDLE_CHECK_S = 1.0     # a connection idle longer than this is checked for a close by the peer before reuse
MAX_PER_ADDR = 16      # connections to one address at most: more threads at once use the event loop's one
_RECV = 65536
_RECV_MAX = 1 << 20   # the most one read asks for (a 16 MiB frame arrives in several)
_INT32 = struct.Struct(">i")
_TIMEVAL = struct.Struct("@ll")   # struct timeval for SO_RCVTIMEO / SO_SNDTIMEO


def _timeval(seconds: float) -> bytes:
    seconds = max(seconds, 0.001)   # 0 would mean "no timeout"
    whole = int(seconds)
    return _TIMEVAL.pack(whole, int((seconds - whole) * 1e6))


class BlockingPool:
    """Idle blocking connections per address, handed to one calling thread at a time (:meth:`invoke`), at
    most ``max_per_addr`` to one address, all closed by :meth:`close` (those in use are shut down: their
    waiting thread gets RemotingConnectError)."""

    def __init__(self, *, connect_timeout: float = CONNECT_TIMEOUT_S, max_frame: int = MAX_FRAME_LENGTH,
                 max_per_addr: int = MAX_PER_ADDR) -> None:
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        self.max_per_addr = max_per_addr
        self._count: dict[str, int] = {}   # addr -> connections open to it
        self._lock = threading.Lock()
        self._idle: dict[str, list[tuple[socket.socket, float]]] = {}   # addr -> (socket, idle since), LIFO
        self._open: dict[socket.socket, str] = {}   # every connection not yet closed -> its address
        self._armed: dict[socket.socket, float] = {}   # the socket timeouts set on a connection (seconds)
        self.closed = False

    # ------------------------------------------------------------------------- connections
    def open_count(self, addr: str | None = None) -> int:
        """Connections open (idle or in use), to ``addr`` or to any address."""
        with self._lock:
            return sum(1 for a in self._open.values() if addr is None or a == addr)

    def _take(self, addr: str, timeout: float) -> socket.socket | None:
        now = time.monotonic()
        with self._lock:
            if self.closed:
                raise RemotingConnectError("the client is shut down", addr=addr)
            idle = self._idle.get(addr)
            while idle:
                sock, since = idle.pop()
                if now - since <= IDLE_CHECK_S or (now - since <= MAX_IDLE_S and self._still_open(sock)):
                    return sock
                self._forget(sock)
                sock.close()
            if self._count.get(addr, 0) >= self.max_per_addr:
                return None
            self._count[addr] = self._count.get(addr, 0) + 1   # taken now: threads at once stay under the cap
        try:
            return self._connect(addr, timeout)
        except BaseException:
            with self._lock:
                self._count[addr] -= 1
            raise

    @staticmethod
    def _still_open(sock: socket.socket) -> bool:
        """No close (or stray bytes) from the peer waiting on an idle connection."""
        poller = select.poll()   # (not select.select: no limit on the descriptor's number)
        try:
            poller.register(sock, select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError):   # closed meanwhile
            return False

    def _connect(self, addr: str, timeout: float) -> socket.socket:
        host, port = split_addr(addr)
        t = max(min(timeout, self.connect_timeout), 0.001)
        try:
            sock = socket.create_connection((host, port), timeout=t)
        except TimeoutError:
            raise RemotingConnectError(f"connect timed out after {t:g} s", addr=addr) from None
        except OSError as exc:
            raise RemotingConnectError(f"cannot connect: {exc}", addr=addr) from exc
        try:
            sock.settimeout(None)   # blocking: timeouts are SO_RCVTIMEO / SO_SNDTIMEO (see the module's text)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            sock.close()
            raise RemotingConnectError(f"cannot set up the connection: {exc}", addr=addr) from exc
        with self._lock:
            if self.closed:
                sock.close()
                raise RemotingConnectError("the client is shut down", addr=addr)
            self._open[sock] = addr
        return sock

    def _give_back(self, addr: str, sock: socket.socket) -> None:
        with self._lock:
            if not self.closed and sock in self._open:
                self._idle.setdefault(addr, []).append((sock, time.monotonic()))
                return
            self._forget(sock)
        sock.close()

    def _discard(self, sock: socket.socket) -> None:
        with self._lock:
            self._forget(sock)
        sock.close()

    def _forget(self, sock: socket.socket) -> None:
        """(Under the lock.)"""
        addr = self._open.pop(sock, None)
        if addr is not None:
            self._count[addr] -= 1
        self._armed.pop(sock, None)

    def close_addr(self, addr: str) -> None:
        """Close the idle connections to ``addr`` (those in use are closed when their request ends)."""
        with self._lock:
            idle = self._idle.pop(addr, [])
            for sock, _ in idle:
                self._forget(sock)
        for sock, _ in idle:
            sock.close()

    def close(self) -> None:
        """Close every connection; a thread waiting on one gets RemotingConnectError; later :meth:`invoke`
        calls too."""
        with self._lock:
            self.closed = True
            idle = [s for lst in self._idle.values() for s, _ in lst]
            idle_set = set(idle)
            busy = [s for s in self._open if s not in idle_set]
            self._idle.clear()
            for sock in idle:
                self._forget(sock)
        for sock in idle:
            sock.close()
        for sock in busy:   # wakes the thread in recv (it closes the socket itself)
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass   # already closed by its thread, or never connected: nothing to wake

    # ------------------------------------------------------------------------- requests
    def invoke(self, addr: str, opaque: int, frame: bytes, timeout: float, code: int) -> RemotingCommand | None:
        """Write ``frame`` (an encoded request with ``opaque``) on a connection to ``addr`` and return the
        answer; None (nothing written) when ``max_per_addr`` connections to ``addr`` are all in use.
        RemotingTimeoutError after ``timeout`` seconds, RemotingConnectError when the connection cannot be made or
        breaks (or the pool is closed meanwhile), FrameError for a bad frame (each naming ``addr``). The
        connection goes back to the pool only after a clean answer."""
        deadline = time.monotonic() + timeout
        sock = self._take(addr, timeout)
        if sock is None:
            return None
        try:
            response, reusable = self._round_trip(sock, addr, opaque, frame, deadline, code, timeout)
        except BaseException:
            self._discard(sock)
            if self.closed:
                raise RemotingConnectError("the client was shut down while waiting for the answer",
                                           addr=addr) from None
            raise
        if reusable:
            self._give_back(addr, sock)
        else:
            self._discard(sock)
        return response

    def _round_trip(self, sock: socket.socket, addr: str, opaque: int, frame: bytes, deadline: float, code: int,
                    timeout: float) -> tuple[RemotingCommand, bool]:
        def timed_out() -> RemotingTimeoutError:
            return RemotingTimeoutError(f"no response to {code_name(code)} (opaque {opaque}) within {timeout:g} s",
                                        addr=addr, code=code, timeout_s=timeout)

        def arm() -> None:
            """Make the socket's timeouts at most what is left of the request's (and not far below: a wait
            cut short is resumed with the rest); a connection reused at about the same timeout keeps them."""
            rest = deadline - time.monotonic()
            if rest <= 0:
                raise timed_out()
            armed = self._armed.get(sock, 0.0)
            if armed > rest or armed < rest * 0.5:
                tv = _timeval(rest)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
                self._armed[sock] = rest

        arm()
        view = memoryview(frame)
        while view:
            try:
                view = view[sock.send(view):]
            except BlockingIOError:   # SO_SNDTIMEO ran out: the socket took nothing meanwhile
                arm()
            except OSError as exc:
                raise RemotingConnectError(f"write failed: {exc}", addr=addr) from exc

        def more(buf: bytearray, want: int) -> bytearray:
            """``buf`` with what the socket has next appended in place (a frame read in pieces is copied once,
            and a read asks for at most _RECV_MAX: what is allocated follows what arrives)."""
            while True:
                try:
                    chunk = sock.recv(min(max(want, _RECV), _RECV_MAX))
                    break
                except BlockingIOError:   # SO_RCVTIMEO ran out: the deadline, or a timeout armed shorter
                    arm()
                except OSError as exc:
                    raise RemotingConnectError(f"connection error: {exc}", addr=addr) from exc
            if not chunk:
                what = f" in the middle of a frame ({len(buf)} bytes)" if buf else ""
                raise RemotingConnectError(f"peer closed the connection{what}", addr=addr)
            buf += chunk
            return buf

        try:   # the usual answer: one whole frame in the first read
            buf = sock.recv(_RECV)
        except BlockingIOError:   # SO_RCVTIMEO ran out
            buf = b""
        except OSError as exc:
            raise RemotingConnectError(f"connection error: {exc}", addr=addr) from exc
        else:
            if not buf:
                raise RemotingConnectError("peer closed the connection", addr=addr)
            if len(buf) > 4 and _INT32.unpack_from(buf)[0] == len(buf) - 4 and len(buf) <= self.max_frame:
                cmd = decode_frame(buf[4:], addr=addr)
                if cmd.is_response and cmd.opaque == opaque:
                    return cmd, True
                buf = b""   # (dropped below, as any other frame that is not the answer)
                self._not_the_answer(cmd, addr)
        pending = bytearray(buf)
        while True:
            while len(pending) < 4:
                pending = more(pending, 4 - len(pending))
            end = 4 + frame_body_length(bytes(pending[:4]), max_frame=self.max_frame, addr=addr)
            while len(pending) < end:
                pending = more(pending, end - len(pending))
            cmd = decode_frame(bytes(pending[4:end]), addr=addr)
            del pending[:end]
            if cmd.is_response and cmd.opaque == opaque:
                if pending:   # nothing should follow: the connection carries one request at a time
                    log.warning("%d unexpected bytes after the answer from %s: the connection is closed",
                                len(pending), addr)
                return cmd, not pending
            self._not_the_answer(cmd, addr)

    @staticmethod
    def _not_the_answer(cmd: RemotingCommand, addr: str) -> None:
        if cmd.is_response:   # processResponseCommand: logged and dropped
            log.debug("response with unknown opaque %d from %s", cmd.opaque, addr)
        else:
            log.warning("%s from %s on a send-only connection: dropped (the broker reaches this client over its "
                        "heartbeat connection)", code_name(cmd.code), addr)
