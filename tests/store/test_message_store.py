"""MessageStore facade: opening rules, getMessage statuses, time search, id lookups, check()."""

import os
import struct

import pytest

from rocketstream.errors import (
    CorruptStoreError,
    NotAStoreError,
    StoreConfigError,
    StoreError,
)
from rocketstream.store import GetMessageStatus as S
from rocketstream.store import Message, MessageStore, StoreConfig
from rocketstream.store.files.mapped_file import file_name
from storeutil import CL_SIZE, CQ_SIZE, open_small, small_config


def fill(root, n=40, topic="T", queue=0, clock=None, **kw):
    st = open_small(root, **kw)
    for i in range(n):
        st.put_message(Message(topic, b"b%d" % i, tags="A" if i % 2 else "B"), queue)
    return st


# --- opening --------------------------------------------------------------------------------
def test_sizes_detected_and_persisted(tmp_path):
    root = tmp_path / "s"
    fill(root, 5).close()
    with MessageStore.open(root) as st:       # no config: sizes come from the store
        assert st.config.mapped_file_size_commit_log == CL_SIZE
        assert st.config.mapped_file_size_consume_queue == CQ_SIZE
    assert '"mappedFileSizeCommitLog": 4096' in (root / "config" / "rocketstream.json").read_text()
    with pytest.raises(StoreConfigError, match="mappedFileSizeCommitLog"):
        MessageStore.open(root, config=StoreConfig(root, mapped_file_size_commit_log=8192,
                                                   mapped_file_size_consume_queue=CQ_SIZE))
    with MessageStore.open(root, config=small_config(root)) as st:   # same sizes: fine
        assert st.max_offset("T", 0) == 5


def test_sizes_detected_from_files_without_settings(tmp_path):
    root = tmp_path / "s"
    fill(root, 5).close()
    os.unlink(root / "config" / "rocketstream.json")   # e.g. a copy of a Java broker's store
    with MessageStore.open(root, read_only=True) as ro:
        assert ro.config.mapped_file_size_commit_log == CL_SIZE and ro.max_offset("T", 0) == 5


def test_settings_that_contradict_files_are_corruption(tmp_path):
    root = tmp_path / "s"
    fill(root, 5).close()
    (root / "config" / "rocketstream.json").write_text(
        '{"mappedFileSizeCommitLog": 8192, "mappedFileSizeConsumeQueue": 320}')
    with pytest.raises(CorruptStoreError, match="8192"):
        MessageStore.open(root)


def test_not_a_store(tmp_path):
    with pytest.raises(NotAStoreError):
        MessageStore.open(tmp_path / "missing", read_only=True)
    with pytest.raises(NotAStoreError):
        MessageStore.open(tmp_path / "missing", create=False)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file.txt").write_text("x")
    with pytest.raises(NotAStoreError):
        MessageStore.open(tmp_path / "junk")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(NotAStoreError):
        MessageStore.open(tmp_path / "afile", read_only=True)
    assert not (tmp_path / "missing").exists()


def test_read_only_open_writes_nothing(tmp_path):
    root = tmp_path / "s"
    fill(root, 30).close()
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")}
    with MessageStore.open(root, read_only=True) as ro:
        ro.get_message("g", "T", 0, 0, 32)
        ro.check()
        ro.topics(), ro.min_offset("T", 0), ro.commit_log_max_offset(), ro.search_offset("T", 0, 0)
        assert not (root / "abort").exists()
    after = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")}
    assert before == after


def test_read_only_store_without_checkpoint_or_lock(tmp_path):
    root = tmp_path / "s"
    fill(root, 3).close()
    os.unlink(root / "checkpoint")
    os.unlink(root / "lock")
    with MessageStore.open(root, read_only=True) as ro:
        assert ro.max_offset("T", 0) == 3
    assert not (root / "checkpoint").exists() and not (root / "lock").exists()


def test_wrong_magic_in_commit_log_is_reported_with_file_and_offset(tmp_path):
    root = tmp_path / "s"
    fill(root, 3).close()
    path = root / "commitlog" / file_name(0)
    data = bytearray(path.read_bytes())
    data[4:8] = b"\x00\x00\x00\x01"
    path.write_bytes(bytes(data))
    with MessageStore.open(root, read_only=True) as ro:
        report = ro.check()
        assert not report.ok and report.problems[0].path == str(path) and report.problems[0].offset == 0
        with pytest.raises(CorruptStoreError) as info:
            ro.read_cq_units("T", 0, 0, 3)
        assert "consumequeue" in str(info.value)
        with pytest.raises(CorruptStoreError):
            ro.look_message_by_offset(0)


def test_check_reports_unit_that_disagrees(tmp_path):
    root = tmp_path / "s"
    fill(root, 3).close()
    path = root / "consumequeue" / "T" / "0" / file_name(0)
    data = bytearray(path.read_bytes())
    data[20 + 12:20 + 20] = struct.pack(">q", 12345)   # wrong tagsCode in unit 1
    path.write_bytes(bytes(data))
    with MessageStore.open(root, read_only=True) as ro:
        report = ro.check()
        assert len(report.problems) == 1 and "T/0#1" in report.problems[0].message
        assert report.records == 3 and report.units == 3


def _undispatch_last_units(root, topic, queue_id, count):
    """Zero the last ``count`` units of a queue, as a broker stopped before its reput caught up leaves it."""
    path = root / "consumequeue" / topic / str(queue_id) / file_name(0)
    data = bytearray(path.read_bytes())
    end = len(data.rstrip(b"\x00"))
    end += -end % 20
    data[end - 20 * count:end] = bytes(20 * count)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("queues_written", [("T",), ("T", "U")])
def test_check_notes_records_at_the_tail_not_dispatched_yet(tmp_path, queues_written):
    """Records after the last dispatched one are a stopped broker's reput backlog (spec §2.9), not damage."""
    root = tmp_path / "s"
    with open_small(root) as st:
        for i in range(4):
            for topic in queues_written:
                st.put_message(Message(topic, b"m%d" % i), 0)
    _undispatch_last_units(root, queues_written[-1], 0, 1)
    if len(queues_written) == 1:
        _undispatch_last_units(root, "T", 0, 1)        # the last two records of the log
    with MessageStore.open(root, read_only=True) as ro:
        report = ro.check()
        assert report.ok, report.problems
        assert report.undispatched == (1 if len(queues_written) == 2 else 2)
        assert any("end of the commit log" in n for n in report.notes)


def test_check_reports_records_without_units_before_a_dispatched_record(tmp_path):
    root = tmp_path / "s"
    with open_small(root) as st:
        for i in range(4):
            st.put_message(Message("T", b"t%d" % i), 0)
            st.put_message(Message("U", b"u%d" % i), 0)
    _undispatch_last_units(root, "T", 0, 1)            # T/0#3 is followed by the dispatched U/0#3
    with MessageStore.open(root, read_only=True) as ro:
        report = ro.check()
        assert not report.ok and report.undispatched == 0
        assert [p.message for p in report.problems] == ["record T/0#3 has no consume-queue unit"]


# --- getMessage -----------------------------------------------------------------------------
def test_get_message_statuses(tmp_path):
    st = fill(tmp_path / "s", 40)
    try:
        assert st.get_message("g", "nope", 0, 0, 1).status is S.NO_MATCHED_LOGIC_QUEUE
        r = st.get_message("g", "T", 0, 0, 5)
        assert r.status is S.FOUND and r.next_begin_offset == 5 and (r.min_offset, r.max_offset) == (0, 40)
        assert [m.queue_offset for m in r.messages] == [0, 1, 2, 3, 4]
        r = st.get_message("g", "T", 0, 40, 5)
        assert r.status is S.OFFSET_OVERFLOW_ONE and r.next_begin_offset == 40
        r = st.get_message("g", "T", 0, 41, 5)
        assert r.status is S.OFFSET_OVERFLOW_BADLY and r.next_begin_offset == 40
        # one CQ file per call: 16 units per file here
        r = st.get_message("g", "T", 0, 10, 32)
        assert r.next_begin_offset == 16 and len(r.messages) == 6
        st.create_topic("Empty", 1)
        (st.root / "consumequeue" / "Empty" / "0").mkdir(parents=True)
        st._load_queue("Empty", 0)
        assert st.get_message("g", "Empty", 0, 0, 1).status is S.NO_MESSAGE_IN_QUEUE
    finally:
        st.close()


def test_get_message_tag_filter(tmp_path):
    with fill(tmp_path / "s", 40) as st:
        r = st.get_message("g", "T", 0, 0, 32, tags=["A"])
        assert r.status is S.FOUND and [m.body for m in r.messages] == [b"b%d" % i for i in range(1, 16, 2)]
        assert r.next_begin_offset == 16
        r = st.get_message("g", "T", 0, 0, 32, tags=["Z"])
        assert r.status is S.NO_MATCHED_MESSAGE and r.next_begin_offset == 16 and not r.messages
        assert len(st.get_message("g", "T", 0, 0, 32, tags=["*"]).messages) == 16
        r = st.get_message("g", "T", 0, 0, 3, tags={"A", "B"})
        assert [m.tags for m in r.messages] == ["B", "A", "B"] and r.next_begin_offset == 3


def test_tag_hash_collision_is_rechecked_by_string(tmp_path):
    # "Aa" and "BB" have the same Java hash
    with open_small(tmp_path / "s") as st:
        st.put_message(Message("T", b"1", tags="Aa"), 0)
        st.put_message(Message("T", b"2", tags="BB"), 0)
        assert [m.body for m in st.get_message("g", "T", 0, 0, 10, tags=["BB"]).messages] == [b"2"]


def test_get_message_in_memory_limits(tmp_path):
    with fill(tmp_path / "s", 40, max_transfer_count_on_message_in_memory=4) as st:
        r = st.get_message("g", "T", 0, 0, 32)
        assert len(r.messages) == 4 and r.next_begin_offset == 4
    with open_small(tmp_path / "b", max_transfer_bytes_on_message_in_memory=500) as st:
        for _i in range(5):
            st.put_message(Message("T", b"x" * 200), 0)
        r = st.get_message("g", "T", 0, 0, 32)
        assert len(r.messages) == 1 and r.next_begin_offset == 1   # first message is always taken


# --- search by time -------------------------------------------------------------------------
@pytest.fixture
def timed(tmp_path, monkeypatch):
    import rocketstream.store.message_store as ms

    times = iter([100, 200, 200, 200, 300, 500, 900])
    monkeypatch.setattr(ms, "_now_ms", lambda: next(times))
    st = open_small(tmp_path / "s")
    for i in range(7):
        st.put_message(Message("T", b"t%d" % i), 0)
    yield st
    st.close()


@pytest.mark.parametrize("ts,lower,upper", [
    (50, 0, 0), (100, 0, 0), (150, 1, 0), (200, 1, 3), (250, 4, 3), (300, 4, 4), (901, 7, 6), (900, 6, 6)])
def test_search_offset_lower_upper(timed, ts, lower, upper):
    assert timed.search_offset("T", 0, ts, "lower") == lower
    assert timed.search_offset("T", 0, ts, "upper") == upper


@pytest.mark.parametrize("ts,nearest", [(50, 0), (120, 0), (150, 0), (160, 1), (300, 4), (390, 4), (410, 5),
                                        (700, 5), (701, 6), (5000, 6)])
def test_get_offset_in_queue_by_time_nearest(timed, ts, nearest):
    got = timed.get_offset_in_queue_by_time("T", 0, ts)
    if ts == 200:
        assert got in (1, 2, 3)
    else:
        assert got == nearest


def test_search_offset_bad_boundary(timed):
    from rocketstream.errors import OptionError

    with pytest.raises(OptionError):
        timed.search_offset("T", 0, 1, "middle")


def test_last_store_timestamp(timed):
    assert timed.last_store_timestamp("T", 0) == 900
    assert timed.last_store_timestamp("T", 5) is None


# --- lookups --------------------------------------------------------------------------------
def test_message_by_msg_id(tmp_path):
    with fill(tmp_path / "s", 60) as st:
        r = st.put_message(Message("T", b"needle"), 1)
        assert st.message_by_msg_id(r.msg_ids[0]).body == b"needle"
        assert st.message_by_msg_id(r.offset_msg_ids[0]).body == b"needle"
        assert st.message_by_msg_id(r.offset_msg_ids[0].lower()).body == b"needle"
        with pytest.raises(StoreError):
            st.message_by_msg_id("0" * 32)
        rec = st.look_message_by_offset(r.physical_offset, r.wrote_bytes)
        assert rec.body == b"needle"
        with pytest.raises(CorruptStoreError):
            st.look_message_by_offset(r.physical_offset, r.wrote_bytes + 1)
        with pytest.raises(StoreError):
            st.look_message_by_offset(10**9)


def test_topics_and_queue_ids(tmp_path):
    with open_small(tmp_path / "s") as st:
        st.put_message(Message("B", b"x"), 5)
        st.put_message(Message("A", b"x"), 0)
        assert st.topics() == ["A", "B"]
        assert st.queue_ids("B") == [0, 1, 2, 3, 4, 5]
    with MessageStore.open(tmp_path / "s", read_only=True) as ro:
        assert ro.topics() == ["A", "B"] and ro.queue_ids("A") == [0, 1, 2, 3]


def test_from_broker_conf(tmp_path):
    conf = tmp_path / "repo" / "conf" / "broker.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("# c\nbrokerName=b1\nstorePathRootDir=storage\nmappedFileSizeCommitLog=8192\n"
                    "flushDiskType=SYNC_FLUSH\nbrokerIP1=10.0.0.1\nlistenPort=10000\nunknownKey=1\n")
    cfg = StoreConfig.from_broker_conf(conf)
    assert cfg.store_path_root_dir == (tmp_path / "repo" / "storage").resolve()
    assert cfg.broker_name == "b1" and cfg.mapped_file_size_commit_log == 8192 and cfg.sync_flush
    assert str(cfg.store_host) == "10.0.0.1:10000"
    conf.write_text("mappedFileSizeCommitLog=big\n")
    with pytest.raises(StoreConfigError, match="mappedFileSizeCommitLog"):
        StoreConfig.from_broker_conf(conf)
    conf.write_text("mappedFileSizeConsumeQueue=1001\n")
    with pytest.raises(StoreConfigError, match="multiple of 20"):
        StoreConfig.from_broker_conf(conf)
