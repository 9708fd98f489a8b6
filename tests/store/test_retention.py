"""Retention: expired commit-log files, the consume-queue files they orphan, corrected minimums."""

import os
import time

import pytest

from rocketstream.errors import StoreError
from rocketstream.store import GetMessageStatus as S
from rocketstream.store import Message, MessageStore
from storeutil import CL_SIZE, open_small

HOUR_MS = 3_600_000


def age(path, hours):
    t = time.time() - hours * 3600
    os.utime(path, (t, t))


@pytest.fixture
def store(tmp_path):
    st = open_small(tmp_path / "s")
    for i in range(100):   # ~180 bytes each: about 20 per 4 KiB file, 6 files
        st.put_message(Message("T", b"r%03d" % i + b"." * 90), i % 2)
    yield st
    st.close()


def cl_files(st):
    return sorted(os.listdir(st.root / "commitlog"))


def test_deletes_expired_oldest_first_without_holes(store):
    names = cl_files(store)
    assert len(names) == 6
    for n in names:
        age(store.root / "commitlog" / n, 10)
    age(store.root / "commitlog" / names[2], 0)    # a young file in the middle stops the walk
    now = int(time.time() * 1000)
    gone = store.delete_expired_files(now, reserved_hours=5)
    assert [p.name for p in gone if p.parent.name == "commitlog"] == names[:2]
    assert cl_files(store) == names[2:]
    assert store.commit_log_min_offset() == int(names[2])


def test_never_deletes_the_last_file(store):
    for n in cl_files(store):
        age(store.root / "commitlog" / n, 100)
    store.delete_expired_files(int(time.time() * 1000), reserved_hours=1)
    assert cl_files(store) == [f"{5 * CL_SIZE:020d}"]


def test_nothing_expired_changes_nothing(store):
    before = cl_files(store)
    assert store.delete_expired_files() == []
    assert cl_files(store) == before


def test_min_offsets_follow_and_reads_below_min_are_too_small(store):
    names = cl_files(store)
    for n in names[:3]:
        age(store.root / "commitlog" / n, 10)
    store.delete_expired_files(int(time.time() * 1000), reserved_hours=1)
    cl_min = store.commit_log_min_offset()
    assert cl_min == 3 * CL_SIZE
    for q in (0, 1):
        lo = store.min_offset("T", q)
        assert lo > 0
        first = store.get_message("g", "T", q, lo, 1).messages[0]
        assert first.physical_offset >= cl_min
        # the message just before min is gone
        r = store.get_message("g", "T", q, lo - 1, 1)
        assert r.status is S.OFFSET_TOO_SMALL and r.next_begin_offset == lo
        with pytest.raises(StoreError, match="below the min offset"):
            store.read_range("T", q, lo - 1, lo + 1)
        assert store.max_offset("T", q) == 50
    cq_files = sorted(os.listdir(store.root / "consumequeue" / "T" / "0"))
    assert cq_files[0] != "00000000000000000000"   # the orphaned first CQ file went too
    assert store.check().ok
    mins = [store.min_offset("T", q) for q in (0, 1)]
    store.close()
    with MessageStore.open(store.root) as again:     # recomputed at start-up (correctMinOffset)
        assert [again.min_offset("T", q) for q in (0, 1)] == mins
    with MessageStore.open(store.root, read_only=True) as ro:
        assert [ro.min_offset("T", q) for q in (0, 1)] == mins


def test_reader_notices_retention_of_live_writer(store):
    ro = MessageStore.open(store.root, read_only=True)
    try:
        assert ro.min_offset("T", 0) == 0
        for n in cl_files(store)[:2]:
            age(store.root / "commitlog" / n, 10)
        store.delete_expired_files(int(time.time() * 1000), reserved_hours=1)
        assert ro.commit_log_min_offset() == 2 * CL_SIZE
        assert ro.min_offset("T", 0) == store.min_offset("T", 0) > 0
        assert ro.get_message("g", "T", 0, 0, 1).status is S.OFFSET_TOO_SMALL
    finally:
        ro.close()


def test_writer_applies_retention_when_the_commit_log_rolls(tmp_path):
    st = open_small(tmp_path / "auto", file_reserved_time_hours=1)
    try:
        i = 0
        while len(cl_files(st)) < 3:
            st.put_message(Message("T", b"a%04d" % i + b"." * 90), 0)
            i += 1
        names = cl_files(st)
        for n in names:
            age(st.root / "commitlog" / n, 2)   # older than fileReservedTime
        first_new = len(names)
        while len(cl_files(st)) == first_new or cl_files(st)[-1] == names[-1]:
            st.put_message(Message("T", b"b%04d" % i + b"." * 90), 0)   # until the log rolls again
            i += 1
        assert cl_files(st)[0] not in names[:-1], "expired files survived a roll"
        assert st.min_offset("T", 0) > 0
        assert st.get_message("g", "T", 0, 0, 1).status is S.OFFSET_TOO_SMALL
    finally:
        st.close()


def test_writer_applies_retention_when_it_opens(tmp_path):
    st = open_small(tmp_path / "reopen", file_reserved_time_hours=1)
    for i in range(100):
        st.put_message(Message("T", b"r%03d" % i + b"." * 90), 0)
    st.close()
    names = sorted(os.listdir(tmp_path / "reopen" / "commitlog"))
    for n in names:
        age(tmp_path / "reopen" / "commitlog" / n, 2)
    with open_small(tmp_path / "reopen", file_reserved_time_hours=1) as st:
        assert cl_files(st) == names[-1:]
        assert st.max_offset("T", 0) == 100 and st.min_offset("T", 0) > 0
    with MessageStore.open(tmp_path / "reopen", read_only=True) as ro:   # readers never delete
        assert cl_files(ro) == names[-1:]
