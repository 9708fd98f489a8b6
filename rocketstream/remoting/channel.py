"""One TCP connection speaking the remoting protocol, either end (``NettyRemotingAbstract``).

A :class:`Channel` reads frames in one task per connection, matches responses to pending requests
by opaque (``processResponseCommand``), and hands requests to a handler (``processRequestCommand``):

* unknown code -> ``REQUEST_CODE_NOT_SUPPORTED`` (3) with remark ``" request type N not supported"``;
* a handler exception -> ``SYSTEM_ERROR`` (1) with the exception as remark (never for oneway);
* a malformed or oversized frame -> this connection is closed, nothing else is affected
  (``NettyDecoder`` closes the channel on a decode error);
* a peer that does not read its answers: writing waits while the socket's buffer is above its high water
  mark (the reader of requests waits with it), and once more than ``max_write_buffer`` bytes wait to be
  written (answers written without waiting, e.g. woken long-polling pulls) the connection is closed with a
  logged reason (``serverChannelMaxWriteBufferSize``; Netty only marks such a channel unwritable).

Closing drops what the socket does not take at once, as Netty's ``Channel.close`` fails the writes still in
its outbound buffer: a peer that stops reading cannot keep a closed connection's answers in memory.

Both ends may send requests (the broker sends ``NOTIFY_CONSUMER_IDS_CHANGED`` to clients), so the
server's and the client's connections are the same class.
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import inspect
import itertools
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable

from rocketstream.errors import FrameError, RemotingConnectError, RemotingError, RemotingTimeoutError
from rocketstream.remoting.codes import ResponseCode, code_name
from rocketstream.remoting.command import (
    MAX_FRAME_LENGTH,
    ONEWAY_FLAG,
    RemotingCommand,
    decode_frame,
    encode_frame,
    encode_frame_parts,
)
from rocketstream.remoting.transport import FrameProtocol

__all__ = ["Channel", "RequestHandler", "ResponseWaiter", "next_opaque", "DEFAULT_TIMEOUT_S"]

log = logging.getLogger("rocketstream.remoting")

DEFAULT_TIMEOUT_S = 3.0   # ClientConfig.mqClientApiTimeout (3000 ms)
_JOIN_BELOW = 1 << 20     # frames of one loop iteration are joined into one write below this total
_PARTS_FROM = 256 << 10   # a response body given as parts is written part by part from this size

HandlerResult = RemotingCommand | None | Awaitable[RemotingCommand | None]
RequestHandler = Callable[["Channel", RemotingCommand], HandlerResult]

# RemotingCommand.requestId: one process-wide counter shared by all connections, wrapping in int32
_OPAQUES = itertools.count(1)


def next_opaque() -> int:
    return ((next(_OPAQUES) + 2**31) % 2**32) - 2**31


def _exception_remark(exc: BaseException) -> str:
    """``RemotingHelper.exceptionSimpleDesc``-like: the exception's class and message."""
    return f"{type(exc).__name__}: {exc}"


class ResponseWaiter:
    """What a thread other than the loop's waits on for one response (:meth:`Channel.start_request`): a plain
    lock released by the loop when the response (or the connection's failure) is there. Cheaper than a
    ``concurrent.futures.Future`` (its Condition is Python code on both sides); only the loop sets it."""

    __slots__ = ("_lock", "_once", "response", "error")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()
        self._once = _thread.allocate_lock()   # taken by the first (and only) setter, whichever thread it is
        self.response: RemotingCommand | None = None
        self.error: BaseException | None = None

    def done(self) -> bool:
        return self._once.locked()

    def set_result(self, response: RemotingCommand) -> None:
        if self._once.acquire(False):
            self.response = response
            self._lock.release()

    def set_exception(self, error: BaseException) -> None:
        if self._once.acquire(False):
            self.error = error
            self._lock.release()

    def wait(self, timeout: float) -> RemotingCommand | None:
        """The response; raises the connection's error; None after ``timeout`` seconds."""
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            return None
        if self.error is not None:
            raise self.error
        return self.response


class Channel:
    """A connected remoting peer. ``handler(channel, request)`` answers requests (may be async);
    ``None`` means "no handler": every request is answered with code 3."""

    def __init__(self, transport: asyncio.Transport, protocol: FrameProtocol, *,
                 handler: RequestHandler | None = None, max_frame: int = MAX_FRAME_LENGTH,
                 on_close: Callable[[Channel], None] | None = None, name: str = "remoting",
                 max_write_buffer: int | None = None) -> None:
        self._transport = transport
        self._frames = protocol
        self.handler = handler
        self.max_frame = max_frame
        self.max_write_buffer = max_write_buffer   # None: no limit (a client's connections)
        protocol.max_frame = max_frame
        self._on_close = on_close
        self.name = name
        peer = transport.get_extra_info("peername")
        self.addr = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)
        protocol.addr = self.addr
        # responses awaited: asyncio futures (invoke) or other threads' waiters (start_request)
        self._pending: dict[int, asyncio.Future[RemotingCommand] | ResponseWaiter] = {}
        self._tasks: set[asyncio.Task] = set()
        self._closed = asyncio.Event()
        self._reader_task: asyncio.Task | None = None
        self.last_activity = time.monotonic()
        self.close_reason: str | None = None
        self._out: list[bytes] = []     # frames waiting for this loop iteration's write (see send)
        self._keep_buffer: set[int] = set()   # opaques whose response may keep a large body in its buffer
        self._answered = False   # a frame has come from the peer
        # Writes from other threads (write_from_thread): a copy of the socket's descriptor, made on the first
        # such write, written under _wlock, which the loop's writes take too; _rest is what such a write left
        # for the loop to write. Not over TLS (the transport encrypts): there every write is the loop's.
        self._wlock = _thread.allocate_lock()
        self._rest: bytes | None = None
        self._direct: socket.socket | None = None
        self._direct_ok = transport.get_extra_info("ssl_object") is None
        self._loop: asyncio.AbstractEventLoop | None = None   # set by start()

    # --- lifecycle
    def start(self) -> Channel:
        self._loop = asyncio.get_running_loop()
        task = self._loop.create_task(self._read_loop(), name=f"{self.name}-reader-{self.addr}")
        self._reader_task = task
        task.add_done_callback(self._reader_done)
        return self

    def _reader_done(self, task: asyncio.Task) -> None:
        # a cancelled task keeps its CancelledError, whose traceback holds the reader's frame and so this
        # channel: not referring to the task any more leaves no cycle for a full GC to find
        if self._reader_task is task:
            self._reader_task = None

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def close(self, reason: str = "closed locally") -> None:
        """Close the connection; pending requests fail with RemotingConnectError naming the peer."""
        if self._closed.is_set():
            return
        self.close_reason = reason
        self._closed.set()
        with contextlib.suppress(Exception):
            self._write_out()   # frames sent before the close go to the socket first
        with self._wlock:   # no thread writes any more (they check closed under the lock)
            direct, self._direct = self._direct, None
            if direct is not None:
                direct.close()
        with contextlib.suppress(Exception):
            if self._transport.get_write_buffer_size():
                self._transport.abort()   # what the socket did not take is dropped (see the module text)
            else:
                self._transport.close()
        self._frames.discard()
        for opaque, fut in list(self._pending.items()):
            if not fut.done():
                fut.set_exception(RemotingConnectError(f"connection closed ({reason}) while waiting for "
                                                       f"the response to opaque {opaque}", addr=self.addr))
        self._pending.clear()
        current = asyncio.current_task()
        if self._reader_task is not None and self._reader_task is not current:
            self._reader_task.cancel()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        if self._on_close is not None:
            try:
                self._on_close(self)
            except Exception:   # a close listener must not stop the close; it is logged, not hidden
                log.exception("%s: close listener failed for %s", self.name, self.addr)

    async def aclose(self) -> None:
        self.close()
        with contextlib.suppress(Exception):
            await self._frames.wait_closed()
        if self._reader_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader_task

    # --- sending
    async def send(self, cmd: RemotingCommand, frame: bytes | None = None) -> None:
        """Send ``cmd`` (``frame``: its encode_frame bytes when the caller has them already) and wait
        while the socket's buffer is full."""
        if self.closed:
            raise RemotingConnectError(f"connection is closed ({self.close_reason})", addr=self.addr)
        self.send_nowait(cmd, frame)
        await self.send_drain()
        self.last_activity = time.monotonic()

    def send_nowait(self, cmd: RemotingCommand, frame: bytes | None = None) -> None:
        """Queue a frame for this loop iteration's write without waiting for the socket buffer
        (``send`` also waits while the peer is slow); RemotingConnectError when closed."""
        if self.closed:
            raise RemotingConnectError(f"connection is closed ({self.close_reason})", addr=self.addr)
        if frame is None:
            frame = encode_frame(cmd)
            cmd.body_parts = None   # views of a mapping are not held after their one copy
        # Frames sent in one event-loop iteration go out in one write: the responses to the requests
        # of one read (a client's threads share its connection) cost one send() instead of one each.
        if not self._out:
            asyncio.get_running_loop().call_soon(self._write_out)
        self._out.append(frame)
        self.last_activity = time.monotonic()

    def _write_out(self) -> None:
        with self._wlock:   # not while another thread writes (write_from_thread)
            error = self._write_queued()
        if error is not None:
            self.close(f"write failed: {error}")
            return
        self._check_write_buffer()

    def _write_queued(self) -> BaseException | None:
        """With ``_wlock`` held: what waits to be written (the end of a thread's frame, then :attr:`_out`) to
        the transport; the write's error, if any."""
        out, self._out = self._out, []
        if self._rest is not None:   # the end of a frame a thread wrote goes first
            out.insert(0, self._rest)
            self._rest = None
        if not out or self._transport.is_closing():
            return None
        try:
            if len(out) == 1:
                # a view: what the socket does not take at once is copied into the transport's buffer once
                # (a bytes slice would be one more copy of a megabyte pull answer)
                self._transport.write(memoryview(out[0]))
            elif sum(len(f) for f in out) < _JOIN_BELOW:
                self._transport.write(b"".join(out))
            else:
                for frame in out:   # large frames are not joined (a copy of each)
                    self._transport.write(memoryview(frame))
        except (ConnectionError, OSError, RuntimeError) as exc:
            return exc
        return None

    def _check_write_buffer(self) -> None:
        """Close the connection when more than ``max_write_buffer`` bytes wait to be written."""
        if self.max_write_buffer is None:
            return
        waiting = self._transport.get_write_buffer_size()
        if waiting > self.max_write_buffer:
            reason = (f"{waiting} bytes wait to be written, more than the {self.max_write_buffer}-byte limit "
                      f"(serverChannelMaxWriteBufferSize): the peer does not read")
            log.warning("%s: closing connection %s: %s", self.name, self.addr, reason)
            self.close(reason)

    async def invoke(self, request: RemotingCommand, timeout: float = DEFAULT_TIMEOUT_S, *,
                     body_buffer: bool = False) -> RemotingCommand:
        """Send a request and wait for its response (``invokeSync``); RemotingTimeoutError names the
        peer, the request code and the timeout. ``body_buffer``: a large response body may stay in the
        bytearray it was received into (``response.body_buffer``, ``body`` None) instead of a copy."""
        request.opaque = next_opaque()
        request.flag &= ~ONEWAY_FLAG
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[request.opaque] = fut
        if body_buffer:
            self._keep_buffer.add(request.opaque)
        return await self._response(fut, request.opaque, request.code, timeout, self.send(request))

    async def invoke_frame(self, opaque: int, code: int, frame: bytes, timeout: float = DEFAULT_TIMEOUT_S, *,
                           body_buffer: bool = False) -> RemotingCommand:
        """:meth:`invoke` of a request already encoded with ``opaque`` in it (a request template's frame): it
        goes out with this loop iteration's writes (:meth:`start_request`), with the same errors."""
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        # an asyncio future has what start_request asks of a ResponseWaiter (done, set_result, set_exception)
        self.start_request(opaque, frame, fut, body_buffer=body_buffer)   # type: ignore[arg-type]
        return await self._response(fut, opaque, code, timeout)

    async def _response(self, fut: asyncio.Future[RemotingCommand], opaque: int, code: int, timeout: float,
                        sending: Awaitable[None] | None = None) -> RemotingCommand:
        """Await ``sending`` (if any), then the response ``fut`` registered under ``opaque``, failing it with
        RemotingTimeoutError after ``timeout``; the opaque is forgotten however it ends."""
        def expire() -> None:
            if not fut.done():
                fut.set_exception(RemotingTimeoutError(
                    f"no response to {code_name(code)} (opaque {opaque}) within {timeout:g} s",
                    addr=self.addr, code=code, timeout_s=timeout))

        # a timer on the future rather than asyncio.wait_for: on Python 3.10/3.11 wait_for can swallow a
        # cancellation of the caller when the response arrives in the same loop iteration
        timer = asyncio.get_running_loop().call_later(timeout, expire)
        try:
            if sending is not None:
                await sending
            return await fut
        finally:
            timer.cancel()
            self.forget(opaque)

    def start_request(self, opaque: int, frame: bytes, future: ResponseWaiter, *, body_buffer: bool = False) -> None:
        """On the loop: write an encoded request (opaque already in it) whose response completes ``future``,
        which another thread waits on (``invokeSync`` without a task, a timer or an asyncio future on the
        loop; see :meth:`invoke` for the same on the loop). A closed connection fails ``future`` with
        RemotingConnectError; the waiting thread calls :meth:`forget` when it stops waiting."""
        if self.closed:
            if not future.done():
                future.set_exception(RemotingConnectError(f"connection is closed ({self.close_reason})",
                                                          addr=self.addr))
            return
        self._pending[opaque] = future
        if body_buffer:   # as invoke(..., body_buffer=True); forget() ends it
            self._keep_buffer.add(opaque)
        if not self._out:
            asyncio.get_running_loop().call_soon(self._write_out)
        self._out.append(frame)
        self.last_activity = time.monotonic()

    def write_from_thread(self, opaque: int, frame: bytes, future: ResponseWaiter) -> bool:
        """From a thread that is not the loop's: :meth:`start_request` without the loop, the frame written to
        the socket by this thread (the loop still reads the response and completes ``future``). False when
        this cannot be done now (TLS, a closed connection, frames or bytes waiting to be written by the loop):
        then nothing was registered or written and the caller goes through :meth:`start_request`. What the
        socket does not take at once is left to the loop, and later frames wait behind it."""
        if not self._direct_ok or self._loop is None:
            return False
        with self._wlock:
            if self._closed.is_set() or self._out or self._rest is not None \
                    or self._transport.get_write_buffer_size():
                return False
            sock = self._direct
            if sock is None:
                sock = self._direct = self._dup_socket()
                if sock is None:
                    return False
            self._pending[opaque] = future   # before the write: the response may come at once
            try:
                sent = sock.send(frame)
            except BlockingIOError:
                sent = 0
            except OSError:   # the loop finds the connection broken and fails the request (close)
                self._pending.pop(opaque, None)
                return False
            short = sent < len(frame)
            if short:
                self._rest = frame[sent:]
        if short:
            try:
                self._loop.call_soon_threadsafe(self._write_out)
            except RuntimeError:   # the loop is closed: nobody will read the answer either
                self._pending.pop(opaque, None)
                raise RemotingConnectError("the connection's event loop is closed", addr=self.addr) from None
        self.last_activity = time.monotonic()
        return True

    def _dup_socket(self) -> socket.socket | None:
        """A socket object over a copy of the connection's descriptor (closed by :meth:`close`); None when
        the transport has none to share."""
        sock = self._transport.get_extra_info("socket")
        try:
            fd = sock.fileno() if sock is not None else -1
            if fd < 0:
                self._direct_ok = False
                return None
            return socket.socket(sock.family, sock.type, fileno=os.dup(fd))
        except (OSError, AttributeError, ValueError):
            self._direct_ok = False
            return None

    def forget(self, opaque: int) -> None:
        """On the loop: a response to ``opaque`` is no longer awaited (dropped when it comes)."""
        self._pending.pop(opaque, None)
        self._keep_buffer.discard(opaque)

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        """Send a request that gets no response (``invokeOneway``: flag bit RPC_ONEWAY)."""
        request.opaque = next_opaque()
        request.flag |= ONEWAY_FLAG
        await self.send(request)

    # --- receiving
    def take_responses(self) -> Channel:
        """Complete the responses to this side's requests as their frames arrive (FrameProtocol.on_frame),
        without a wake-up of the reader task for each: a client's connection, whose frames are mostly answers.
        Requests, and any frame that comes while others wait in the queue, still go to the reader in order."""
        self._frames.on_frame = self._take_response
        return self

    def _take_response(self, frame: bytes) -> bytes | None:
        """None when ``frame`` was a response (its waiter completed, as the reader does), else ``frame``."""
        try:
            cmd = decode_frame(frame, addr=self.addr)
        except FrameError:
            return frame   # the reader decodes it again and closes the connection with the error
        if not cmd.is_response:
            return frame
        self.last_activity = time.monotonic()
        self._answered = True
        fut = self._pending.pop(cmd.opaque, None)
        if fut is not None and not fut.done():
            fut.set_result(cmd)
        else:   # processResponseCommand: logged and dropped
            log.debug("%s: response with unknown opaque %d from %s", self.name, cmd.opaque, self.addr)
        return None

    async def _read_loop(self) -> None:
        reason = "peer closed the connection"
        try:
            while True:
                data = await self._frames.next_frame()
                self.last_activity = time.monotonic()
                self._answered = True
                if isinstance(data, tuple):   # a large frame, its body received apart
                    cmd = decode_frame(data[0], addr=self.addr, body_apart=data[1])
                    if not (cmd.is_response and cmd.opaque in self._keep_buffer):
                        cmd.take_body_buffer()
                else:
                    cmd = decode_frame(data, addr=self.addr)
                if cmd.is_response:
                    fut = self._pending.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
                    else:   # processResponseCommand: logged and dropped
                        log.debug("%s: response with unknown opaque %d from %s", self.name, cmd.opaque, self.addr)
                    continue
                self._dispatch(cmd)
                if self._frames.write_blocked():   # the peer does not take our answers as fast
                    await self.send_drain()
        except asyncio.IncompleteReadError as exc:
            reason = "peer closed the connection" if not exc.partial else \
                f"peer closed the connection in the middle of a frame ({len(exc.partial)} bytes)"
            if not exc.partial:
                reason += self._plain_refused_hint()
        except FrameError as exc:
            problem = str(exc)   # the text, not the exception: a record kept by a handler would keep its frames
            reason = f"bad frame: {problem}"
            log.warning("%s: closing connection: %s", self.name, problem)
        except (ConnectionError, OSError) as exc:
            reason = f"connection error: {exc}"
            if isinstance(exc, ConnectionResetError):
                reason += self._plain_refused_hint()
        except RemotingError as exc:   # a response could not be written
            reason = str(exc)
        except asyncio.CancelledError:
            reason = self.close_reason or "cancelled"
            raise
        finally:
            self.close(reason)

    def _plain_refused_hint(self) -> str:
        """Why a plain connection may have been closed before any answer: HandshakeHandler (a server enforcing
        TLS) closes it without a word."""
        if not self._pending or self._answered:
            return ""
        if self._transport.get_extra_info("ssl_object") is None:
            return (" without answering anything: a server that enforces TLS (tls.server.mode=enforcing) closes "
                    "plain connections so; connect with tls=")
        # TLS 1.3: the client's handshake is done before the server has checked the client's certificate
        return (" without answering anything: the server may have refused the TLS handshake after our side "
                "finished it, e.g. for a missing or untrusted client certificate (tls.server.need.client.auth)")

    def _dispatch(self, request: RemotingCommand) -> None:
        """Run the handler; a plain answer is written at once (no coroutine per request: the reader awaits
        only when the socket's buffer is full), an async processor's runs on its own."""
        try:
            result = self.handler(self, request) if self.handler is not None else None
            if self.handler is None:
                result = unsupported(request)
            if result is not None and type(result) is not RemotingCommand and inspect.isawaitable(result):
                # an async processor runs on its own; the reader goes on
                task = asyncio.get_running_loop().create_task(self._finish(request, result))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return
        except Exception as exc:   # NettyRemotingAbstract: a processor exception becomes SYSTEM_ERROR
            result = self._error_response(request, exc)
        self._respond_now(request, result)

    async def _finish(self, request: RemotingCommand, pending: Awaitable) -> None:
        try:
            result = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            result = self._error_response(request, exc)
        try:
            await self._respond(request, result)
        except RemotingError as exc:
            log.debug("%s: could not answer %s: %s", self.name, self.addr, exc)

    def _error_response(self, request: RemotingCommand, exc: Exception) -> RemotingCommand:
        if not isinstance(exc, RemotingError):
            log.exception("%s: processing %s from %s failed", self.name, code_name(request.code), self.addr)
        else:
            log.info("%s: %s from %s: %s", self.name, code_name(request.code), self.addr, exc)
        return request.response(ResponseCode.SYSTEM_ERROR, _exception_remark(exc))

    async def _respond(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        self._respond_now(request, response)
        await self.send_drain()

    def _respond_now(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        """Write the answer to ``request`` (nothing for a oneway request or a None answer) without waiting for
        the socket's buffer; RemotingConnectError when the connection is closed."""
        if response is None or request.is_oneway:
            return
        response.opaque = request.opaque
        response.flag |= 1
        if response.body_parts is not None and sum(len(p) for p in response.body_parts) >= _PARTS_FROM:
            # a large pull answer: views of the commit-log mapping, written without a join
            try:
                parts = encode_frame_parts(response)
            except FrameError as exc:   # e.g. a body over the frame limit: the peer still gets an answer
                parts = [encode_frame(request.response(ResponseCode.SYSTEM_ERROR, _exception_remark(exc)))]
            finally:
                response.body_parts = None
            self._write_parts(parts)
            del parts   # the transport copied what the socket did not take at once: no view is held
            return
        try:
            frame = encode_frame(response)   # encoded once
        except FrameError as exc:   # e.g. a body over the frame limit: the peer still gets an answer
            response = request.response(ResponseCode.SYSTEM_ERROR, _exception_remark(exc))
            frame = encode_frame(response)
        self.send_nowait(response, frame)

    def _write_parts(self, parts: list[bytes | memoryview]) -> None:
        """Write one frame's buffers now, after the frames already queued, without joining them: what the
        socket takes at once goes straight from each buffer (a commit-log mapping) to the kernel, the
        transport copies only the rest (``sendfile``-like, as the Java broker's FileRegion transfer)."""
        if self.closed:
            raise RemotingConnectError(f"connection is closed ({self.close_reason})", addr=self.addr)
        with self._wlock:   # the frames queued first, then these, no thread's write between
            error = self._write_queued()
            if error is None and not self._transport.is_closing():
                try:
                    # one write each, not writelines: uvloop's writelines keeps the views of what the socket
                    # did not take (an export of the mapping: the file could not be unmapped), its write
                    # copies that rest
                    for part in parts:
                        self._transport.write(part)
                except (ConnectionError, OSError, RuntimeError) as exc:
                    error = exc
        if error is not None:
            self.close(f"write failed: {error}")
            return
        self.last_activity = time.monotonic()
        self._check_write_buffer()

    async def send_drain(self) -> None:
        """Wait while the socket's buffer is full (the wait of :meth:`send`)."""
        try:
            await self._frames.drain()
        except (ConnectionError, OSError) as exc:
            self.close(f"write failed: {exc}")
            raise RemotingConnectError(f"write failed: {exc}", addr=self.addr) from exc


def unsupported(request: RemotingCommand) -> RemotingCommand:
    """``REQUEST_CODE_NOT_SUPPORTED`` as NettyRemotingAbstract.processRequestCommand words it."""
    return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                            f" request type {request.code} not supported")
