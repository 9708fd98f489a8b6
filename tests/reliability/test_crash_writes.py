"""Item 1 — a writer killed with SIGKILL at random moments (single and batch puts, SYNC_FLUSH and
ASYNC_FLUSH, kills also landing in close() and in start-up recovery).

After each kill the store is reopened (recovery) and must hold every acknowledged message intact, in
order, at its queue offset; at most the one put in flight may appear beyond the acknowledged end;
``check()`` must find the consume queues in agreement with the commit log and every record's CRC
intact; and the next put must continue the queue and be readable.

SIGKILL is not power loss: the killed process's page-cache writes survive, so under ASYNC_FLUSH too
every acknowledged message must survive, and that is asserted. (What ASYNC_FLUSH may lose on power
loss is not testable this way.)
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from reliutil import TOPIC, Figures, body, message, open_store, spawn

QUEUES = 3
MAX_BATCH = 8


def _acked(ack_file: Path) -> list[int]:
    """Per queue: end (exclusive) of the acknowledged sequence numbers."""
    ends = [0] * QUEUES
    if ack_file.exists():
        for line in ack_file.read_bytes().splitlines():
            q, first, count = map(int, line.split())
            ends[q] = max(ends[q], first + count)
    return ends


def _kill_writer(root: Path, flush: str, ack_file: Path, rnd: random.Random) -> str:
    child = spawn("crash_writer.py", root, flush, ack_file, rnd.randrange(1 << 30), QUEUES)
    if rnd.random() < 0.2:       # kill early: during interpreter start-up, open() or recovery
        time.sleep(rnd.uniform(0.0, 0.6))
    else:
        assert child.stdout.readline() == b"ready\n", child.stderr.read().decode()
        time.sleep(rnd.uniform(0.0, 0.4))
    os.kill(child.pid, signal.SIGKILL)
    child.wait(30)
    if child.returncode != -signal.SIGKILL:
        return f"writer exited by itself ({child.returncode}): {child.stderr.read().decode()[-2000:]}"
    return ""


def _verify(root: Path, flush: str, acked: list[int], ack_file: Path) -> list[str]:
    problems = []
    with open_store(root, flush_disk_type=flush) as store:
        report = store.check()
        problems += [f"check: {p}" for p in report.problems[:5]]
        for q in range(QUEUES):
            n = store.max_offset(TOPIC, q)
            if n < acked[q]:
                problems.append(f"queue {q}: max offset {n} < acknowledged {acked[q]}")
            if n > acked[q] + MAX_BATCH:
                problems.append(f"queue {q}: max offset {n} is beyond the acknowledged {acked[q]} + one put")
            seen = 0
            for batch in store.read_range(TOPIC, q, 0, n, columns=["queueOffset", "body", "queueId"]):
                for qoff, data, qid in zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True):
                    if qoff != seen or qid != q or data != body(q, seen):
                        problems.append(f"queue {q} offset {seen}: row (queueOffset {qoff}, queueId {qid}, "
                                        f"body {data[:20]!r}...) is not the message put there")
                        break
                    seen += 1
            if seen != n:
                problems.append(f"queue {q}: read {seen} rows of {n}")
            r = store.put_message(message(q, n), q)                       # the next put continues the queue
            if r.ok:
                with open(ack_file, "ab") as f:
                    f.write(b"%d %d 1\n" % (q, r.queue_offset))
            if not r.ok or r.queue_offset != n:
                problems.append(f"queue {q}: next put gave {r.status} at queue offset {r.queue_offset}, wanted {n}")
            got = store.get_message("g", TOPIC, q, n, 1).messages
            if len(got) != 1 or got[0].uncompressed_body() != body(q, n):
                problems.append(f"queue {q}: the message put after recovery does not read back")
    return problems


def campaign(base: Path, trials: int, seed: int = 1) -> Figures:
    """``trials`` kills, alternating SYNC_FLUSH and ASYNC_FLUSH stores (each a chain of kills)."""
    figures = Figures("1 crash during writes")
    rnd = random.Random(seed)
    counts = {"SYNC_FLUSH": 0, "ASYNC_FLUSH": 0}
    for flush in counts:
        (base / flush).mkdir(parents=True)
        open_store(base / flush / "s", flush_disk_type=flush).close()
    for trial in range(trials):
        flush = "SYNC_FLUSH" if trial % 2 == 0 else "ASYNC_FLUSH"
        root, ack_file = base / flush / "s", base / flush / "acks"
        problem = _kill_writer(root, flush, ack_file, rnd)
        acked = _acked(ack_file)
        problems = ([problem] if problem else []) + _verify(root, flush, acked, ack_file)
        figures.trials += 1
        counts[flush] += 1
        for p in problems:
            figures.fail(f"trial {trial} ({flush}): {p}")
    figures.extra.update(sync_trials=counts["SYNC_FLUSH"], async_trials=counts["ASYNC_FLUSH"],
                         acknowledged_messages=sum(_acked(base / f / "acks")[q] for f in counts for q in range(QUEUES)))
    return figures.report()


def test_crash_during_writes_short(tmp_path: Path) -> None:
    figures = campaign(tmp_path, trials=6)
    assert not figures.failures, figures.failures


@pytest.mark.slow
def test_crash_during_writes_campaign(tmp_path: Path) -> None:
    figures = campaign(tmp_path, trials=60, seed=2024)
    assert not figures.failures, figures.failures
