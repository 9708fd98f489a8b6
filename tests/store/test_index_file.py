"""IndexFile reading and MessageStore.query_message (IndexService.queryOffset) on hand-built index files.

The builder below writes what ``IndexFile.putKey`` writes, including its slot chains, so a
tiny slot table gives collisions in one slot. Index files written by the real 4.9.8 broker are tested
in tests/realstore/test_real_store.py (its session fixtures generate them).
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from rocketstream import codec
from rocketstream.errors import CorruptStoreError, OptionError, StoreConfigError
from rocketstream.store import Message, MessageStore
from rocketstream.store.files import index_file as ix
from rocketstream.store.files.index_file import (
    IndexFile,
    IndexService,
    build_key,
    index_key_hash,
)
from storeutil import small_config

T0 = 1_700_000_000_000


# --- a test-only IndexFile writer (IndexFile.putKey) ---------------------------------------------
class IndexBuilder:
    """IndexFile.putKey over a bytearray of 40 + 4*slots + 20*entries bytes."""

    def __init__(self, slots: int, entries: int, *, begin_timestamp: int = 0, begin_phy: int = 0) -> None:
        self.slots, self.entries = slots, entries
        self.buf = bytearray(40 + 4 * slots + 20 * entries)
        # a new file after a full one starts from its end values (IndexService.getAndCreateLastIndexFile)
        self.begin_ts = self.end_ts = begin_timestamp
        self.begin_phy = self.end_phy = begin_phy
        self.slot_count, self.count = 0, 1

    def put(self, key: str, phy: int, store_ts: int) -> bool:
        if self.count >= self.entries:
            return False
        h = index_key_hash(key)
        slot_at = 40 + 4 * (h % self.slots)
        (slot_value,) = struct.unpack_from(">i", self.buf, slot_at)
        if slot_value <= 0 or slot_value > self.count:
            slot_value = 0
        diff = 0 if self.begin_ts <= 0 else min(max((store_ts - self.begin_ts) // 1000, 0), 0x7FFFFFFF)
        struct.pack_into(">iqii", self.buf, 40 + 4 * self.slots + 20 * self.count, h, phy, diff, slot_value)
        struct.pack_into(">i", self.buf, slot_at, self.count)
        if self.count <= 1:
            self.begin_phy, self.begin_ts = phy, store_ts
        if slot_value == 0:
            self.slot_count += 1
        self.count += 1
        self.end_phy, self.end_ts = phy, store_ts
        return True

    def put_record(self, topic: str, props: dict[str, str], phy: int, store_ts: int) -> None:
        """IndexService.buildIndex for one record: UNIQ_KEY, then every non-empty key of KEYS."""
        if props.get(codec.PROPERTY_UNIQ_KEY):
            self.put(build_key(topic, props[codec.PROPERTY_UNIQ_KEY]), phy, store_ts)
        for k in (props.get(codec.PROPERTY_KEYS) or "").split(" "):
            if k:
                self.put(build_key(topic, k), phy, store_ts)

    def data(self) -> bytes:
        struct.pack_into(">qqqqii", self.buf, 0, self.begin_ts, self.end_ts, self.begin_phy, self.end_phy,
                         self.slot_count, self.count)
        return bytes(self.buf)

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.data())
        return path


def brute_force(b: IndexBuilder, key: str, begin: int = 0, end: int = ix.MAX_TIMESTAMP) -> list[int]:
    """Offsets of every entry of ``key`` in [begin, end], newest first (no chains involved)."""
    data = b.data()
    h = index_key_hash(key)
    out = []
    for n in range(b.count - 1, 0, -1):
        kh, phy, diff, _ = struct.unpack_from(">iqii", data, 40 + 4 * b.slots + 20 * n)
        if kh == h and begin <= b.begin_ts + diff * 1000 <= end:
            out.append(phy)
    return out


def colliding_keys(topic: str, slots: int, n: int) -> list[str]:
    """``n`` keys whose ``topic#key`` share one slot of a table of ``slots`` slots."""
    target = index_key_hash(build_key(topic, "k0")) % slots
    keys, i = ["k0"], 1
    while len(keys) < n:
        if index_key_hash(build_key(topic, f"k{i}")) % slots == target:
            keys.append(f"k{i}")
        i += 1
    return keys


# --- pure helpers --------------------------------------------------------------------------------
def test_key_hash_matches_the_spec_vector():
    assert index_key_hash("TopicTest#KEY1") == 1656969516
    assert index_key_hash("TopicTest#KEY1") % ix.DEFAULT_MAX_HASH_SLOT_NUM == 1969516


def test_key_hash_of_integer_min_value_is_zero():
    assert codec.java_hash("polygenelubricants") == -(1 << 31)
    assert index_key_hash("polygenelubricants") == 0


def test_time_matched_follows_is_time_matched():
    h = ix.IndexHeader(1000, 2000, 0, 0, 0, 2)
    assert h.is_time_matched(0, ix.MAX_TIMESTAMP)       # covers the file
    assert h.is_time_matched(1500, 5000)                # begin inside
    assert h.is_time_matched(0, 1000)                   # end on the first store time
    assert not h.is_time_matched(2001, 3000)
    assert not h.is_time_matched(0, 999)


# --- geometry ------------------------------------------------------------------------------------
def test_upstream_ratio_is_recognised(tmp_path):
    b = IndexBuilder(10, 40)
    for i in range(12):
        b.put(build_key("T", f"k{i}"), 100 * i, T0 + i)
    with IndexFile(b.write(tmp_path / "20240101000000000")) as f:
        assert (f.geometry.max_hash_slot_num, f.geometry.max_index_num, f.geometry.source) == (10, 40, "ratio")


def test_other_ratios_are_found_from_the_bytes(tmp_path):
    b = IndexBuilder(7, 53)
    for i in range(30):
        b.put(build_key("T", f"k{i % 9}"), 100 * (i + 1), T0 + 10 * i)
    with IndexFile(b.write(tmp_path / "i")) as f:
        assert (f.geometry.max_hash_slot_num, f.geometry.max_index_num, f.geometry.source) == (7, 53, "data")
        assert len(f.entries()) == 30


def test_configured_geometry_must_fit_the_file_size(tmp_path):
    b = IndexBuilder(7, 53)
    b.put(build_key("T", "a"), 5, T0)
    path = b.write(tmp_path / "i")
    with IndexFile(path, max_hash_slot_num=7, max_index_num=53) as f:
        assert f.geometry.source == "configured"
    with IndexFile(path, max_hash_slot_num=7) as f:
        assert f.geometry.max_index_num == 53
    with pytest.raises(StoreConfigError, match="maxHashSlotNum=8") as exc:
        IndexFile(path, max_hash_slot_num=8, max_index_num=53)
    assert exc.value.path == str(path)


def test_configured_geometry_that_contradicts_the_entries_is_corrupt(tmp_path):
    b = IndexBuilder(12, 40)        # 40 + 48 + 800: also 40 + 4*17 + 20*39
    for i in range(20):
        b.put(build_key("T", f"k{i}"), 10 * (i + 1), T0)
    path = b.write(tmp_path / "i")
    with pytest.raises(CorruptStoreError, match="maxHashSlotNum=17"):
        IndexFile(path, max_hash_slot_num=17)


def test_geometry_settings_come_from_broker_conf(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName = b\nmaxHashSlotNum=7\nmaxIndexNum : 53\n")
    assert ix.configured_geometry(conf) == {"max_hash_slot_num": 7, "max_index_num": 53}
    assert ix.configured_geometry(None) == {}
    conf.write_text("maxHashSlotNum=lots\n")
    with pytest.raises(StoreConfigError, match="maxHashSlotNum") as exc:
        ix.configured_geometry(conf)
    assert exc.value.path == str(conf)


def test_undecidable_geometry_is_refused_naming_the_file(tmp_path):
    b = IndexBuilder(7, 53)
    for i in range(10):
        b.put(build_key("T", f"k{i}"), 10 * (i + 1), T0)
    data = bytearray(b.data())
    data[-1] = 0x55    # a byte after the last entry: no slot count explains the file
    path = tmp_path / "20240101000000000"
    path.write_bytes(bytes(data))
    with pytest.raises(StoreConfigError, match="maxHashSlotNum") as exc:
        IndexFile(path)
    assert exc.value.path == str(path)


def test_empty_index_finds_nothing_whatever_its_geometry(tmp_path):
    path = tmp_path / "i"
    path.write_bytes(bytes(40 + 4 * 7 + 20 * 53))      # a fresh file: indexCount 0 reads as 1
    with IndexService([path]) as s:
        assert s.files[0].geometry is None
        assert s.indexed_end() is None
        assert s.query_offset("T", "a", 64).phy_offsets == []


def test_zero_length_file_is_skipped_and_a_short_one_refused(tmp_path):
    (tmp_path / "a").write_bytes(b"")
    with IndexService([tmp_path / "a"]) as s:
        assert s.query_offset("T", "a", 64).phy_offsets == []
    (tmp_path / "b").write_bytes(b"\x01" * 12)
    with pytest.raises(CorruptStoreError, match="shorter") as exc:
        IndexFile(tmp_path / "b")
    assert exc.value.path == str(tmp_path / "b")


# --- selectPhyOffset / queryOffset ---------------------------------------------------------------
def test_collisions_in_one_slot_are_walked_newest_first(tmp_path):
    keys = colliding_keys("T", 5, 4)
    b = IndexBuilder(5, 60)
    for i in range(48):
        b.put(build_key("T", keys[i % 4]), 1000 + 10 * i, T0 + 1000 * i)
    path = b.write(tmp_path / "i")
    with IndexService([path]) as s:
        for k in keys:
            got = s.query_offset("T", k, 64).phy_offsets
            assert got == brute_force(b, build_key("T", k))
            assert len(got) == 12 and got == sorted(got, reverse=True)
        assert s.query_offset("T", "absent", 64).phy_offsets == []
        assert s.query_offset("U", keys[0], 64).phy_offsets == []


def test_time_filter_uses_whole_seconds_after_begin_timestamp(tmp_path):
    b = IndexBuilder(5, 60)
    for i in range(10):
        b.put(build_key("T", "k"), 100 * (i + 1), T0 + 1000 * i + 999)   # stored 999 ms into each second
    with IndexService([b.write(tmp_path / "i")]) as s:
        # the first entry sets beginTimestamp = T0 + 999, so entry i's index time beginTimestamp + timeDiff*1000
        # is its exact store time T0 + 999 + 1000*i
        got = s.query_offset("T", "k", 64, T0 + 3999, T0 + 6999).phy_offsets
        assert got == [700, 600, 500, 400]
        assert got == brute_force(b, build_key("T", "k"), T0 + 3999, T0 + 6999)


def test_truncated_seconds_are_compared_as_java_does(tmp_path):
    b = IndexBuilder(5, 60)
    b.put(build_key("T", "k"), 100, T0)
    b.put(build_key("T", "k"), 200, T0 + 1500)    # index time T0 + 1000
    with IndexService([b.write(tmp_path / "i")]) as s:
        assert s.query_offset("T", "k", 64, T0 + 1001, ix.MAX_TIMESTAMP).phy_offsets == []
        assert s.query_offset("T", "k", 64, 0, T0 + 1000).phy_offsets == [200, 100]


def test_max_num_is_capped_at_max_msgs_num_batch(tmp_path):
    b = IndexBuilder(50, 200)
    for i in range(100):
        b.put(build_key("T", "hot"), 10 * (i + 1), T0)
    with IndexService([b.write(tmp_path / "i")]) as s:
        assert len(s.query_offset("T", "hot", 1000).phy_offsets) == 64
        assert s.query_offset("T", "hot", 3).phy_offsets == [1000, 990, 980]


def test_several_files_newest_first_and_stop_at_begin(tmp_path):
    d = tmp_path / "index"
    first = IndexBuilder(5, 8)
    for i in range(7):      # full: entries 1..7
        first.put(build_key("T", "k"), 100 + i, T0 + 1000 * i)
    second = IndexBuilder(5, 8, begin_timestamp=first.end_ts, begin_phy=first.end_phy)
    for i in range(3):
        second.put(build_key("T", "k"), 200 + i, T0 + 100_000 + 1000 * i)
    first.write(d / "20240101000000000")
    second.write(d / "20240101000100000")
    with IndexService(sorted(d.iterdir())) as s:
        assert s.query_offset("T", "k", 64).phy_offsets == [202, 201, 200, 106, 105, 104, 103, 102, 101, 100]
        r = s.query_offset("T", "k", 4)
        assert r.phy_offsets == [202, 201, 200, 106]
        assert (r.index_last_update_phyoffset, r.index_last_update_timestamp) == (202, T0 + 102_000)
        # the newer file begins after `begin`: the older one is not needed
        assert s.query_offset("T", "k", 64, T0 + 100_000).phy_offsets == [202, 201, 200]
        assert s.indexed_end() == 202


def test_a_chain_that_links_forward_is_corrupt(tmp_path):
    b = IndexBuilder(5, 60)
    b.put(build_key("T", "k"), 100, T0)
    b.put(build_key("T", "k"), 200, T0)
    path = b.write(tmp_path / "i")
    with IndexService([path]) as s:      # geometry resolved on the healthy bytes; then a writer damages them
        entry = 40 + 4 * 5 + 20 * 2
        with open(path, "r+b") as f:
            f.seek(entry + 16)
            f.write(struct.pack(">i", 3))                    # entry 2 -> entry 3, a newer one
            f.seek(entry + 20)
            f.write(struct.pack(">iqii", index_key_hash(build_key("T", "k")), 300, 0, 0))
            f.seek(36)
            f.write(struct.pack(">i", 4))
        with pytest.raises(CorruptStoreError, match="links forward") as exc:
            s.query_offset("T", "k", 64)
    assert exc.value.path == str(path)
    with pytest.raises(CorruptStoreError, match="previous-entry number"):
        IndexFile(path, max_hash_slot_num=5)   # a fresh open: the structural check sees it first


def test_reading_never_writes(tmp_path):
    b = IndexBuilder(5, 60)
    for i in range(30):
        b.put(build_key("T", f"k{i % 3}"), 10 * i, T0 + i)
    path = b.write(tmp_path / "i")
    os.chmod(path, 0o444)
    before = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    with IndexService([path]) as s:
        s.query_offset("T", "k1", 64)
        s.files[0].entries()
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns) == before


def test_entries_view_matches_the_builder(tmp_path):
    b = IndexBuilder(7, 53)
    for i in range(20):
        b.put(build_key("T", f"k{i}"), 10 * (i + 1), T0 + 1000 * i)
    with IndexFile(b.write(tmp_path / "i")) as f:
        e = f.entries()
        assert e["phy_offset"].tolist() == [10 * (i + 1) for i in range(20)]
        assert e["time_diff"].tolist() == list(range(20))
        assert (e["key_hash"] == np.array([index_key_hash(build_key("T", f"k{i}")) for i in range(20)])).all()
        del e


# --- MessageStore.query_message ------------------------------------------------------------------
def _store(tmp_path: Path, messages: list[Message]) -> Path:
    root = tmp_path / "store"
    with MessageStore.open(root, config=small_config(root)) as s:
        s.create_topic("T", 2)
        s.create_topic("U", 1)
        for i, m in enumerate(messages):
            s.put_message(m, queue_id=i % 2 if m.topic == "T" else 0)
    return root


def _index_of(root: Path, slots: int = 5, entries: int = 400, *, until: int | None = None) -> IndexBuilder:
    """An index of the store's records (IndexService.buildIndex), optionally only below ``until``."""
    b = IndexBuilder(slots, entries)
    with MessageStore.open(root, read_only=True) as s:
        for offset, rec in s.commit_log.iter_records(s.commit_log.min_offset(), check_crc=False):
            if rec is not None and (until is None or offset < until):
                b.put_record(rec.topic, dict(rec.properties), offset, rec.store_timestamp)
    return b


def _keyed(n: int) -> list[Message]:
    out = []
    for i in range(n):
        out.append(Message("T", f"body-{i}".encode(), keys=f"order-{i % 5} all ab{i % 2}"))
        out.append(Message("U", b"u", keys=f"order-{i % 5}"))
    return out


def _offsets(records) -> list[int]:
    return [r.physical_offset for r in records]


def test_query_without_index_scans_the_commit_log(tmp_path):
    root = _store(tmp_path, _keyed(40))
    with MessageStore.open(root, read_only=True) as s:
        got = s.query_message("T", "order-3")
        assert len(got) == 8 and all(r.topic == "T" and "order-3" in r.keys.split(" ") for r in got)
        assert _offsets(got) == sorted(_offsets(got))
        assert len(s.query_message("U", "order-3")) == 8
        assert s.query_message("T", "ab") == []          # a substring of a key is not the key
        assert s.query_message("T", "order") == []
        assert len(s.query_message("T", "all")) == 40
        newest = s.query_message("T", "all", max_num=5)
        assert _offsets(newest) == _offsets(s.query_message("T", "all"))[-5:]
        assert len(s.query_message("T", "all", max_num=500)) == 40   # maxMsgsNumBatch 64 is the cap


def test_query_by_uniq_key(tmp_path):
    root = _store(tmp_path, _keyed(10))
    with MessageStore.open(root, read_only=True) as s:
        rec = s.query_message("T", "order-2")[0]
        assert _offsets(s.query_message("T", rec.uniq_key, uniq_key=True)) == [rec.physical_offset]
        assert s.query_message("T", rec.uniq_key) == []       # not one of the KEYS
        assert s.query_message("U", rec.uniq_key, uniq_key=True) == []


def test_query_time_range(tmp_path):
    root = _store(tmp_path, _keyed(10))
    with MessageStore.open(root, read_only=True) as s:
        every = s.query_message("T", "all")
        t = every[4].store_timestamp
        # index times are whole seconds after the file's beginTimestamp (IndexFile.selectPhyOffset)
        inside = s.query_message("T", "all", begin_ms=every[0].store_timestamp, end_ms=t)
        assert inside and all(r.store_timestamp < t + 1000 for r in inside)
        assert s.query_message("T", "all", end_ms=every[0].store_timestamp - 1) == []


def test_index_results_equal_scan_results_and_collisions_are_dropped(tmp_path):
    root = _store(tmp_path, _keyed(30))
    keys = [("T", "order-1"), ("T", "all"), ("T", "ab0"), ("U", "order-4"), ("U", "all"), ("T", "nothing"),
            ("U", "ab1")]
    with MessageStore.open(root, read_only=True) as s:
        scanned = {tk: _offsets(s.query_message(*tk)) for tk in keys}
    assert scanned[("T", "all")] and scanned[("U", "order-4")] and not scanned[("U", "ab1")]
    index = _index_of(root)     # 5 slots: different keys share slots
    index.write(root / "index" / "20240101000000000")
    with MessageStore.open(root, read_only=True) as s:
        assert {tk: _offsets(s.query_message(*tk)) for tk in keys} == scanned
    # the hash of topic#key is all the index compares: equal hashes of other keys would come back too
    with IndexService([root / "index" / "20240101000000000"]) as svc:
        slot_mates = brute_force(index, build_key("T", "order-1"))
        assert svc.query_offset("T", "order-1", 64).phy_offsets == slot_mates


def test_records_after_the_index_are_found_by_the_tail_scan(tmp_path):
    root = _store(tmp_path, _keyed(20))
    _index_of(root).write(root / "index" / "20240101000000000")
    with MessageStore.open(root, config=small_config(root)) as s:    # our writer appends, indexes nothing
        s.put_message(Message("T", b"late", keys="order-1 late-key"), queue_id=0)
    with MessageStore.open(root, read_only=True) as s:
        late = s.query_message("T", "late-key")
        assert [r.body for r in late] == [b"late"]
        both = s.query_message("T", "order-1")
        assert len(both) == 5 and both[-1].body == b"late"


def test_expired_offsets_are_skipped(tmp_path):
    root = _store(tmp_path, _keyed(60))
    _index_of(root).write(root / "index" / "20240101000000000")
    with MessageStore.open(root, read_only=True) as s:
        before = s.query_message("T", "all")
    with MessageStore.open(root, config=small_config(root)) as s:
        s.delete_expired_files(now_ms=(1 << 62), reserved_hours=0)
        cl_min = s.commit_log.min_offset()
    assert cl_min > 0
    with MessageStore.open(root, read_only=True) as s:
        after = s.query_message("T", "all")
    assert _offsets(after) == [o for o in _offsets(before) if o >= cl_min]
    assert after and len(after) < len(before)


def test_query_argument_errors(tmp_path):
    root = _store(tmp_path, _keyed(2))
    with MessageStore.open(root, read_only=True) as s:
        with pytest.raises(OptionError, match="topic"):
            s.query_message("", "k")
        with pytest.raises(OptionError, match="key"):
            s.query_message("T", "")
        with pytest.raises(OptionError, match="max_num"):
            s.query_message("T", "k", max_num=0)
