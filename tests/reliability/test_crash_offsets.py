"""Item 2 — a process killed with SIGKILL while it commits consumer offsets in a loop.

After each kill: ``consumerOffset.json`` parses by itself and holds either the last acknowledged
table or the one being written (never a mix: all queues of a group carry the same commit number);
``consumerOffset.json.bak``, when present, parses too and holds an older whole table (a torn or empty
``.bak`` is a failure: RELIABILITY.md item 2); the manager reads the same table; and the next commit
succeeds and reads back (the dead process's lock died with it). This is the one kill campaign for
offset files: 8 kills in the default run, 80 with ``-m slow``.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from reliutil import Figures, spawn
from rocketstream.errors import OffsetFileError
from rocketstream.store.meta.offsets import ConsumerOffsetManager, load_consumer_offsets


def _last_ack(ack_file: Path) -> int:
    lines = ack_file.read_bytes().split() if ack_file.exists() else []
    return int(lines[-1]) if lines else 0


def _whole(table: dict, where: str) -> tuple[int, list[str]]:
    """Commit number of a table, and problems if it is not one whole commit."""
    g = table.get("T@g", {})
    values = set(g.values())
    if set(g) != set(range(8)) or len(values) != 1:
        return -1, [f"{where}: group g is not one commit: {g}"]
    v = values.pop()
    h = table.get("T@h", {})
    want_h = v - v % 3
    if (want_h and h != {q: want_h for q in range(4)}) or (not want_h and h):
        return v, [f"{where}: group h is {h}, commit {v} implies {want_h}"]
    return v, []


def _check(root: Path, floor: int) -> tuple[int, list[str]]:
    """``floor``: the commit found after the previous kill (the next process continues from it, and
    its own first commit may be in flight unacknowledged)."""
    manager = ConsumerOffsetManager(root)
    acked = max(_last_ack(root / "acks"), floor)
    problems = []
    try:
        main = load_consumer_offsets(manager.path.read_bytes(), path=manager.path)
    except (OffsetFileError, FileNotFoundError) as exc:
        return floor, [f"main file does not parse: {exc}"]
    v, bad = _whole(main, "main")
    problems += bad
    if v not in (acked, acked + 1):
        problems.append(f"main holds commit {v}; acknowledged {acked} (in flight at most {acked + 1})")
    if manager.bak_path.exists():
        try:
            bak = load_consumer_offsets(manager.bak_path.read_bytes(), path=manager.bak_path)
            vb, bad = _whole(bak, ".bak")
            problems += bad
            if vb > v:
                problems.append(f".bak holds commit {vb}, newer than the main file's {v}")
        except OffsetFileError as exc:
            problems.append(f".bak does not parse: {exc}")
    if manager.table() != main:
        problems.append("ConsumerOffsetManager.table() differs from the main file")
    return max(v, floor), problems


def campaign(base: Path, trials: int, seed: int = 1) -> Figures:
    figures = Figures("2 crash during offset persist")
    rnd = random.Random(seed)
    root = base / "s"
    (root / "config").mkdir(parents=True)
    floor = 0
    for trial in range(trials):
        child = spawn("offset_committer.py", root, root / "acks")
        assert child.stdout.readline() == b"ready\n", child.stderr.read().decode()
        time.sleep(rnd.uniform(0.0, 0.25))
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
        figures.trials += 1
        floor, problems = _check(root, floor)
        for p in problems:
            figures.fail(f"trial {trial}: {p}")
        try:   # the next commit works and reads back: nothing left locked or half-renamed
            ConsumerOffsetManager(root).commit("probe", "T", {0: trial})
            if (got := ConsumerOffsetManager(root).query_offset("probe", "T", 0)) != trial:
                figures.fail(f"trial {trial}: committed {trial} after the kill, read back {got}")
        except Exception as exc:  # noqa: BLE001 - any failure is a finding
            figures.fail(f"trial {trial}: commit after the kill failed: {exc!r}")
    figures.extra["commits_acknowledged"] = _last_ack(root / "acks")
    return figures.report()


def test_crash_during_offset_persist_short(tmp_path: Path) -> None:
    figures = campaign(tmp_path, trials=8)
    assert not figures.failures, figures.failures


@pytest.mark.slow
def test_crash_during_offset_persist_campaign(tmp_path: Path) -> None:
    figures = campaign(tmp_path, trials=80, seed=77)
    assert not figures.failures, figures.failures


def test_backup_is_never_written_in_place(tmp_path: Path, monkeypatch) -> None:
    """Regression (campaign found 12 of 80 kills leaving an empty or torn .bak): a crash while the
    backup is being written must leave the previous .bak whole. The backup goes through
    ``fsutil.write_atomic``, which writes ``<path>.tmp`` with ``write_synced_tmp``: that write is torn."""
    import rocketstream.fsutil as fsutil

    m = ConsumerOffsetManager(tmp_path)
    for i in (1, 2):
        m.commit("g", "T", {0: i})
    real_write = fsutil.write_synced_tmp

    def dying_write(path: Path, data: bytes) -> Path:
        if ".bak" in path.name:
            real_write(path, data[: len(data) // 2])   # torn copy, then the "kill"
            raise SystemExit("killed")
        return real_write(path, data)

    monkeypatch.setattr(fsutil, "write_synced_tmp", dying_write)
    with pytest.raises(SystemExit):
        m.commit("g", "T", {0: 3})
    assert load_consumer_offsets(m.bak_path.read_bytes()) == {"T@g": {0: 1}}
    assert m.table() == {"T@g": {0: 2}}
