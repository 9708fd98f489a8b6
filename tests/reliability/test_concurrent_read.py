"""Item 3 — reader processes follow every queue through read-only stores (one with ``read_range``,
one with ``get_message``) while a writer process appends singles and batches.

Each reader checks every row as it arrives: the expected queue offset, queue id and body (bodies
name their queue and sequence number, so a torn, partial, duplicated or reordered record cannot
pass), and BODYCRC. Each message must be seen exactly once, in order, per queue, and the totals must
match what the writer wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reliutil import Figures, concurrent_sizes, open_store, spawn

QUEUES = 4


def campaign(base: Path, messages: int, seed: int = 1, timeout: float = 600, pause_every: int = 0) -> Figures:
    figures = Figures("3 concurrent read while writing")
    root = base / "s"
    open_store(root, **concurrent_sizes(messages)).close()     # readers need an existing store
    readers = [spawn("concurrent_reader.py", root, QUEUES, mode, timeout) for mode in ("range", "get")]
    for reader in readers:    # both readers have the store open before the first put
        assert reader.stdout.readline() == b"ready\n", reader.stderr.read().decode()
    writer = spawn("concurrent_writer.py", root, messages, QUEUES, seed, pause_every)
    try:
        writer.wait(timeout)
        if writer.returncode != 0:
            raise AssertionError(f"writer failed: {writer.stderr.read().decode()[-2000:]}")
        totals = json.loads(Path(f"{root}.done").read_text())
        rows = 0
        for reader in readers:
            out, err = reader.communicate(timeout=timeout)
            if reader.returncode != 0:
                figures.fail(f"reader failed: {err.decode()[-2000:]}")
                continue
            result = json.loads(out.decode().splitlines()[-1])
            if result["polls"] < 20:
                figures.fail(f"{result['mode']}: only {result['polls']} polls overlapped the writer")
            for problem in result["bad"]:
                figures.fail(f"{result['mode']}: {problem}")
            if result["seen"] != totals:
                figures.fail(f"{result['mode']}: saw {result['seen']} messages per queue, writer wrote {totals}")
            rows += sum(result["seen"])
            figures.extra[f"{result['mode']}_polls"] = result["polls"]
    finally:
        for p in [writer, *readers]:
            if p.poll() is None:
                p.kill()
                p.wait()
    figures.trials = sum(totals)
    figures.extra.update(messages_written=sum(totals), rows_checked=rows, readers=len(readers))
    return figures.report()


def test_concurrent_read_while_writing_short(tmp_path: Path) -> None:
    figures = campaign(tmp_path, messages=20_000, pause_every=4)
    assert not figures.failures, figures.failures


@pytest.mark.slow
def test_concurrent_read_while_writing_campaign(tmp_path: Path) -> None:
    figures = campaign(tmp_path, messages=1_000_000, seed=99, timeout=1800)
    assert not figures.failures, figures.failures
