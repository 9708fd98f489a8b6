"""Shared pieces of the client reliability campaigns (test_client_kill.py, test_client_restart.py).

* :class:`Member`: one tests/reliability/client_consumer.py process (our PushConsumer) and its log;
* :class:`SeqProducer`: our Producer in a thread sending ``b"<queue>:<seq>:"`` bodies to queue ``k % queues``
  (a queue chosen by the sender, as an ordered producer's MessageQueueSelector does), recording every
  acknowledged send (queue, seq, SendResult queue offset);
* :func:`analyse`: at-least-once, duplicates and their cause, per-queue order, takeover times.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.realbroker import peers

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
REBALANCE_INTERVAL_S = 20.0      # RebalanceService.waitInterval
PERSIST_INTERVAL_S = 5.0         # persistConsumerOffsetInterval
LOCK_MAX_LIVE_S = 60.0           # broker: rocketmq.broker.rebalance.lockMaxLiveTime (both brokers)


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


@dataclass
class Got:
    t: float
    queue: int
    offset: int
    seq: int
    reconsume: int
    member: str


@dataclass
class Member:
    name: str
    proc: subprocess.Popen
    out: Path
    killed_at: float | None = None

    @classmethod
    def start(cls, name: str, namesrv: str, topic: str, group: str, home: Path, *, orderly: bool,
              work_ms: float = 0) -> Member:
        out = home / f"{name}.log"
        argv = [sys.executable, str(HERE / "client_consumer.py"), namesrv, topic, group, str(out),
                "--work-ms", str(work_ms)] + (["--orderly"] if orderly else [])
        proc = peers._spawn(argv, env(), home / f"{name}.stderr")
        return cls(name, proc, out)

    def lines(self, tag: str) -> list[list[str]]:
        if not self.out.exists():
            return []
        return [ln.split() for ln in self.out.read_text(errors="replace").splitlines()
                if ln.startswith(tag + " ")]

    def got(self) -> list[Got]:
        out = []
        for p in self.lines("GOT"):
            if len(p) == 7:
                out.append(Got(float(p[1]), int(p[2]), int(p[3]), int(p[5]), int(p[6]), self.name))
        return out

    def allocs(self) -> list[tuple[float, set[int]]]:
        return [(float(p[1]), set(map(int, p[2].split(","))) if len(p) > 2 and p[2] else set())
                for p in self.lines("ALLOC")]

    def alloc(self) -> set[int] | None:
        a = self.allocs()
        return a[-1][1] if a else None

    def kill(self) -> None:
        self.killed_at = time.time()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        peers._forget(self.proc)

    def stop(self, timeout: float = 30) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        peers._forget(self.proc)
        return self.proc.returncode

    def stderr_tail(self, n: int = 30) -> str:
        return peers._tail(self.out.parent / f"{self.name}.stderr", n)


def wait_stable(members: list[Member], queues: int, timeout: float = 60) -> float:
    """Wait until the members' allocations are disjoint, non-empty and cover every queue; the seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        allocs = [m.alloc() for m in members]
        if all(a for a in allocs):
            union = set().union(*allocs)
            if len(union) == queues and sum(len(a) for a in allocs) == queues:
                return time.monotonic() - t0
        for m in members:
            if m.proc.poll() is not None:
                raise AssertionError(f"{m.name} exited {m.proc.returncode}:\n{m.stderr_tail()}")
        time.sleep(0.1)
    raise AssertionError(f"no stable allocation after {timeout} s: {[(m.name, m.alloc()) for m in members]}\n"
                         + "\n".join(m.stderr_tail(10) for m in members))


def body(queue: int, seq: int) -> bytes:
    return b"%d:%d:" % (queue, seq) + b"x" * 100


class SeqProducer(threading.Thread):
    """Our Producer sending ``count`` messages round-robin over ``queues`` queues at ``rate`` msgs/s."""

    def __init__(self, api, namesrv: str, topic: str, queues: int, count: int, rate: float,
                 broker_name: str | None = None, stop_on_error: bool = False) -> None:
        super().__init__(daemon=True)
        self.api, self.namesrv, self.topic, self.queues = api, namesrv, topic, queues
        self.count, self.rate, self.broker_name = count, rate, broker_name
        self.acked: dict[tuple[int, int], int] = {}     # (queue, seq) -> queue offset
        self.errors: list[str] = []
        self.sent = 0
        self.stop_flag = threading.Event()

    def run(self) -> None:
        p = self.api.Producer(f"{self.topic}_producer", namesrv=self.namesrv)
        p.start()
        try:
            t0 = time.monotonic()
            for k in range(self.count):
                if self.stop_flag.is_set():
                    break
                q, s = k % self.queues, k // self.queues
                try:
                    r = send_to_queue(self.api, p, self.topic, q, body(q, s))
                    if r.status.name == "SEND_OK":
                        self.acked[(q, s)] = r.queue_offset
                    else:
                        self.errors.append(f"{q}:{s} {r.status}")
                except Exception as exc:   # recorded; the campaigns count unacknowledged sends as not sent
                    self.errors.append(f"{q}:{s} {type(exc).__name__}: {exc}")
                    time.sleep(0.1)
                self.sent = k + 1
                delay = t0 + (k + 1) / self.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        finally:
            p.shutdown()


def send_to_queue(api, producer, topic: str, queue_id: int, data: bytes):
    """A send to one queue chosen by the sender (an ordered send with a MessageQueueSelector)."""
    def selector(mqs, msg=None, arg=None):
        return sorted(mqs, key=lambda mq: mq.queue_id)[queue_id % len(mqs)]
    if hasattr(producer, "send_orderly"):
        return producer.send_orderly(topic, data, selector=selector, arg=queue_id)
    return producer.send(topic, data, selector=selector, arg=queue_id)


@dataclass
class Analysis:
    consumed_all: bool
    missing: list[tuple[int, int]]
    deliveries: int
    unique: int
    duplicates: int
    dup_killed_window: int
    dup_handoff: int
    dup_other: list[str]
    order_violations: list[str]
    takeover_s: dict[int, float | None]
    extra: dict = field(default_factory=dict)


def analyse(members: list[Member], acked: dict[tuple[int, int], int], *, killed: Member | None, orderly: bool,
            window_s: float = PERSIST_INTERVAL_S + 2.0) -> Analysis:
    gots = [g for m in members for g in m.got()]
    by_key: dict[tuple[int, int], list[Got]] = defaultdict(list)
    for g in sorted(gots, key=lambda g: g.t):
        by_key[(g.queue, g.seq)].append(g)
    missing = sorted(set(acked) - set(by_key))
    dups = {k: v for k, v in by_key.items() if len(v) > 1}
    killed_window = handoff = 0
    other: list[str] = []
    killed_queues: set[int] = set()
    if killed is not None:
        before = [a for t, a in killed.allocs() if t <= (killed.killed_at or 0)]
        killed_queues = before[-1] if before else set()
    for k, v in dups.items():
        first = v[0]
        if killed is not None and first.member == killed.name and killed.killed_at is not None \
                and killed.killed_at - window_s <= first.t <= killed.killed_at:
            killed_window += len(v) - 1
        elif any(a.member != first.member for a in v[1:]):
            handoff += len(v) - 1     # a queue that moved between live members (rebalance drops its ProcessQueue)
        else:
            other.append(f"q{k[0]} seq {k[1]}: {[(g.member, round(g.t, 3), g.reconsume) for g in v]}")
    violations: list[str] = []
    if orderly:
        per_queue: dict[int, list[Got]] = defaultdict(list)
        for g in sorted(gots, key=lambda g: g.t):
            per_queue[g.queue].append(g)
        for q, seq in per_queue.items():
            prev: Got | None = None
            for g in seq:
                if prev is not None:
                    if g.member == prev.member and g.seq != prev.seq + 1 and g.seq > prev.seq:
                        violations.append(f"q{q}: {g.member} jumped {prev.seq} -> {g.seq}")
                    elif g.member == prev.member and g.seq <= prev.seq and g.reconsume == 0:
                        violations.append(f"q{q}: {g.member} went back {prev.seq} -> {g.seq}")
                    elif g.member != prev.member:
                        if g.seq > prev.seq + 1:
                            violations.append(f"q{q}: handoff {prev.member}->{g.member} skipped {prev.seq} -> {g.seq}")
                prev = g
            # two members inside the same queue at once: their delivery spans must not interleave
            spans: dict[str, tuple[float, float]] = {}
            for g in seq:
                lo, hi = spans.get(g.member, (g.t, g.t))
                spans[g.member] = (min(lo, g.t), max(hi, g.t))
            runs = [(g.member, g.t) for g in seq]
            switches = sum(1 for a, b in zip(runs, runs[1:], strict=False) if a[0] != b[0])
            if switches > len(spans) - 1:
                violations.append(f"q{q}: deliveries alternate between members {list(spans)} ({switches} switches)")
    takeover: dict[int, float | None] = {}
    if killed is not None and killed.killed_at is not None:
        for q in sorted(killed_queues):
            ts = [t for m in members if m is not killed for t, a in m.allocs() if t > killed.killed_at and q in a]
            takeover[q] = round(min(ts) - killed.killed_at, 2) if ts else None
    return Analysis(not missing, missing[:20], len(gots), len(by_key), sum(len(v) - 1 for v in dups.values()),
                    killed_window, handoff, other[:20], violations[:20], takeover,
                    {"killed_queues": sorted(killed_queues)})


def consumed_keys(members: list[Member]) -> set[tuple[int, int]]:
    return {(g.queue, g.seq) for m in members for g in m.got()}


def wait_consumed(members: list[Member], acked: dict, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if set(acked) <= consumed_keys(members):
            return time.monotonic() - t0
        time.sleep(0.25)
    return -1.0


def dup_counter(members: list[Member]) -> Counter:
    return Counter((g.queue, g.seq) for m in members for g in m.got())
