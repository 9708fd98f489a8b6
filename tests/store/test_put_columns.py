"""Columnar batch put (``MessageStore.put_batch``) against ``put_messages``: the same commit-log
and consume-queue bytes, the same results, the same refusals; and the store's one CRC32."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

from rocketstream import codec


@pytest.mark.parametrize("size", [0, 1, 7, 255, 256, 4096, 70_000])
def test_crc32_is_zlibs_crc32_for_every_buffer_kind(size):
    data = os.urandom(size)
    arr = np.frombuffer(data, dtype=np.uint8)
    assert codec.crc32(data) == zlib.crc32(data)
    assert codec.crc32(memoryview(data)[1:]) == zlib.crc32(data[1:])
    assert codec.crc32(arr[size // 3:]) == zlib.crc32(data[size // 3:])
    assert codec.masked_crc32(data) == zlib.crc32(data) & 0x7FFFFFFF


def test_crc32_falls_back_to_zlib_without_isal():
    code = ("import sys, zlib; sys.modules['isal'] = None; sys.modules['isal.isal_zlib'] = None\n"
            "from rocketstream import codec\n"
            "assert codec.crc32 is zlib.crc32, codec.crc32\n"
            "assert codec.masked_crc32(b'hi') == 1486039724\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- put_batch against put_messages --------------------------------------------------------------
import time  # noqa: E402

import pyarrow as pa  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rocketstream.store import (  # noqa: E402
    HostAddress,
    Message,
    MessageStore,
    PutMessageStatus,
    StoreConfig,
    message_store,  # noqa: E402
)
from storeutil import SMALL_INDEX, count_uniq_keys_from_zero, store_bytes  # noqa: E402

NOW = 1_700_000_000_000


def _deterministic(m):
    """Fixed clocks and UNIQ_KEYs counting from 0 through every generator, so two stores written
    through different paths can be compared byte for byte."""
    m.setattr(message_store, "_now_ms", lambda: NOW)
    m.setattr(time, "time_ns", lambda: NOW * 1_000_000)
    count_uniq_keys_from_zero(m)


def _as_messages(topic, bodies, tags=None, keys=None, flag=0, born_timestamp=None, born_host=None):
    return message_store._messages_of(topic, bodies, tags, keys, flag, born_timestamp, born_host)


def _both(tmp_path, monkeypatch, batches, *, expect_columns=True, **cfg):
    """Put ``batches`` [(topic, queue_id, bodies, kwargs)] with put_batch into one store and with
    put_messages into another; return [(results, store bytes)] for (columns, messages)."""
    out = []
    for name in ("columns", "messages"):
        root = tmp_path / name
        if name == "columns":
            config = StoreConfig(root, mapped_file_size_commit_log=cfg.pop("file_size", 1 << 16),
                                 mapped_file_size_consume_queue=20 * 64, **SMALL_INDEX, **cfg)
        else:  # the same file size as the columns store (set in the first iteration)
            config = StoreConfig(root, mapped_file_size_commit_log=config.mapped_file_size_commit_log,
                                 mapped_file_size_consume_queue=20 * 64, **SMALL_INDEX, **cfg)
        with monkeypatch.context() as m:
            _deterministic(m)
            built = []
            real = message_store.build_columns
            m.setattr(message_store, "build_columns",
                      lambda *a, **k: built.append(real(*a, **k)) or built[-1])  # noqa: B023 - this iteration only
            with MessageStore.open(root, config=config) as store:
                results = []
                for t, q, bodies, kw in batches:
                    try:
                        if name == "columns":
                            results.append(store.put_batch(t, q, bodies, **kw))
                        else:
                            results.append(store.put_messages(_as_messages(t, bodies, **kw), q))
                    except Exception as exc:   # e.g. an int tag: both paths must fail the same way
                        results.append(("raised", type(exc)))
            if name == "columns" and expect_columns:
                assert built and all(b is not None for b in built), "expected the columnar encoder for every batch"
        out.append((results, store_bytes(root)))
    return out


def _bodies(n, size=lambda i: i * 7 % 300):
    return [bytes([i % 251]) * size(i) for i in range(n)]


COLUMN_CASES = {
    "uniform tags and keys": lambda: [("T", 0, _bodies(40), dict(tags=[f"Tag{i % 4}" for i in range(40)],
                                                                  keys=[f"k{i:03}" for i in range(40)]))],
    "keys of several lengths": lambda: [("T", 1, _bodies(30), dict(tags="one", keys=[f"k{i * 37}" for i in range(30)])),
                                        ("T", 1, _bodies(30), dict(tags=[f"Tag{i % 4}" for i in range(30)],
                                                                   keys=[f"k{i * 37}" for i in range(30)]))],
    "tags of several lengths, no keys": lambda: [("T", 0, _bodies(12), dict(tags=["a", "bb", None, ""] * 3))],
    "some messages without keys": lambda: [("T", 0, _bodies(12), dict(tags=["a", "bb"] * 6,
                                                                       keys=["x", None, "", "yy"] * 3))],
    "non-ascii tags and keys": lambda: [
        ("T", 2, _bodies(8), dict(tags=["é", "ü"] * 4, keys=["日本", "ab", "日本", "cd"] * 2)),
        ("T", 2, _bodies(4), dict(tags=["TagA", "TagB", "é", "TagA"], keys=["ключ"] * 4))],
    "same-length non-ascii tags": lambda: [
        ("T", 0, _bodies(6), dict(tags=["éa", "ab"] * 3, keys=[f"k{i}" for i in range(6)]))],
    "empty bodies": lambda: [("T", 0, [b""] * 5, dict(tags="x")), ("T", 0, [b"", b"a", b""], {})],
    "one message": lambda: [("T", 3, [b"solo"], dict(tags=["t"], keys=["k"]))],
    "one key for every message": lambda: [("T", 0, _bodies(4), dict(tags="t", keys="same key"))],
    "flags and born timestamps per message": lambda: [
        ("T", 0, _bodies(9), dict(flag=[i - 4 for i in range(9)], born_timestamp=[NOW - i for i in range(9)]))],
    "scalar flag and born host": lambda: [("T", 0, _bodies(5), dict(flag=7, born_timestamp=NOW - 5,
                                                                     born_host=HostAddress("10.1.2.3", 65535)))],
    "ipv6 born host": lambda: [("T", 0, _bodies(5), dict(tags="x", born_host=HostAddress("::1", 7)))],
    "rolls over files with blank records": lambda: [
        ("T", i % 4, _bodies(100, lambda j: (j * 13 + i) % 400),  # noqa: B023 - _bodies calls it at once
         dict(tags=[f"T{j % 3}" for j in range(100)], keys=[f"key-{i}-{j}" for j in range(100)]))
        for i in range(10)],
    "bytearray and memoryview bodies": lambda: [("T", 0, [bytearray(b"ab"), memoryview(b"cde"), b"f"], dict(tags="x"))],
    "list keys and missing born timestamps": lambda: [
        ("T", 0, _bodies(6), dict(keys=[["a", "b"], "c", ("d",), None, ["e"], "f"],
                                  born_timestamp=[NOW, None, NOW - 1, None, NOW - 2, NOW - 3]))],
}


@pytest.mark.parametrize("case", sorted(COLUMN_CASES))
def test_put_batch_writes_what_put_messages_writes(tmp_path, monkeypatch, case):
    (col_results, col_bytes), (msg_results, msg_bytes) = _both(tmp_path, monkeypatch, COLUMN_CASES[case]())
    assert [r.status for r in col_results] == [PutMessageStatus.PUT_OK] * len(col_results)
    assert col_results == msg_results
    assert col_bytes.keys() == msg_bytes.keys()
    for name in col_bytes:
        assert col_bytes[name] == msg_bytes[name], name


def test_roll_over_case_really_rolls(tmp_path, monkeypatch):
    (_, col_bytes), _ = _both(tmp_path, monkeypatch, COLUMN_CASES["rolls over files with blank records"]())
    assert len([n for n in col_bytes if n.startswith("commitlog")]) >= 3


def test_ipv6_store_host(tmp_path, monkeypatch):
    (cr, cb), (mr, mb) = _both(tmp_path, monkeypatch, COLUMN_CASES["uniform tags and keys"](),
                               store_host=HostAddress("fe80::1", 10911))
    assert cr == mr and cb == mb


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary()])
def test_arrow_bodies(tmp_path, monkeypatch, kind):
    bodies = _bodies(20)
    arr = pa.array([b"skip"] + bodies, type=kind).slice(1)    # a non-zero array offset
    kw = dict(tags="x", keys=[f"k{i}" for i in range(20)])
    (cr, cb), (mr, mb) = _both(tmp_path, monkeypatch, [("T", 0, arr, kw)])
    assert cr == mr and cb == mb


@pytest.mark.parametrize("kw", [
    dict(tags=["a\x01b", "c"]), dict(keys=["k\x02", "x"]), dict(flag=[0, 2**31]), dict(born_host=HostAddress("x", 1)),
    dict(tags=[1, "a"]), dict(keys=[["a", "b"], "c"]),
])
def test_what_the_columns_cannot_encode_goes_through_put_messages(tmp_path, monkeypatch, kw):
    """Refusals (and list keys) come out exactly as put_messages reports/writes them."""
    (cr, cb), (mr, mb) = _both(tmp_path, monkeypatch, [("T", 0, [b"fine", b"also"], kw)], expect_columns=False)
    assert cr == mr and cb == mb


def test_a_refused_batch_is_built_once(tmp_path, monkeypatch):
    """A batch the columns cannot encode goes to the general rules at once: no second columnar attempt
    through put_messages (build_columns refuses exactly what prepare_batch would)."""
    built = []
    real = message_store.build_columns
    monkeypatch.setattr(message_store, "build_columns", lambda *a, **k: built.append(real(*a, **k)) or built[-1])

    def no_second_attempt(*a, **k):
        raise AssertionError("prepare_batch called for a batch build_columns refused")

    monkeypatch.setattr(message_store, "prepare_batch", no_second_attempt)
    with MessageStore.open(tmp_path / "s") as store:
        refused = store.put_batch("T", 0, [b"a", b"b"], tags=["a\x01b", "c"])
        out_of_range = store.put_batch("T", 0, [b"a", b"b"], tags=["a", "c"], flag=[0, 2**31])
    assert refused.status is PutMessageStatus.MESSAGE_ILLEGAL and "\\x01" in refused.reason
    assert out_of_range.status is PutMessageStatus.MESSAGE_ILLEGAL and "flag" in out_of_range.reason
    assert built == [None, None]


def test_refusals(tmp_path):
    with MessageStore.open(tmp_path / "s", config=StoreConfig(tmp_path / "s", max_message_size=10)) as store:
        assert store.put_batch("T", 0, []).status is PutMessageStatus.MESSAGE_ILLEGAL
        r = store.put_batch("T", 0, [b"a", b"b"], tags=["x"])
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "tags" in r.reason
        assert store.put_batch("T", 0, [b"x" * 11]).status is PutMessageStatus.MESSAGE_ILLEGAL
        assert store.put_batch("bad topic", 0, [b"x"]).status is PutMessageStatus.MESSAGE_ILLEGAL
        assert store.commit_log_max_offset() == 0


def test_result_ids_are_lazy_but_right(tmp_path):
    with MessageStore.open(tmp_path / "s") as store:
        r = store.put_batch("T", 1, [b"a", b"bb", b"ccc"], tags="x", keys=["1", "2", "3"])
        assert callable(r._msg_ids) and callable(r._offset_msg_ids)
        first = store.look_message_by_offset(r.physical_offset)
        got = store.get_message("g", "T", 1, 0, 10)
        assert r.msg_ids == [m.uniq_key for m in got.messages]
        assert r.offset_msg_ids == [m.offset_msg_id for m in got.messages]
        assert [m.body for m in got.messages] == [b"a", b"bb", b"ccc"] and first.body == b"a"
        assert r.count == 3 and r.queue_offset == 0 and r.wrote_bytes == sum(m.total_size for m in got.messages)
        assert [m.keys for m in got.messages] == ["1", "2", "3"] and {m.tags for m in got.messages} == {"x"}


def test_put_batch_keys_are_unique_and_fresh(tmp_path):
    with MessageStore.open(tmp_path / "s") as store:
        a = store.put_batch("T", 0, [b"x"] * 1000).msg_ids
        b = store.put_batch("T", 0, [b"x"] * 3).msg_ids + [store.put_message(Message("T", b"y"), 0).msg_ids[0]]
    assert len(set(a + b)) == len(a + b) and all(len(k) == 32 and k == k.upper() for k in a + b)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=5)), st.one_of(st.none(), st.text(max_size=5)),
                          st.binary(max_size=20)), min_size=1, max_size=6))
def test_any_tags_and_keys_same_bytes_or_same_refusal(tmp_path_factory, monkeypatch, items):
    tags, keys, bodies = (list(c) for c in zip(*items, strict=True))
    out = _both(tmp_path_factory.mktemp("h"), monkeypatch, [("T", 0, bodies, dict(tags=tags, keys=keys))],
                expect_columns=False)
    assert out[0] == out[1]
