"""The put side of index/ (files/index_writer.py): IndexFile.putKey byte for byte, slot chains, roll
over, the checkpoint's indexMsgTimestamp, dispatch from every put path, recovery after a crash.

The reference for the bytes is test_index_file.IndexBuilder, a line-by-line transcription of
IndexFile.putKey. Tests against the real 4.9.8 broker (it reads our index) are in
tests/realstore/test_real_store.py and test_index_java.py.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstream import codec
from rocketstream.store import Message, MessageStore, StoreConfig
from rocketstream.store.files import index_writer
from rocketstream.store.files.checkpoint import StoreCheckpoint
from rocketstream.store.files.index_file import IndexGeometry, IndexService, build_key, index_key_hash
from rocketstream.store.files.index_writer import (
    IndexFileWriter,
    IndexWriter,
    human_time_name,
    key_hashes,
)
from rocketstream.store.maintenance.layout import index_files
from test_index_file import IndexBuilder

T0 = 1_700_000_000_000
REPO = Path(__file__).resolve().parents[2]


def _config(root: Path, slots: int = 64, entries: int = 50, **kw: object) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=1 << 16,
                       mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=slots, max_index_num=entries,
                       **kw)  # type: ignore[arg-type]


def _headers(root: Path) -> list[tuple[int, ...]]:
    out = []
    for p in index_files(root):
        with open(p, "rb") as f:
            out.append(struct.unpack(">qqqqii", f.read(40)))
    return out


# --- hashing ----------------------------------------------------------------------------------------
@given(st.lists(st.text(max_size=40), min_size=1, max_size=30))
@settings(max_examples=200, deadline=None)
def test_vectorized_key_hash_equals_java_string_hash(keys):
    assert key_hashes(keys).tolist() == [index_key_hash(k) for k in keys]
    # the scalar path a put of a few keys takes (put_one)
    assert [index_writer._scalar_hash(k) for k in keys] == [index_key_hash(k) for k in keys]


def test_key_hash_of_the_spec_vector_and_integer_min_value():
    assert key_hashes(["TopicTest#KEY1"]).tolist() == [1656969516]
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE: abs() stays negative, putKey uses 0
    assert key_hashes(["polygenelubricants", "x"]).tolist() == [0, index_key_hash("x")]
    assert [index_writer._scalar_hash(k) for k in ("TopicTest#KEY1", "polygenelubricants", "x")] == \
        [1656969516, 0, index_key_hash("x")]


def test_file_name_is_local_time_to_the_millisecond():
    import time
    name = human_time_name(T0 + 7)
    assert len(name) == 17 and name.endswith("007")
    assert name[:14] == time.strftime("%Y%m%d%H%M%S", time.localtime(T0 // 1000))


# --- one file: putKey byte for byte ---------------------------------------------------------------
puts = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3_000), st.integers(-2_500, 4_000)),
                min_size=1, max_size=120)


@given(puts, st.integers(1, 7) | st.just(997), st.sampled_from([0, T0 - 5_000]), st.booleans())
@settings(max_examples=200, deadline=None)
def test_scalar_and_vectorized_puts_write_what_putkey_writes(tmp_path_factory, items, slots, prev_end, one_time):
    """Keys from a small alphabet in a tiny slot table: collisions, chains through earlier entries of
    the same batch and of earlier batches, clamped time diffs, a full file, a file created after a
    full one (begin values from it). ``one_time``: every key of a batch has the batch's store time, as
    in a put (put_many's shortcut when, in a wide table, no two keys share a slot)."""
    d = tmp_path_factory.mktemp("ix")
    entries = 60
    geometry = IndexGeometry(slots, entries, "configured")
    ref = IndexBuilder(slots, entries, begin_timestamp=prev_end, begin_phy=prev_end and 99)
    one = IndexFileWriter(d / "one", geometry, create=True, end_phy=prev_end and 99, end_timestamp=prev_end)
    many = IndexFileWriter(d / "many", geometry, create=True, end_phy=prev_end and 99, end_timestamp=prev_end)
    phy = 100
    rows = []
    cut = [0, len(items) // 3, 2 * len(items) // 3, len(items)]
    for i, (key, step, dt) in enumerate(items):
        phy += step
        if one_time:   # the time of the batch's first key
            dt = items[max(c for c in cut if c <= i)][2]
        rows.append((f"T#k{key}", phy, T0 + dt))
    fitted_ref = sum(ref.put(k, p, t) for k, p, t in rows)
    fitted_one = sum(one.put_one(index_key_hash(k), p, t) for k, p, t in rows)
    # in three batches, so chains also run through entries of an earlier batch
    fitted_many = 0
    for a, b in zip(cut, cut[1:], strict=False):
        part = rows[a:b]
        if part:
            fitted_many += many.put_many(key_hashes([k for k, _, _ in part]), np.array([p for _, p, _ in part]),
                                         np.array([t for _, _, t in part]))
    assert fitted_ref == fitted_one == fitted_many == min(len(rows), entries - 1)
    expected = ref.data()
    if ref.count <= 1:
        expected = expected[:36] + bytes(4) + expected[40:]   # indexCount is first written by a put
    assert bytes(one.mm) == expected
    assert bytes(many.mm) == expected
    one.close()
    many.close()


def test_remove_from_unwinds_slot_chains(tmp_path):
    """Recovery's truncation leaves exactly the file the kept puts alone would have written."""
    geometry = IndexGeometry(3, 40, "configured")
    full = IndexFileWriter(tmp_path / "full", geometry, create=True)
    short = IndexFileWriter(tmp_path / "short", geometry, create=True)
    rows = [(index_key_hash(f"T#k{i % 5}"), 100 + 10 * i, T0 + 1000 * i) for i in range(30)]
    for h, p, t in rows:
        full.put_one(h, p, t)
    for h, p, t in rows[:17]:
        short.put_one(h, p, t)
    removed, last = full.remove_from(100 + 10 * 17)
    assert (removed, last) == (13, 100 + 10 * 16)
    full.set_end(last, T0 + 16_000)
    assert bytes(full.mm) == bytes(short.mm)
    full.close()
    short.close()


# --- the service: roll over, checkpoint -----------------------------------------------------------------
def test_roll_creates_files_continuing_the_full_one_and_moves_index_msg_timestamp(tmp_path):
    cp = StoreCheckpoint(tmp_path / "checkpoint", read_only=False)
    w = IndexWriter(tmp_path, cp, max_hash_slot_num=8, max_index_num=10)
    w.load(abnormal=False)
    keys = [f"T#k{i}" for i in range(40)]
    w.put(keys, [10 * i for i in range(40)], [T0 + 1000 * i for i in range(40)])
    w.close()
    headers = _headers(tmp_path)
    assert len(headers) == 5                       # 9 entries per file (indexCount stops at maxIndexNum)
    assert [h[5] for h in headers] == [10, 10, 10, 10, 5]
    for older, newer in zip(headers, headers[1:], strict=False):
        assert older[3] < newer[2] or older[3] == newer[2] - 10   # end / begin offsets follow on
    # the first entry of a new file: its begin values are its own, its timeDiff counts from the old end
    assert headers[1][0] == T0 + 9_000 and headers[1][2] == 90
    assert cp.index_msg_timestamp == headers[3][1] == T0 + 35_000   # end time of the last full file
    names = [p.name for p in index_files(tmp_path)]
    assert names == sorted(names) and len(set(names)) == 5
    with IndexService(index_files(tmp_path), max_hash_slot_num=8, max_index_num=10) as ix:
        for i in (0, 9, 10, 39):
            assert ix.query_offset("T", f"k{i}", 64).phy_offsets == [10 * i]
    cp.close()


def test_index_files_are_sparse_with_rocketmq_default_geometry(tmp_path):
    with MessageStore.open(tmp_path / "s") as s:
        s.put_message(Message("T", b"x", keys="a"))
    (path,) = index_files(tmp_path / "s")
    st_ = os.stat(path)
    assert st_.st_size == 40 + 4 * 5_000_000 + 20 * 20_000_000
    assert st_.st_blocks * 512 < 1 << 20, "the index file is not sparse"


# --- dispatch: every put path -----------------------------------------------------------------------
def _entries(root: Path, slots: int = 64, entries: int = 50) -> list[tuple[int, int]]:
    out = []
    with IndexService(index_files(root), max_hash_slot_num=slots, max_index_num=entries) as ix:
        for f in ix.files:
            e = f.entries()
            out += list(zip(e["key_hash"].tolist(), e["phy_offset"].tolist(), strict=True))
            del e
    return out


def _expected(store: MessageStore) -> list[tuple[int, int]]:
    """buildIndex over the commit log: UNIQ_KEY then each non-empty key, ROLLBACK records skipped."""
    out = []
    for offset, rec in store.commit_log.iter_records(0, check_crc=False):
        if rec is None:
            break
        if rec.sys_flag & codec.TRANSACTION_MASK == codec.TRANSACTION_ROLLBACK:
            continue
        props = rec.properties
        keys = ([props[codec.PROPERTY_UNIQ_KEY]] if codec.PROPERTY_UNIQ_KEY in props else []) + [
            k for k in (props.get(codec.PROPERTY_KEYS) or "").split(" ") if k]
        out += [(index_key_hash(build_key(rec.topic, k)), offset) for k in keys]
    return out


def test_every_put_path_indexes_uniq_key_and_every_key(tmp_path):
    root = tmp_path / "s"
    with MessageStore.open(root, config=_config(root)) as s:
        s.put_message(Message("T", b"a", keys="k1 k2  k3"))                     # several keys, an empty one
        s.put_message(Message("T", b"b"))                                       # UNIQ_KEY only
        s.put_messages([Message("T", b"c", keys=f"m{i}") for i in range(12)], 1)   # columnar batch
        s.put_messages([Message("T", b"d", keys=f"p{i}", properties={"u": "1"}) for i in range(5)], 2)  # general
        s.put_batch("T", 3, [b"e"] * 20, keys=[f"q{i} r" if i % 2 else None for i in range(20)])
        s.put_message(Message("T", b"f", keys="ü-key 𝄞"))                       # UTF-16 hashing
        s.put_message(Message("D", b"g", keys="late", delay_level=2))          # indexed under SCHEDULE_TOPIC
        s.flush()
        assert _entries(root) == _expected(s)
        assert [r.keys for r in s.query_message("T", "k3")] == ["k1 k2  k3"]
        assert len(s.query_message("T", "r")) == 10
        assert [r.keys for r in s.query_message("T", "𝄞")] == ["ü-key 𝄞"]
        assert [r.keys for r in s.query_message(codec.SCHEDULE_TOPIC, "late")] == ["late"]
        assert s.query_message("D", "late") == []
        uniq = s.query_message("T", "m5")[0].uniq_key
        assert [r.uniq_key for r in s.query_message("T", uniq, uniq_key=True)] == [uniq]


def test_a_store_with_message_index_disabled_writes_no_index(tmp_path):
    root = tmp_path / "s"
    with MessageStore.open(root, config=_config(root, message_index_enable=False)) as s:
        s.put_message(Message("T", b"a", keys="k1"))
        assert [r.keys for r in s.query_message("T", "k1")] == ["k1"]   # the commit-log scan
    assert not (root / "index").exists()


def test_queries_use_the_index_and_scan_only_what_it_lacks(tmp_path, monkeypatch):
    root = tmp_path / "s"
    with MessageStore.open(root, config=_config(root)) as s:
        for i in range(20):
            s.put_message(Message("T", b"x", keys=f"k{i} all"))
        scanned: list[tuple[int, int]] = []
        real = s._queries._scan_for_key

        def spy(topic, key, uniq, start, end, b, e):
            scanned.append((start, end))
            return real(topic, key, uniq, start, end, b, e)

        monkeypatch.setattr(s._queries, "_scan_for_key", spy)
        assert len(s.query_message("T", "all")) == 20
        assert scanned == [(s.commit_log_max_offset(), s.commit_log_max_offset())]   # nothing left to scan


# --- recovery -------------------------------------------------------------------------------------------
_CRASH = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from rocketstream.store import Message, MessageStore, StoreConfig
    root = Path(sys.argv[1])
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=1 << 16,
                      mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=64, max_index_num=50)
    s = MessageStore.open(root, config=cfg)
    for i in range(int(sys.argv[2])):
        s.put_message(Message("T", b"x" * 50, keys=f"k{i} all"))
    s.put_batch("T", 1, [b"y"] * 30, keys=[f"b{i}" for i in range(30)])
    os._exit(0)   # killed: no flush, no close, abort stays
""")


def _crash_writer(root: Path, n: int) -> None:
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    subprocess.run([sys.executable, "-c", _CRASH, str(root), str(n)], check=True, env=env, timeout=120)
    assert (root / "abort").exists()


def _all_keys_found(s: MessageStore, n: int) -> None:
    assert len(s.query_message("T", "all")) == min(n, 64)
    for i in range(n):
        assert [r.keys for r in s.query_message("T", f"k{i}")] == [f"k{i} all"], i
    for i in range(30):
        assert [r.keys for r in s.query_message("T", f"b{i}")] == [f"b{i}"], i


def test_after_a_crash_the_index_is_complete_and_every_key_found(tmp_path):
    root = tmp_path / "s"
    _crash_writer(root, 40)
    with MessageStore.open(root, config=_config(root)) as s:
        assert _entries(root) == _expected(s)
        _all_keys_found(s, 40)
    assert not (root / "abort").exists()


def test_lost_index_files_are_rebuilt_from_the_commit_log(tmp_path):
    root = tmp_path / "s"
    _crash_writer(root, 40)
    for p in index_files(root):
        p.unlink()
    with MessageStore.open(root, config=_config(root)) as s:
        assert _entries(root) == _expected(s)
        _all_keys_found(s, 40)


def test_a_damaged_last_index_file_is_rebuilt_after_a_crash(tmp_path):
    root = tmp_path / "s"
    _crash_writer(root, 40)
    last = index_files(root)[-1]
    with open(last, "r+b") as f:     # a torn put: the slot points one past indexCount
        f.seek(36)
        count = struct.unpack(">i", f.read(4))[0]
        f.seek(40)
        f.write(struct.pack(">i", count + 1))
    with MessageStore.open(root, config=_config(root)) as s:
        assert _entries(root) == _expected(s)
        _all_keys_found(s, 40)


def test_entries_beyond_a_cut_commit_log_are_removed(tmp_path):
    """A torn commit-log tail is cut by recovery; index entries pointing there go too, and the records
    written next at those offsets are indexed (not skipped as below endPhyOffset)."""
    root = tmp_path / "s"
    _crash_writer(root, 10)
    with MessageStore.open(root, read_only=True) as s:
        last = s.query_message("T", "b29")[0].physical_offset
    cl = sorted((root / "commitlog").iterdir())[-1]
    with open(cl, "r+b") as f:        # corrupt the last record's body: CRC check cuts it
        f.seek(last - int(cl.name) + 88)
        f.write(b"Z")
    with MessageStore.open(root, config=_config(root)) as s:
        assert s.commit_log_max_offset() == last
        assert s.query_message("T", "b29") == []
        assert _entries(root) == _expected(s)
        s.put_message(Message("T", b"new", keys="fresh"), 1)
        assert [r.physical_offset for r in s.query_message("T", "fresh")] == [last]
        assert _entries(root) == _expected(s)


def test_a_store_without_index_files_is_indexed_at_open(tmp_path):
    """Stores written before the index writer (or with messageIndexEnable=false) get every record indexed."""
    root = tmp_path / "s"
    with MessageStore.open(root, config=_config(root, message_index_enable=False)) as s:
        for i in range(30):
            s.put_message(Message("T", b"x", keys=f"k{i}"))
    with MessageStore.open(root, config=_config(root)) as s:
        assert _entries(root) == _expected(s)
        assert [r.keys for r in s.query_message("T", "k29")] == ["k29"]


@pytest.mark.parametrize("n", [0, 5])
def test_reopen_after_clean_close_indexes_nothing_twice(tmp_path, n):
    root = tmp_path / "s"
    for _ in range(3):
        with MessageStore.open(root, config=_config(root)) as s:
            for i in range(n):
                s.put_message(Message("T", b"x", keys=f"k{i}"))
    with MessageStore.open(root, config=_config(root)) as s:
        assert _entries(root) == _expected(s)


# --- deferred dispatch (MessageStore.defer_index: the broker builds the index after its answers) -------------
def test_deferred_index_writes_the_same_files_as_dispatch_in_each_put_and_queries_see_every_key(
        tmp_path, monkeypatch):
    from rocketstream.store import message_store

    def fill(root: Path, defer: bool) -> tuple[list[bytes], list[int]]:
        clock = iter(range(T0, T0 + 10**9, 700))   # store times in steps of 0.7 s: several per index second
        monkeypatch.setattr(message_store, "_now_ms", lambda: next(clock))
        calls: list[int] = []
        found: list[int] = []
        with MessageStore.open(root, config=_config(root)) as s:
            if defer:
                s.defer_index(lambda: calls.append(len(calls)))
            for i in range(40):
                if i % 3 == 0:
                    s.put_message(Message("T", b"x", keys=f"k{i} other{i}", properties={"UNIQ_KEY": f"u{i}"}), 0)
                else:
                    s.put_messages([Message("T", b"y" * j, keys=f"k{i}" if j else None,
                                            properties={"UNIQ_KEY": f"u{i}.{j}"}) for j in range(i % 5 + 1)], i % 2)
                if defer and i % 7 == 6:
                    # a query drains what waits: the key of the put just made is found
                    found.append(len(s.query_message("T", f"k{i}")))
                elif defer and i % 4 == 3:
                    s.drain_index()
            if defer:
                s.defer_index(None)   # back to dispatch in each put: what waits is written first
            s.put_message(Message("T", b"z", keys="last", properties={"UNIQ_KEY": "u"}), 0)
            found.append(len(s.query_message("T", "last")))
        return [p.read_bytes() for p in index_files(root)], [len(calls), *found]

    plain, _ = fill(tmp_path / "plain", False)
    deferred, counts = fill(tmp_path / "deferred", True)
    assert len(plain) > 2   # the puts roll the index file (50 entries each)
    assert deferred == plain
    # on_pending once per put that found nothing waiting: the first, and the first after each drain but the last
    # (drained after puts 3, 6, 7, 11, 13, 15, 19, 20, 23, 27, 31, 34, 35, 39: queries at 6, 13, 20, 27, 34)
    assert counts[0] == 14
    # 5 queries while deferred (each finds every message of the put just made with that key), the last after
    assert counts[1:] == [1 if i % 3 == 0 else i % 5 for i in (6, 13, 20, 27, 34)] + [1] == [1, 3, 0, 1, 4, 1]
