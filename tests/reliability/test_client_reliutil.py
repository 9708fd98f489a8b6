"""The checker of the client kill campaign (client_reliutil.analyse) on made-up member logs: it must flag what a
wrong consumer would do (a lost message, a duplicate outside the uncommitted window, a skipped or reordered
sequence number, two members in one queue at once) and accept what a right one does."""

from __future__ import annotations

from pathlib import Path

from tests.reliability.client_reliutil import Member, analyse


def member(tmp: Path, name: str, lines: list[str], killed_at: float | None = None) -> Member:
    out = tmp / f"{name}.log"
    out.write_text("".join(line + "\n" for line in lines))
    m = Member(name, proc=None, out=out)   # type: ignore[arg-type]
    m.killed_at = killed_at
    return m


def got(t: float, q: int, seq: int, reconsume: int = 0) -> str:
    return f"GOT {t:.3f} {q} {seq} {q} {seq} {reconsume}"


def test_a_clean_handoff_passes(tmp_path: Path) -> None:
    # m0 owned q0, consumed 0..4, killed at t=10 (its last 2 within the window); m1 re-reads 3..6
    m0 = member(tmp_path, "m0", ["ALLOC 1.0 0", *(got(5 + s, 0, s) for s in range(5))], killed_at=10.0)
    m1 = member(tmp_path, "m1", ["ALLOC 1.0 1", "ALLOC 11.0 0,1", *(got(12 + s, 0, s) for s in range(3, 7))])
    acked = {(0, s): s for s in range(7)}
    a = analyse([m0, m1], acked, killed=m0, orderly=True)
    assert a.consumed_all and not a.order_violations and not a.dup_other, a
    assert a.duplicates == 2 and a.dup_killed_window == 2
    assert a.takeover_s == {0: 1.0}


def test_a_lost_message_is_reported(tmp_path: Path) -> None:
    m0 = member(tmp_path, "m0", ["ALLOC 1.0 0", got(2, 0, 0), got(3, 0, 2)])
    a = analyse([m0], {(0, 0): 0, (0, 1): 1, (0, 2): 2}, killed=None, orderly=False)
    assert not a.consumed_all and a.missing == [(0, 1)]


def test_an_old_duplicate_is_not_excused(tmp_path: Path) -> None:
    # seq 0 first consumed 30 s before the kill: outside the 7 s window
    m0 = member(tmp_path, "m0", ["ALLOC 1.0 0", got(10, 0, 0), got(11, 0, 1)], killed_at=40.0)
    m1 = member(tmp_path, "m1", ["ALLOC 1.0 1", "ALLOC 41.0 0,1", got(42, 0, 0), got(43, 0, 1)])
    a = analyse([m0, m1], {(0, 0): 0, (0, 1): 1}, killed=m0, orderly=False)
    assert a.duplicates == 2 and a.dup_killed_window == 0 and a.dup_handoff == 2
    # the same repeated by the one member is neither: reported
    m2 = member(tmp_path, "m2", ["ALLOC 1.0 0", got(10, 0, 0), got(20, 0, 0)])
    a = analyse([m2], {(0, 0): 0}, killed=None, orderly=False)
    assert a.dup_other


def test_orderly_violations_are_reported(tmp_path: Path) -> None:
    skip = member(tmp_path, "m0", ["ALLOC 1.0 0", got(2, 0, 0), got(3, 0, 2), got(4, 0, 1)])
    a = analyse([skip], {(0, s): s for s in range(3)}, killed=None, orderly=True)
    assert any("jumped" in v for v in a.order_violations) and any("went back" in v for v in a.order_violations)
    # two members alternating inside one queue
    ma = member(tmp_path, "ma", ["ALLOC 1.0 0", got(2, 0, 0), got(4, 0, 2)])
    mb = member(tmp_path, "mb", ["ALLOC 1.0 0", got(3, 0, 1), got(5, 0, 3)])
    a = analyse([ma, mb], {(0, s): s for s in range(4)}, killed=None, orderly=True)
    assert any("alternate" in v for v in a.order_violations), a.order_violations
    # a handoff that skips a sequence number
    mc = member(tmp_path, "mc", ["ALLOC 1.0 0", got(2, 0, 0)], killed_at=3.0)
    md = member(tmp_path, "md", ["ALLOC 4.0 0", got(5, 0, 2)])
    a = analyse([mc, md], {(0, 0): 0, (0, 2): 2}, killed=mc, orderly=True)
    assert any("skipped" in v for v in a.order_violations), a.order_violations
