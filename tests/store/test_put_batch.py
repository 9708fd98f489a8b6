"""Batch put fast path (put_batch.prepare_batch) against the general per-message rules: the same
commit-log and consume-queue bytes, the same results, the same refusals."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstream import codec
from rocketstream.store import (
    HostAddress,
    Message,
    MessageStore,
    PutMessageStatus,
    StoreConfig,
    message_store,
)
from rocketstream.store.write import put_batch
from storeutil import SMALL_INDEX, count_uniq_keys_from_zero, store_bytes

NOW = 1_700_000_000_000


@pytest.fixture
def deterministic(monkeypatch):
    """Fixed clocks (store time, default born time), so two stores can be compared byte for byte
    (with count_uniq_keys_from_zero)."""
    monkeypatch.setattr(message_store, "_now_ms", lambda: NOW)
    monkeypatch.setattr(time, "time_ns", lambda: NOW * 1_000_000)


def _put_both(tmp_path, monkeypatch, deterministic, batches, **cfg):
    """Put ``batches`` [(msgs, queue_id)] into one store per path; return (results, bytes) per path."""
    out = []
    for name, fast in (("fast", True), ("general", False)):
        root = tmp_path / name
        config = StoreConfig(root, mapped_file_size_commit_log=1 << 16, mapped_file_size_consume_queue=20 * 64,
                             **SMALL_INDEX, **cfg)
        with monkeypatch.context() as m:
            if not fast:
                m.setattr(message_store, "prepare_batch", lambda *a, **k: None)
            calls = []
            real = put_batch.prepare_batch

            def spy(*a, **k):  # used only in this iteration
                b = real(*a, **k)  # noqa: B023
                calls.append(b is not None)  # noqa: B023
                return b

            if fast:
                m.setattr(message_store, "prepare_batch", spy)
            count_uniq_keys_from_zero(m)
            with MessageStore.open(root, config=config) as store:
                results = [store.put_messages(msgs, q) for msgs, q in batches]
            if fast:
                assert all(calls), "expected the fast path to take every batch"
        out.append((results, store_bytes(root)))
    return out


def _msgs(n, topic="T", **kw):
    tags = kw.pop("tags", lambda i: ("TagA", None, "", "TagB")[i % 4])
    keys = kw.pop("keys", lambda i: (f"k{i}", None, ["a", "b"], "")[i % 4])
    return [Message(topic, bytes([i % 251]) * (i * 7 % 300), tags=tags(i), keys=keys(i), flag=i - 3,
                    born_timestamp=NOW - i if i % 2 else None, **kw) for i in range(n)]


CASES = {
    "mixed tags and keys": lambda: [(_msgs(40), 0), (_msgs(7), 1), (_msgs(40), 0)],
    "all tags and keys": lambda: [(_msgs(30, tags=lambda i: f"T{i % 3}", keys=lambda i: f"key-{i}"), 2)],
    "no tags, no keys": lambda: [(_msgs(5, tags=lambda i: None, keys=lambda i: None), 0)],
    "ipv6 born host": lambda: [(_msgs(9, born_host=HostAddress("::1", 7)), 0)],
    "born host as a tuple": lambda: [(_msgs(3, born_host=("10.1.2.3", 65535)), 3)],
    "empty bodies": lambda: [([Message("T", b"") for _ in range(4)], 0)],
    "same message object repeated": lambda: [([Message("T", b"abc", tags="x")] * 5, 0)],
    "rolls to the next file": lambda: [(_msgs(100), 0) for _ in range(8)],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_path_writes_the_same_bytes_as_the_general_path(tmp_path, monkeypatch, deterministic, case):
    (fast_results, fast_bytes), (gen_results, gen_bytes) = _put_both(tmp_path, monkeypatch, deterministic,
                                                                      CASES[case]())
    assert [r.status for r in fast_results] == [PutMessageStatus.PUT_OK] * len(fast_results)
    assert fast_results == gen_results
    assert fast_bytes.keys() == gen_bytes.keys()
    for name in fast_bytes:
        assert fast_bytes[name] == gen_bytes[name], name


def test_ipv6_store_host(tmp_path, monkeypatch, deterministic):
    (fr, fb), (gr, gb) = _put_both(tmp_path, monkeypatch, deterministic, [(_msgs(12), 0)],
                                   store_host=HostAddress("fe80::1", 10911))
    assert fr == gr and fb == gb


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.text(max_size=6),
                                                         st.lists(st.text(max_size=3), max_size=3))),
                min_size=1, max_size=6))
def test_any_tags_and_keys_same_bytes_or_same_refusal(tmp_path_factory, monkeypatch, deterministic, items):
    """Unicode, separators, empty strings: the fast path either matches or leaves them to prepare()."""
    msgs = [Message("T", b"body", tags=t, keys=k) for t, k in items]
    root = tmp_path_factory.mktemp("h")
    results = []
    for name, patched in (("a", False), ("b", True)):
        with monkeypatch.context() as m:
            if patched:
                m.setattr(message_store, "prepare_batch", lambda *a, **k: None)
            count_uniq_keys_from_zero(m)
            config = StoreConfig(root / name, mapped_file_size_commit_log=1 << 16, **SMALL_INDEX)
            with MessageStore.open(root / name, config=config) as store:
                results.append((store.put_messages(msgs, 0), store_bytes(root / name)))
    assert results[0] == results[1]


@pytest.mark.parametrize("bad", [
    dict(delay_level=2), dict(sys_flag=codec.TRANSACTION_PREPARED), dict(flag=2**31), dict(tags="a\x01b"),
    dict(keys="k\x02"), dict(born_host=HostAddress("not-an-ip", 1)), dict(body=b"x" * 2000),
])
def test_refusals_are_the_general_paths(tmp_path, bad):
    config = StoreConfig(tmp_path / "s", max_message_size=1000)
    kw = {"topic": "T", "body": b"ok", **bad}
    msgs = [Message("T", b"fine"), Message(**kw)]
    assert put_batch.prepare_batch(msgs, 0, store_host=config.store_host, max_message_size=1000) is None
    with MessageStore.open(tmp_path / "s", config=config) as store:
        try:
            r = store.put_messages(msgs, 0)
        except Exception as exc:   # the general path raises for a bad born host (encode_record)
            assert "born_host" in bad, exc
        else:
            assert r.status is not PutMessageStatus.PUT_OK
            assert store.commit_log_max_offset() == 0


def test_batch_is_never_compressed(tmp_path):
    config = StoreConfig(tmp_path / "s")   # compress_msg_body_over 4096
    with MessageStore.open(tmp_path / "s", config=config) as store:
        r = store.put_messages([Message("T", b"z" * 8192, tags="a") for _ in range(3)], 0)
        rec = store.look_message_by_offset(r.physical_offset)
        assert rec.sys_flag & codec.FLAG_COMPRESSED == 0 and rec.body == b"z" * 8192
        single = store.put_message(Message("T", b"z" * 8192), 0)
        assert store.look_message_by_offset(single.physical_offset).sys_flag & codec.FLAG_COMPRESSED


def test_uniq_keys_in_one_batch_are_increasing_and_unique():
    def block(n: int) -> list[str]:
        return [row.tobytes().decode("ascii") for row in codec.new_uniq_key_block(n)]

    keys = block(70_000) + [codec.new_uniq_key()] + block(3)
    assert len(set(keys)) == len(keys)
    assert [k[20:] for k in keys] == sorted(k[20:] for k in keys)
    assert all(len(k) == 32 and k == k.upper() for k in keys[:10])
