"""The bytes side of a remoting connection: frames cut from the socket with as few copies as possible
(``NettyDecoder``'s LengthFieldBasedFrameDecoder: a 4-byte big-endian length, then that many bytes).

:class:`FrameProtocol` is an :class:`asyncio.BufferedProtocol`, so the event loop receives into buffers we
hand it instead of allocating a ``bytes`` per read and appending it to a StreamReader's buffer:

* small frames (requests, most responses) arrive in one reusable receive buffer and are copied out once
  each, several per read (the buffer is 16 KiB on a new connection and grows to 256 KiB on a busy one);
* a frame larger than half that buffer (a pull answer carries up to megabytes) is split once its header has
  arrived: the header is copied out, the body gets a buffer of its own (an uninitialized numpy byte array),
  and the kernel writes the rest of the body there directly. The frame is delivered as ``(header part, body)``
  and the body is never copied before :func:`~rocketstream.remoting.command.decode_frame` (which makes it
  ``bytes`` unless the caller takes the buffer). A StreamReader copied such a frame three times (appending,
  ``readexactly``'s slice, and the removal from the front of its buffer) and paused and resumed the socket
  every 2 MiB. A large frame whose header is not worth waiting for is received whole the same way and
  delivered as a memoryview of its buffer.

Memory follows the bytes received: a large frame's buffer gets its full size at once only within a
:class:`ReceiveAhead` budget (``serverChannelMaxReceiveAheadSize`` per connection, and on a server
``serverMaxReceiveAheadSize`` for all its connections together: the sizes of the frame buffers still being
filled); beyond it the buffer starts at :data:`_GROW_FROM` bytes (or twice what has arrived) and doubles
whenever the socket has filled it, so a peer that announces 16 MiB and sends 8 bytes holds a few hundred
KiB, not 16 MiB. Pages of an uninitialized buffer that no byte has reached are not resident either.

Frames wait in a queue for :meth:`FrameProtocol.next_frame` (the channel's reader task); while more than
:data:`_PAUSE_FRAMES` frames or :data:`_PAUSE_BYTES` bytes wait, the socket is not read (backpressure on a
peer that sends faster than the channel handles, e.g. while its answers cannot be written). A frame whose
length is below 4 or above ``max_frame`` is a :class:`FrameError`, raised after the frames before it; nothing
after it is read.

The write side keeps asyncio's flow control: ``drain()`` waits while the transport's buffer is above its high
water mark (``pause_writing`` / ``resume_writing``; Netty's ``WriteBufferWaterMark``, whose marks
``NettyServerConfig.writeBufferHighWaterMark`` / ``writeBufferLowWaterMark`` set). The channel closes a
connection whose write buffer outgrows a budget (remoting/channel.py).

When the connection is lost, the partial frame's buffer and its budget are released at once, and the error
kept for the reader is a copy without the traceback: the original's traceback holds the transport's frames,
which hold this protocol, a cycle that only a full garbage collection would free (with the buffers in it).
"""

from __future__ import annotations

import asyncio
import collections
import copy
from collections.abc import Callable
from typing import cast

import numpy as np
import numpy.typing as npt

from rocketstream.errors import FrameError

__all__ = ["BodyBuffer", "Frame", "FrameProtocol", "ReceiveAhead"]

# A large frame's body, received in place: an uninitialized numpy byte array (a bytearray of 8 MiB costs
# about 1 ms of zero-filling that the socket overwrites anyway)
BodyBuffer = npt.NDArray[np.uint8]
# What FrameProtocol.next_frame gives: a frame after its length prefix (a large one received whole: a view of its
# buffer), or a large one as (its part before the body, the body)
Frame = bytes | memoryview | tuple[bytes, BodyBuffer]

# The receive buffer starts small (a broker holds thousands of mostly idle connections) and grows fourfold
# whenever a read fills all of its free space, up to _RECV_BUFFER_MAX; a frame over half of it gets its own.
_RECV_BUFFER = 16 << 10
_RECV_BUFFER_MAX = 256 << 10
_PAUSE_FRAMES = 64          # frames waiting for the reader task before the socket is paused
_RESUME_FRAMES = 8
_PAUSE_BYTES = 8 << 20      # ... or bytes of frames waiting (one frame larger than this is let through)
_RESUME_BYTES = 2 << 20
# A large frame's buffer beyond the receive-ahead budget: this size (or twice the bytes already there) at first,
# doubled whenever the socket has filled it
_GROW_FROM = 256 << 10


class ReceiveAhead:
    """A budget of frame buffers allocated at their full size before their bytes arrived (the sizes of those
    still being filled), shared by the connections of one event loop (a server's). ``limit`` None: no limit."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> bool:
        if self.limit is not None and self.used + size > self.limit:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used -= size


def _detached(exc: BaseException) -> BaseException:
    """``exc`` as a new exception of its type, arguments and attributes (``copy.copy``), without traceback or
    context (which refer to the frames that raised it, the transport's, and through them back to the protocol)."""
    try:
        return copy.copy(exc)
    except Exception:   # a type whose constructor takes other arguments: the text is what the reader reports
        return ConnectionError(f"{type(exc).__name__}: {exc}")


class FrameProtocol(asyncio.BufferedProtocol):
    """Length-prefixed frames of one connection (see the module text). ``on_connected(transport, protocol)``
    is called from ``connection_made`` (a server's accept).

    ``ahead_limit``: the largest frame buffer allocated at its full size before its bytes arrived (None: up
    to ``max_frame``); ``shared``: the budget of all such buffers of a server's connections (None: no shared
    limit); ``write_buffer_high`` / ``write_buffer_low``: the transport's write buffer water marks (None:
    asyncio's)."""

    def __init__(self, max_frame: int, addr: str | None = None,
                 on_connected: Callable[[asyncio.Transport, FrameProtocol], None] | None = None, *,
                 ahead_limit: int | None = None, shared: ReceiveAhead | None = None,
                 write_buffer_high: int | None = None, write_buffer_low: int | None = None) -> None:
        self.max_frame = max_frame
        self.addr = addr
        self._on_connected = on_connected
        self.ahead_limit = ahead_limit
        self._shared = shared
        self._write_limits = (write_buffer_high, write_buffer_low)
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray(_RECV_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0          # first byte of _buf not yet cut into a frame
        self._end = 0            # end of the received bytes in _buf
        self._offered = 0        # size of the region of _buf last handed to the transport
        self._big: BodyBuffer | None = None   # a large frame's body (or whole frame), in place; may still grow
        self._big_view: memoryview | None = None
        self._big_got = 0
        self._big_need = 0        # its final size
        self._big_reserved = 0    # taken from the shared budget for it (given back when it is complete or lost)
        self._big_head: bytes | None = None  # the large frame's part before its body (None: whole frame)
        self._frames: collections.deque[Frame] = collections.deque()
        self._queued = 0          # bytes of the frames in _frames
        self._lost_partial = 0    # partial() when the unfinished frame's buffers were dropped
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None   # FrameError or the connection's error, after the frames
        self._eof = False
        self._reading_paused = False
        self._write_paused = False
        self._drain_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._lost = False
        self._closed: asyncio.Future[None] | None = None
        # A complete frame cut from the receive buffer while no frame waits in the queue is offered to this
        # first: it returns None when it has taken the frame (a client's response, completed at once), else
        # the frame, which is queued (Channel.take_responses).
        self.on_frame: Callable[[bytes], bytes | None] | None = None

    # --- asyncio protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (connection_made of a Protocol); not an isinstance check: uvloop's transports
        # (remoting/loop.py) implement asyncio.Transport's methods without deriving from it
        self.transport = stream = cast(asyncio.Transport, transport)
        high, low = self._write_limits
        if high is not None:
            stream.set_write_buffer_limits(high=high, low=low)
        self._closed = asyncio.get_running_loop().create_future()
        if self._on_connected is not None:
            self._on_connected(stream, self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big_view is not None:
            if self._big_got == len(self._big_view):   # bytes are coming and the buffer is full: it grows
                self._grow_big()
            return self._big_view[self._big_got:]
        if self._error is not None:   # after a bad frame nothing more is cut; what arrives is dropped
            self._start = self._end = 0
            return self._view
        if self._end == len(self._buf) or (self._start and len(self._buf) - self._end < 4096):
            # move the unfinished frame to the front (it is at most half the buffer: see _cut)
            pending = self._end - self._start
            self._view[:pending] = self._view[self._start:self._end]
            self._start, self._end = 0, pending
        self._offered = len(self._buf) - self._end
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        big = self._big
        if big is not None:
            self._big_got += nbytes
            if self._big_got == self._big_need:
                head, self._big, self._big_view, self._big_head = self._big_head, None, None, None
                self._release_reserved()
                self._deliver(big.data if head is None else (head, big))
            return
        if self._error is not None:
            return
        self._end += nbytes
        filled = nbytes == self._offered
        self._cut()
        if filled and len(self._buf) < _RECV_BUFFER_MAX and self._big is None:
            self._grow(min(len(self._buf) * 4, _RECV_BUFFER_MAX))

    def _grow_big(self) -> None:
        """Double the large frame's buffer (up to its final size), keeping what has arrived."""
        assert self._big is not None
        got = self._big_got
        big = np.empty(min(self._big_need, 2 * len(self._big)), dtype=np.uint8)
        big[:got] = self._big[:got]
        self._big, self._big_view = big, big.data

    def _start_big(self, need: int, got: int) -> BodyBuffer:
        """A buffer for a large frame part of ``need`` bytes of which ``got`` are here: its full size within
        the receive-ahead budgets, else one that grows as the bytes arrive."""
        ahead_limit = self.max_frame if self.ahead_limit is None else self.ahead_limit
        if need <= ahead_limit and (self._shared is None or self._shared.take(need)):
            self._big_reserved = need if self._shared is not None else 0
            size = need
        else:
            size = min(need, max(_GROW_FROM, 2 * got))
        self._big_need = need
        return np.empty(size, dtype=np.uint8)

    def _release_reserved(self) -> None:
        if self._big_reserved:
            assert self._shared is not None
            self._shared.give(self._big_reserved)
            self._big_reserved = 0

    def _grow(self, size: int) -> None:
        pending = self._end - self._start
        buf = bytearray(size)
        buf[:pending] = self._view[self._start:self._end]
        self._buf, self._view = buf, memoryview(buf)
        self._start, self._end = 0, pending

    def _cut(self) -> None:
        """Cut the complete frames out of the receive buffer; start a large frame's own buffer."""
        view, start, end = self._view, self._start, self._end
        while end - start >= 4:
            length = int.from_bytes(view[start:start + 4], "big", signed=True)
            if length < 4 or length + 4 > self.max_frame:
                what = (f"frame length {length} is less than the 4-byte header length field" if length < 4 else
                        f"frame of {length + 4} bytes exceeds the {self.max_frame}-byte limit")
                self._fail(FrameError(what, addr=self.addr))
                self._start = self._end = 0
                return
            if end - start - 4 >= length:
                frame = bytes(view[start + 4:start + 4 + length])
                if self.on_frame is None or self._frames or self._error is not None:
                    self._deliver(frame)
                elif (rest := self.on_frame(frame)) is not None:   # not taken at once: queued
                    self._deliver(rest)
                start += 4 + length
                continue
            if 4 + length > len(self._buf) // 2:   # a large frame: the rest goes straight to its own buffer
                have = end - start - 4
                head_len = None
                if have >= 4:   # serialize type and header length known
                    head_len = 4 + (int.from_bytes(view[start + 4:start + 8], "big") & 0xFFFFFF)
                    if head_len >= length or 4 + head_len > len(self._buf) // 2:
                        head_len = None   # no body, or a header too large to wait for: the frame whole
                    elif have < head_len:
                        break   # the header is still coming (small: it fits the receive buffer)
                elif 4 + 8 <= len(self._buf) // 2:
                    break       # wait for the header length
                if head_len is None:
                    big = self._start_big(length, have)
                    big.data[:have] = view[start + 4:end]
                    self._big_head, self._big_got = None, have
                else:
                    big = self._start_big(length - head_len, have - head_len)
                    self._big_head = bytes(view[start + 4:start + 4 + head_len])
                    self._big_got = have - head_len
                    big.data[:self._big_got] = view[start + 4 + head_len:end]
                self._big, self._big_view = big, big.data
                start = end = 0
            break
        if start == end:
            start = end = 0
        self._start, self._end = start, end

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False   # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        error = None if exc is None else _detached(exc)
        if error is not None and self._error is None:
            self._error = error
        self._eof = True
        self._drop_partial()
        self._wake()
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionResetError("connection lost") if error is None else _detached(error))
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _drop_partial(self) -> None:
        """Free what an unfinished frame holds: its buffer, its budget, the receive buffer (nothing is read
        any more; whole frames already queued stay for the reader)."""
        if not self._lost_partial:
            self._lost_partial = self.partial()   # still reported at end of stream (next_frame)
        self._release_reserved()
        self._big = self._big_view = self._big_head = None
        self._big_got = self._big_need = 0
        self._buf = bytearray()
        self._view = memoryview(self._buf)
        self._start = self._end = 0

    def discard(self) -> None:
        """The channel is closed: drop the queued frames too (the reader will not take them)."""
        self._drop_partial()
        self._frames.clear()
        self._queued = 0
        if self._error is None:
            self._error = ConnectionResetError("connection closed")
        self._wake()

    # --- the frame queue
    def _deliver(self, frame: Frame) -> None:
        self._frames.append(frame)
        self._queued += _frame_size(frame)
        if (len(self._frames) > _PAUSE_FRAMES or self._queued > _PAUSE_BYTES) and not self._reading_paused \
                and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        if self.transport is not None and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def partial(self) -> int:
        """Bytes received of a frame that has not arrived whole."""
        if self._lost_partial:
            return self._lost_partial
        if self._big is None:
            return self._end - self._start
        return 4 + self._big_got + (len(self._big_head) if self._big_head is not None else 0)

    async def next_frame(self) -> Frame:
        """The next frame: the bytes after its length prefix, or for a large frame ``(the bytes after the
        length prefix up to the body, the body)``. After the last whole frame: the bad frame's
        FrameError, the connection's error, or IncompleteReadError at end of stream (``partial`` holding
        the bytes of an unfinished frame)."""
        while not self._frames:
            if self._error is not None:
                # a copy: the one raised gets a traceback holding this frame (and self) while it is handled
                raise _detached(self._error)
            if self._eof:
                raise asyncio.IncompleteReadError(b"\0" * self.partial(), None)
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        frame = self._frames.popleft()
        self._queued -= _frame_size(frame)
        if self._reading_paused and self._error is None and len(self._frames) <= _RESUME_FRAMES \
                and self._queued <= _RESUME_BYTES \
                and self.transport is not None and not self._lost:
            self._reading_paused = False
            self.transport.resume_reading()
        return frame

    # --- the write side
    def write_blocked(self) -> bool:
        """Whether :meth:`drain` would not return at once (the write buffer is above its high water mark, or
        the connection is lost: drain raises)."""
        return self._write_paused or self._lost

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high water mark."""
        if self._lost:
            raise ConnectionResetError("connection lost")
        if not self._write_paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        try:
            await waiter
        finally:
            self._drain_waiters.remove(waiter)

    async def wait_closed(self) -> None:
        if self._closed is not None:
            await asyncio.shield(self._closed)


def _frame_size(frame: Frame) -> int:
    return len(frame[1]) + len(frame[0]) if isinstance(frame, tuple) else len(frame)
