"""Issue 21: a reader opens a thousand consume queues per Spark task; each costs one listing of its directory,
and the store's open does not stat every consume-queue file. What readers check stays checked."""

import os

import pytest

from rocketstream.errors import CorruptStoreError
from rocketstream.store import Message, MessageStore
from rocketstream.store.files.mapped_file import file_name
from storeutil import CQ_SIZE, open_small

UNITS_PER_FILE = CQ_SIZE // 20


def _listings(monkeypatch, under):
    """Paths listed (os.listdir / os.scandir) under ``under`` from now on."""
    seen: list[str] = []
    real_listdir, real_scandir = os.listdir, os.scandir

    def listdir(path="."):
        if str(path).startswith(str(under)):
            seen.append(str(path))
        return real_listdir(path)

    def scandir(path="."):
        if str(path).startswith(str(under)):
            seen.append(str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(os, "scandir", scandir)
    return seen


def test_fresh_queues_cost_one_listing_each(tmp_path, monkeypatch):
    root = tmp_path / "s"
    # no last file is full: a reader looks for a next file after a full one (a second listing)
    counts = [q % 8 + 1 for q in range(16)]
    counts[3] += 2 * UNITS_PER_FILE   # queue 3 spans three files
    with open_small(root) as st:
        st.create_topic("T", 16)
        for q, n in enumerate(counts):
            for at in range(0, n, 8):   # batches that fit a small commit-log file
                assert st.put_batch("T", q, [b"m"] * min(8, n - at)).ok
    with MessageStore.open(root, read_only=True) as ro:
        seen = _listings(monkeypatch, root / "consumequeue")
        bounds = ro.queue_bounds("T", [*range(16), 99])
        topic_dir = str(root / "consumequeue" / "T")
        # the topic's queue directories once, then each queue's files once (it was two or three times)
        assert sorted(seen) == sorted([topic_dir] + [os.path.join(topic_dir, str(q)) for q in range(16)])
    assert bounds == [(0, n) for n in counts] + [(0, 0)]


def test_a_freshly_loaded_queue_still_tails_a_writer(tmp_path):
    root = tmp_path / "s"
    with open_small(root) as st:
        st.put_message(Message("T", b"a"), 0)
        with MessageStore.open(root, read_only=True) as ro:
            [cq] = ro.queues_for_read("T", [0])
            assert cq is not None and (cq.min_offset(), cq.max_offset()) == (0, 1)
            for i in range(UNITS_PER_FILE + 2):   # the same file, then a new one, then a new queue
                st.put_message(Message("T", b"b%d" % i), 0)
            st.put_message(Message("T", b"c"), 1)
            st.flush()
            q0, q1 = ro.queues_for_read("T", [0, 1])
            assert q0 is cq and (q0.max_offset(), q1.max_offset()) == (UNITS_PER_FILE + 3, 1)
            assert [m.body for m in ro.get_message("g", "T", 0, UNITS_PER_FILE, 8).messages] == \
                [b"b%d" % i for i in range(UNITS_PER_FILE - 1, UNITS_PER_FILE + 2)]


def test_reader_detects_the_size_from_one_file_and_checks_each_file_it_maps(tmp_path):
    root = tmp_path / "s"
    with open_small(root) as st:
        for q in range(3):
            st.put_message(Message("A", b"y"), q)
    os.truncate(root / "consumequeue" / "A" / "2" / file_name(0), CQ_SIZE - 20)
    with pytest.raises(CorruptStoreError, match="length"):
        MessageStore.open(root)   # a writer's recovery still checks every file at open
    with MessageStore.open(root, read_only=True) as ro:
        assert ro.config.mapped_file_size_consume_queue == CQ_SIZE
        assert ro.queue_bounds("A", [0, 1]) == [(0, 1), (0, 1)]
        with pytest.raises(CorruptStoreError, match=f"length {CQ_SIZE - 20}, expected {CQ_SIZE}") as info:
            ro.queue_bounds("A", [2])
        assert info.value.path == str(root / "consumequeue" / "A" / "2" / file_name(0))


def test_reader_refuses_an_empty_file_before_the_last(tmp_path):
    root = tmp_path / "s"
    with open_small(root) as st:
        for i in range(2 * UNITS_PER_FILE + 1):   # three files
            st.put_message(Message("A", b"y%d" % i), 0)
    middle = root / "consumequeue" / "A" / "0" / file_name(CQ_SIZE)
    os.truncate(middle, 0)
    with MessageStore.open(root, read_only=True) as ro, \
            pytest.raises(CorruptStoreError, match=f"length 0, expected {CQ_SIZE}") as info:
        ro.queue_bounds("A", [0])
    assert info.value.path == str(middle)


def test_peeked_bounds_and_positional_units_are_what_a_loaded_queue_gives(tmp_path, monkeypatch):
    """Issue 21: a planner peeks at a queue it has not loaded (one listing, one read of its file's head) and a
    task reads a range's units where they are; both answer exactly what the loaded queue answers, and fall back
    to loading it for every queue the quick answer does not cover: several files, a full file, a first unit
    under the commit log's min (retention), a damaged file."""
    from rocketstream.store.files.consume_queue import ConsumeQueue

    root = tmp_path / "s"
    with open_small(root) as st:
        st.create_topic("T", 8)
        st.put_message(Message("T", b"expired"), 7)      # commit-log file 0, deleted below
        while st.commit_log_max_offset() < 4096:
            st.put_batch("T", 6, [b"f" * 40] * 4)       # fills file 0: queue 6 spans several consume-queue files
        for q, n in ((0, 1), (1, 5), (2, UNITS_PER_FILE), (3, 2 * UNITS_PER_FILE + 8), (4, 6), (5, 3)):
            for at in range(0, n, 8):
                assert st.put_batch("T", q, [b"m%d" % q] * min(8, n - at)).ok
    os.unlink(root / "commitlog" / file_name(0))   # retention's first step: the oldest commit-log file
    unit = root / "consumequeue" / "T" / "4" / file_name(0)
    with open(unit, "r+b") as f:   # queue 4: its unit 3 not published yet (size 0): the end is 3
        f.seek(3 * 20 + 8)
        f.write(bytes(4))
    os.truncate(root / "consumequeue" / "T" / "5" / file_name(0), CQ_SIZE - 20)
    ids = list(range(5)) + [6, 7]
    full = MessageStore.open(root, read_only=True)   # the loaded queues: what to answer
    expected = full.queue_bounds("T", ids)
    loaded_queues = dict(zip(ids, full.queues_for_read("T", ids), strict=True))
    with pytest.raises(CorruptStoreError, match="length"):
        full.queue_bounds("T", [5])
    assert expected[:2] == [(0, 1), (0, 5)] and expected[4] == (0, 3) and expected[6] == (1, 1)
    # queue 6: 4.x's min looks at the first file only (ConsumeQueue.correctMinOffset), whose units all point
    # into the deleted commit-log file: the min stays 0, and those units are no message to read
    assert expected[5][0] == 0 < expected[5][1]
    loads: list[int] = []
    real = ConsumeQueue.load
    monkeypatch.setattr(ConsumeQueue, "load", lambda self, *a: loads.append(self.queue_id) or real(self, *a))
    with MessageStore.open(root, read_only=True) as ro:
        assert ro.queue_bounds("T", ids, load=False) == expected
        assert sorted(loads) == [2, 3, 6, 7]   # the one-file queues with their end in the head were peeked at
        for q in (0, 1, 4):   # what the peek read is kept for the planner's sizes
            low, high = expected[q]
            peeked = ro.peeked_units("T", q, low, high)
            assert peeked is not None and peeked.tolist() == loaded_queues[q].raw_units(low, high).tolist()
            assert ro.peeked_units("T", q, low, high + 1) is None
        with pytest.raises(CorruptStoreError, match=f"length {CQ_SIZE - 20}, expected {CQ_SIZE}"):
            ro.queue_bounds("T", [5], load=False)
        loads.clear()
        cl_min = ro.commit_log_min_offset()
        for q, (low, high) in zip(ids, expected, strict=True):
            cq = loaded_queues[q]
            assert cq is not None
            for start in range(max(low - 2, 0), high + 1):   # a planned range starts at most at the max
                for end in range(start + 1, high + 3):
                    units = ro.units_at("T", q, start, end)
                    if low <= start and end <= high and (cq.raw_units(start, end)["offset"] >= cl_min).all():
                        assert units is not None and units.tolist() == cq.raw_units(start, end).tolist()
                    else:
                        assert units is None, (q, start, end)
        assert ro.units_at("T", 5, 0, 1) is None   # a damaged file: the caller's load names it
        assert loads == []
    full.close()
