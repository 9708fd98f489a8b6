"""remoting/blocking.py's BlockingPool (a producer's sync sends from user threads): answers matched by opaque, a
late answer never taken for the next request's, timeouts and closes naming the address, connections reused,
and none left open after close(). Against a scripted peer on 127.0.0.1 (a thread per connection)."""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Callable

import pytest

from rocketstream.errors import FrameError, RemotingConnectError, RemotingTimeoutError
from rocketstream.remoting import RemotingCommand, decode_frame, encode_frame, next_opaque
from rocketstream.remoting.blocking import BlockingPool

# what the peer does with a request: frames to write back, each after a delay (seconds); None closes the connection
Script = Callable[[RemotingCommand], list[tuple[float, bytes | None]]]


def answer(req: RemotingCommand, *, opaque: int | None = None, remark: str | None = None) -> bytes:
    resp = req.response(0, remark if remark is not None else req.field("n", required=False))
    resp.opaque = req.opaque if opaque is None else opaque
    resp.flag |= 1
    return encode_frame(resp)


class Peer:
    """A listening socket; each connection is served by a thread that runs ``script`` per request frame."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self.requests: list[RemotingCommand] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # as the broker's (Netty's) channels
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        try:
            while True:
                while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                n = struct.unpack(">i", buf[:4])[0]
                req = decode_frame(buf[4:4 + n])
                buf = buf[4 + n:]
                self.requests.append(req)
                for delay, frame in self.script(req):
                    if delay:
                        time.sleep(delay)
                    if frame is None:
                        conn.shutdown(socket.SHUT_RDWR)
                        return
                    conn.sendall(frame)
        except OSError:
            return

    def drop_connections(self) -> None:
        """Close every accepted connection (shut down first: a serving thread is blocked in recv on it)."""
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass   # already gone
            c.close()

    def close(self) -> None:
        self._stop = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)   # wakes the accepting thread
        except OSError:
            pass   # not connected: Linux still ends the accept
        self.listener.close()
        self.drop_connections()


@pytest.fixture
def peer_factory():
    made: list[Peer] = []

    def make(script: Script) -> Peer:
        made.append(Peer(script))
        return made[-1]
    yield make
    for p in made:
        p.close()


def request(n: str) -> tuple[int, bytes]:
    req = RemotingCommand.request(1000, {"n": n})
    req.opaque = next_opaque()
    return req.opaque, encode_frame(req)


def established_to(addr: str) -> int:
    """This host's TCP connections to ``addr`` (a peer's listening address) still open at our end: the kernel's
    table (/proc/net/tcp), not this process's descriptor count, which the session's background starters
    (tests/conftest.py Background) change while a test runs. A socket left open by a leaked or dup'ed
    descriptor stays ESTABLISHED; one closed by us goes to FIN_WAIT at once (the peer's end to CLOSE_WAIT)."""
    port = int(addr.rsplit(":", 1)[1])
    count = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            cols = line.split()
            remote_port, state = int(cols[2].rsplit(":", 1)[1], 16), cols[3]
            count += remote_port == port and state == "01"   # ESTABLISHED
    return count


def test_answers_by_opaque_connections_reused_and_closed(peer_factory):
    # a stray answer (another opaque) before the real one is dropped, as processResponseCommand drops it
    peer = peer_factory(lambda req: [(0, answer(req, opaque=req.opaque + 1000, remark="stray")), (0, answer(req))])
    pool = BlockingPool()
    for i in range(5):
        opaque, frame = request(f"r{i}")
        resp = pool.invoke(peer.addr, opaque, frame, 5.0, 1000)
        assert resp.is_response and resp.opaque == opaque and resp.remark == f"r{i}"
    assert pool.open_count(peer.addr) == 1 and len(peer.conns) == 1   # one thread at a time: one connection

    # threads at once: a connection each, every answer its own request's
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def worker(k: int) -> None:
        try:
            start.wait()
            for i in range(20):
                opaque, frame = request(f"{k}/{i}")
                resp = pool.invoke(peer.addr, opaque, frame, 5.0, 1000)
                assert resp.opaque == opaque and resp.remark == f"{k}/{i}"
        except BaseException as exc:
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert 1 <= pool.open_count() <= 4
    assert established_to(peer.addr) == pool.open_count()
    pool.close()
    assert pool.open_count() == 0 and established_to(peer.addr) == 0   # every connection closed at our end
    with pytest.raises(RemotingConnectError, match="shut down") as ei:
        pool.invoke(peer.addr, *request("after"), 5.0, 1000)
    assert ei.value.addr == peer.addr


def test_a_late_answer_is_never_the_next_requests(peer_factory):
    """The first request's answer comes after its timeout: RemotingTimeoutError naming the address, and its
    connection is closed, so the late answer cannot be read as the second request's (same remark, other
    opaque: a reused connection would hand it over if the opaque were not checked)."""
    def script(req: RemotingCommand) -> list[tuple[float, bytes | None]]:
        return [(0.6, answer(req, remark="late"))] if req.field("n") == "slow" else [(0, answer(req))]
    peer = peer_factory(script)
    pool = BlockingPool()
    try:
        opaque, frame = request("slow")
        t0 = time.monotonic()
        with pytest.raises(RemotingTimeoutError) as ei:
            pool.invoke(peer.addr, opaque, frame, 0.2, 1000)
        assert time.monotonic() - t0 >= 0.19   # (the raise itself shows it did not wait for the answer at 0.6 s)
        assert ei.value.addr == peer.addr and str(opaque) in str(ei.value)
        assert pool.open_count() == 0   # discarded, not pooled
        opaque2, frame2 = request("fast")
        resp = pool.invoke(peer.addr, opaque2, frame2, 5.0, 1000)
        assert resp.opaque == opaque2 and resp.remark == "fast"
        assert len(peer.conns) == 2
    finally:
        pool.close()


def test_peer_close_and_shutdown_while_waiting(peer_factory):
    peer = peer_factory(lambda req: [] if req.field("n") == "never" else [(0, answer(req))])
    pool = BlockingPool()
    # a thread waiting for an answer that never comes is woken by close(), with the address
    caught: list[BaseException] = []

    def waiter() -> None:
        try:
            pool.invoke(peer.addr, *request("never"), 30.0, 1000)
        except BaseException as exc:
            caught.append(exc)
    t = threading.Thread(target=waiter)
    t.start()
    deadline = time.monotonic() + 10
    while not peer.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert peer.requests, "the request never reached the peer"
    pool.close()
    t.join(10)
    assert not t.is_alive()
    assert len(caught) == 1 and isinstance(caught[0], RemotingConnectError) and caught[0].addr == peer.addr
    assert pool.open_count() == 0 and established_to(peer.addr) == 0

    # the peer closes the connection: RemotingConnectError, the connection dropped
    pool2 = BlockingPool()
    peer2 = peer_factory(lambda req: [(0, b"\x00\x00"), (0, None)])   # half a length prefix, then the peer goes away
    opaque, frame = request("x")
    with pytest.raises(RemotingConnectError, match="peer closed") as ei:
        pool2.invoke(peer2.addr, opaque, frame, 5.0, 1000)
    assert ei.value.addr == peer2.addr and pool2.open_count() == 0
    # nobody listening
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{unused.getsockname()[1]}"
    with pytest.raises(RemotingConnectError) as ei2:
        pool2.invoke(addr, *request("y"), 2.0, 1000)
    assert ei2.value.addr == addr and pool2.open_count() == 0
    pool2.close()


def test_an_idle_connection_closed_by_the_peer_is_not_reused(peer_factory, monkeypatch):
    peer = peer_factory(lambda req: [(0, answer(req))])
    pool = BlockingPool()
    try:
        pool.invoke(peer.addr, *request("a"), 5.0, 1000)
        assert pool.open_count() == 1
        peer.drop_connections()   # the broker closes an idle channel (serverChannelMaxIdleTimeSeconds)
        monkeypatch.setattr("rocketstream.remoting.blocking.IDLE_CHECK_S", 0.0)
        (idle, _), = pool._idle[peer.addr]
        poller = select.poll()
        poller.register(idle, select.POLLIN)
        assert poller.poll(10_000), "the peer's close never reached the idle connection"
        opaque, frame = request("b")
        resp = pool.invoke(peer.addr, opaque, frame, 5.0, 1000)   # a new connection, no error
        assert resp.opaque == opaque and len(peer.conns) == 2 and pool.open_count() == 1
    finally:
        pool.close()


def test_at_most_max_per_addr_connections(peer_factory):
    """Threads beyond the cap get None (the caller sends over the event loop's connection instead): the
    pool never opens more than ``max_per_addr`` connections to one address."""
    release = threading.Event()

    def script(req: RemotingCommand) -> list[tuple[float, bytes | None]]:
        if req.field("n") == "hold":
            release.wait(10)
        return [(0, answer(req))]
    peer = peer_factory(script)
    pool = BlockingPool(max_per_addr=2)
    out: list[object] = []
    held = [threading.Thread(target=lambda: out.append(pool.invoke(peer.addr, *request("hold"), 10.0, 1000)))
            for _ in range(2)]
    try:
        for t in held:
            t.start()
        deadline = time.monotonic() + 10
        while len(peer.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.open_count(peer.addr) == 2
        assert pool.invoke(peer.addr, *request("third"), 5.0, 1000) is None   # nothing written
        assert len(peer.requests) == 2
        release.set()
        for t in held:
            t.join(10)
        assert len(out) == 2 and all(isinstance(r, RemotingCommand) for r in out)
        opaque, frame = request("after")
        resp = pool.invoke(peer.addr, opaque, frame, 5.0, 1000)   # an idle one again
        assert resp is not None and resp.opaque == opaque and pool.open_count(peer.addr) == 2
    finally:
        release.set()
        pool.close()
    assert pool.open_count() == 0


def test_an_answer_in_small_pieces_and_a_frame_over_the_limit(peer_factory):
    """A 3 MiB answer arriving 1,000 bytes at a time is read whole (appended in place, not re-copied per piece);
    a frame whose length is over max_frame is refused, naming the address, before its body is read."""
    def pieces(req: RemotingCommand) -> list[tuple[float, bytes | None]]:
        resp = req.response(0, None)
        resp.flag |= 1
        resp.body = bytes(range(256)) * (3 * 4096)
        frame = encode_frame(resp)
        return [(0.0005 if i % 512 == 0 else 0, frame[i:i + 1000]) for i in range(0, len(frame), 1000)]
    peer = peer_factory(pieces)
    pool = BlockingPool()
    try:
        opaque, frame = request("big")
        resp = pool.invoke(peer.addr, opaque, frame, 30.0, 1000)
        assert resp.opaque == opaque and resp.body == bytes(range(256)) * (3 * 4096)
    finally:
        pool.close()
    small = BlockingPool(max_frame=1 << 20)
    try:
        with pytest.raises(FrameError, match=r"exceeds the 1048576-byte limit.*" + peer.addr.replace(".", r"\.")):
            small.invoke(peer.addr, *request("too big"), 30.0, 1000)
        assert small.open_count() == 0   # the connection is not kept
    finally:
        small.close()
