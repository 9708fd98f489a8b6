"""Crash and damage recovery: cut tails at many byte positions, abort marker, lock, checkpoint."""

import os
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from rocketstream import codec
from rocketstream.errors import CorruptStoreError, StoreLockedError
from rocketstream.store import Message, MessageStore
from rocketstream.store.files.mapped_file import file_name
from storeutil import CL_SIZE, CQ_SIZE, open_small

TOPICS = [("A", 0), ("A", 1), ("B", 0)]


def build(root: Path) -> list[tuple[int, int, str, int, bytes]]:
    """A store spanning several files; returns (offset, size, topic, queue, body) per message."""
    rnd = random.Random(7)
    out = []
    with open_small(root) as st:
        for i in range(70):
            topic, q = TOPICS[i % 3]
            if i % 10 == 9:
                msgs = [Message(topic, b"batch%d-%d" % (i, k) + b"." * rnd.randrange(50)) for k in range(3)]
                r = st.put_messages(msgs, q)
                off = r.physical_offset
                for m in msgs:
                    size = st.look_message_by_offset(off).total_size
                    out.append((off, size, topic, q, m.body))
                    off += size
            else:
                body = b"m%d-" % i + b"#" * rnd.randrange(400)
                r = st.put_message(Message(topic, body, tags=f"t{i % 2}"), q)
                out.append((r.physical_offset, r.wrote_bytes, topic, q, body))
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("pristine") / "s"
    return root, build(root)


def cut(root: Path, at: int) -> None:
    """Zero the commit log from virtual offset ``at`` on and drop later files (a torn tail)."""
    cl = root / "commitlog"
    for name in sorted(os.listdir(cl)):
        start = int(name)
        if start >= at and at % CL_SIZE == 0 and start == at or start > at:
            os.unlink(cl / name)
        elif start <= at < start + CL_SIZE:
            with open(cl / name, "r+b") as f:
                f.seek(at - start)
                f.write(bytes(start + CL_SIZE - at))


def expected_after_cut(records, at):
    """Records that survive a cut at ``at``: those before it, and the one whose PROPERTIES bytes
    alone were zeroed — ``CommitLog.checkMessageAndReturnSize`` does not look at property bytes (no
    trailing-0x02 rule: real 4.9.1+ brokers write none), so recovery must keep that record."""
    kept = []
    for r in records:
        off, size, topic, _, body = r
        props_start = off + codec.record_size(len(body), len(topic), 0)
        if off + size <= at or props_start <= at < off + size:
            kept.append(r)
    return kept


def assert_store_holds(root, records, damaged_at: int | None = None):
    """``damaged_at``: offset of a kept record whose property bytes were zeroed; ``check`` may only
    report that record (its TAGS, hence its unit's tagsCode, may be gone), nothing else."""
    def assert_ok(report):
        others = [p for p in report.problems if f"offset {damaged_at}," not in p.message]
        assert not others, report.problems

    with MessageStore.open(root) as st:
        assert_ok(st.check())
        for topic, q in TOPICS:
            want = [r[4] for r in records if (r[2], r[3]) == (topic, q)]
            assert st.max_offset(topic, q) == len(want)
            got = []
            offset = 0
            while offset < len(want):
                res = st.get_message("g", topic, q, offset, 32)
                got += [m.body for m in res.messages]
                offset = res.next_begin_offset
            assert got == want
        # the store keeps working: the next message continues each queue
        r = st.put_message(Message("A", b"after"), 0)
        assert r.ok and r.queue_offset == len([x for x in records if x[2:4] == ("A", 0)])
    with MessageStore.open(root) as st:
        assert_ok(st.check())


def cut_points(records, stride: int = 4):
    """Cuts at the file edges, around every ``stride``-th record end (just before, at, just after, in the
    next header, in the next body) and at 15 random offsets."""
    ends = sorted({o + s for o, s, *_ in records})
    points = {0, CL_SIZE, 2 * CL_SIZE, CL_SIZE - 8, CL_SIZE + 1}
    for e in ends[::stride]:
        points |= {e - 1, e, e + 1, e + 4, e + 37}
    rnd = random.Random(1)
    points |= {rnd.randrange(ends[-1]) for _ in range(15)}
    return sorted(p for p in points if 0 <= p <= ends[-1])


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_tail_cut_at_many_byte_positions(scratch_path, pristine, abnormal):
    src, records = pristine
    # the abnormal recovery (abort marker) meets the same five cut shapes around every 8th record end rather
    # than every 4th: the shapes, not the records they fall on, are what differ between cuts
    points = cut_points(records, 8 if abnormal else 4)
    assert len(points) > 40
    for at in points:
        root = scratch_path / f"cut{at}"   # tmpfs when there is one: about 100 store opens and closes
        shutil.copytree(src, root)
        cut(root, at)
        if abnormal:
            (root / "abort").touch()
        try:
            kept = expected_after_cut(records, at)
            torn = [r[0] for r in kept if r[0] + r[1] > at]
            assert_store_holds(root, kept, damaged_at=torn[0] if torn else None)
        except AssertionError as exc:
            raise AssertionError(f"cut at {at}: {exc}") from exc
        shutil.rmtree(root)


def test_cut_tail_is_zeroed(tmp_path, pristine):
    src, records = pristine
    root = tmp_path / "s"
    shutil.copytree(src, root)
    off, size = records[5][:2]
    cut(root, off + size // 2)
    MessageStore.open(root).close()
    data = (root / "commitlog" / file_name(off - off % CL_SIZE)).read_bytes()
    assert data[off % CL_SIZE:] == bytes(CL_SIZE - off % CL_SIZE)


def test_flipped_byte_in_body_truncates_from_there(tmp_path, pristine):
    src, records = pristine
    root = tmp_path / "s"
    shutil.copytree(src, root)
    off, size = records[-4][:2]
    path = root / "commitlog" / file_name(off - off % CL_SIZE)
    data = bytearray(path.read_bytes())
    body = records[-4][4]
    assert len(body) > 2
    data[off % CL_SIZE + 88 + len(body) // 2] ^= 0xFF   # inside the body: BODYCRC breaks
    path.write_bytes(bytes(data))
    with MessageStore.open(root, read_only=True) as ro:
        assert not ro.check().ok
    assert_store_holds(root, [r for r in records if r[0] < off])


def test_crash_copy_recovers_abnormally(tmp_path):
    """A copy of a live store (abort present, checkpoint stale) is what kill -9 leaves behind."""
    live = tmp_path / "live"
    st = open_small(live)
    for i in range(40):
        st.put_message(Message("A", b"x%d" % i * 20), i % 2)
    assert (live / "abort").exists()
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)
    st.close()
    assert not (live / "abort").exists()
    # lose the consume queues entirely: abnormal recovery rebuilds them from the commit log
    shutil.rmtree(crashed / "consumequeue")
    with MessageStore.open(crashed) as st2:
        assert st2.max_offset("A", 0) == 20 and st2.max_offset("A", 1) == 20
        assert st2.check().ok
        assert st2.get_message("g", "A", 1, 19, 1).messages[0].body == b"x39" * 20


def test_abnormal_recovery_repairs_torn_consume_queue(tmp_path):
    live = tmp_path / "live"
    with open_small(live) as st:
        for i in range(45):
            st.put_message(Message("A", b"v%d" % i), 0)
    cq_dir = live / "consumequeue" / "A" / "0"
    last = sorted(os.listdir(cq_dir))[-1]
    with open(cq_dir / last, "r+b") as f:   # lose the last 2 units (and tear a third)
        f.seek(20 * ((45 % 16) - 3) + 7)
        f.write(bytes(60))
    (live / "abort").touch()
    with MessageStore.open(live) as st:
        assert st.max_offset("A", 0) == 45
        assert st.check().ok


def test_missing_consume_queues_rebuilt_on_normal_start(tmp_path):
    root = tmp_path / "s"
    with open_small(root) as st:
        for i in range(30):
            st.put_message(Message("A", b"v%d" % i), i % 3)
    shutil.rmtree(root / "consumequeue")
    with MessageStore.open(root) as st:
        assert [st.max_offset("A", q) for q in range(3)] == [10, 10, 10]
        assert st.check().ok


def test_abort_marker_lifecycle_and_checkpoint_layout(tmp_path):
    root = tmp_path / "s"
    st = open_small(root)
    assert (root / "abort").exists()
    r = st.put_message(Message("A", b"v"), 0)
    st.close()
    assert not (root / "abort").exists()
    raw = (root / "checkpoint").read_bytes()
    assert len(raw) == 4096
    physic, logics, index = struct.unpack_from(">qqq", raw, 0)
    assert physic == logics == r.store_timestamp and index == 0
    assert raw[24:] == bytes(4096 - 24)
    assert (root / "lock").read_bytes()[:4] == b"lock"


def test_second_writer_in_same_process_is_refused(tmp_path):
    root = tmp_path / "s"
    with open_small(root):
        with pytest.raises(StoreLockedError) as info:
            MessageStore.open(root)
        assert str(root / "lock") in str(info.value)
        with MessageStore.open(root, read_only=True) as ro:   # readers need no lock
            assert ro.max_offset("A", 0) == 0
    MessageStore.open(root).close()   # released on close


def test_second_writer_process_is_refused(tmp_path):
    root = tmp_path / "s"
    code = ("import sys\nfrom rocketstream.store import MessageStore\n"
            "from rocketstream.errors import StoreLockedError\n"
            "try:\n    MessageStore.open(sys.argv[1])\nexcept StoreLockedError as e:\n    print('LOCKED', e)\n")
    with open_small(root):
        out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60)
        assert out.stdout.startswith("LOCKED") and "lock" in out.stdout, out.stderr


def test_short_commit_log_file_is_corruption(tmp_path):
    root = tmp_path / "s"
    with open_small(root) as st:
        for _i in range(30):
            st.put_message(Message("A", b"y" * 200), 0)
    last = sorted(os.listdir(root / "commitlog"))[-1]
    os.truncate(root / "commitlog" / last, 1000)
    for ro in (False, True):
        with pytest.raises(CorruptStoreError) as info:
            MessageStore.open(root, read_only=ro)
        assert "length" in str(info.value)


def test_consume_queue_file_of_wrong_length_is_corruption(tmp_path):
    root = tmp_path / "s"
    with open_small(root) as st:
        st.put_message(Message("A", b"y"), 0)
    os.truncate(root / "consumequeue" / "A" / "0" / file_name(0), CQ_SIZE - 20)
    with pytest.raises(CorruptStoreError):
        MessageStore.open(root)


# ------------------------------------------- issue 10, finding 1: expired consume-queue units
def _store_with_expired_units(root: Path) -> dict:
    """A 'slow' queue R/0 whose two units point into the oldest commit-log file, then retention
    deletes that file — what every retry/DLQ/schedule queue of a real broker looks like."""
    with open_small(root) as st:
        for i in range(2):
            st.put_message(Message("R", b"slow%d" % i), 0)
        for i in range(60):
            st.put_message(Message("A", b"m%d-" % i + b"#" * 300), i % 2)
        assert len(os.listdir(root / "commitlog")) >= 4
        st.delete_expired_files(reserved_hours=0)   # keeps the last file only
        before = {
            "files": sorted(os.listdir(root / "commitlog")),
            "cl_max": st.commit_log_max_offset(),
            "max": {q: st.max_offset("A", q) for q in (0, 1)},
            "min": {q: st.min_offset("A", q) for q in (0, 1)},
            "bodies": {q: [m.body for m in st.get_message("g", "A", q, st.min_offset("A", q), 64).messages]
                       for q in (0, 1)},
        }
    assert before["bodies"][0] and (root / "consumequeue" / "R" / "0").is_dir()
    return before


def _assert_nothing_lost(root: Path, before: dict) -> None:
    with MessageStore.open(root) as st:
        assert sorted(os.listdir(root / "commitlog")) == before["files"]
        assert st.commit_log_max_offset() == before["cl_max"]
        for q in (0, 1):
            assert st.max_offset("A", q) == before["max"][q]
            got = [m.body for m in st.get_message("g", "A", q, st.min_offset("A", q), 64).messages]
            assert got == before["bodies"][q]
        # the slow queue keeps its position (expired, not damaged) and continues after it
        assert st.max_offset("R", 0) == 2 and st.min_offset("R", 0) == 2
        r = st.put_message(Message("R", b"later"), 0)
        assert r.ok and r.queue_offset == 2
        assert st.check().ok, st.check().problems


@pytest.mark.parametrize("abnormal", [False, True], ids=["clean", "abort"])
def test_expired_units_are_not_damage(tmp_path, abnormal):
    """Finding 1 of issue 10: units below the commit-log min were cut as damage, the next dispatch
    saw a queue-offset gap, and that error truncated the commit log (all of it with ``abort``)."""
    root = tmp_path / "s"
    before = _store_with_expired_units(root)
    if abnormal:
        (root / "abort").touch()
    _assert_nothing_lost(root, before)
