"""The real RocketMQ 4.9.8 broker reads the index files we write: a store written and cleanly closed by
MessageStore (no ``abort``, so Java's start is normal and re-indexes nothing), a Java broker started over
it, and ``mqadmin queryMsgByKey`` (QUERY_MESSAGE -> IndexService.queryOffset) finds our messages.

The broker runs with the distribution's broker.conf geometry (maxHashSlotNum 100,000, maxIndexNum
400,000), so the store is written with the same settings (the geometry is not in the files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketstream.store import Message, MessageStore, StoreConfig
from tests.realbroker import peers

TOPIC = "IdxJava"


def _mqadmin(home: Path, *argv: str) -> str:
    proc = peers.mqadmin(home, *argv, timeout=180)
    assert proc.returncode == 0, f"mqadmin {argv}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return proc.stdout


def _found(out: str) -> set[str]:
    """The message ids mqadmin queryMsgByKey printed (rows after its '#Message ID' header)."""
    ids = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and len(parts[0]) == 32 and parts[1].isdigit():
            ids.add(parts[0])
    return ids


@pytest.fixture(scope="module")
def java_over_our_store(tmp_path_factory):
    try:
        peers.find_dist()
        peers.find_java()
    except peers.JavaUnavailable as e:
        pytest.skip(f"no Java RocketMQ 4.9.8: {e}")
    root = tmp_path_factory.mktemp("ours") / "store"
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=peers.COMMITLOG_FILE_SIZE,
                      mapped_file_size_consume_queue=peers.CQ_FILE_SIZE, max_hash_slot_num=100_000,
                      max_index_num=400_000)
    ids: dict[str, set[str]] = {}
    with MessageStore.open(root, config=cfg) as s:
        s.create_topic(TOPIC, 4)
        for i in range(20):
            r = s.put_message(Message(TOPIC, b"single %d" % i, keys=f"single-{i} shared"), i % 4)
            ids.setdefault(f"single-{i}", set()).update(r.msg_ids)
            ids.setdefault("shared", set()).update(r.msg_ids)
        r = s.put_batch(TOPIC, 1, [b"batch %d" % i for i in range(50)], keys=[f"batch-{i}" for i in range(50)])
        for i, m in enumerate(r.msg_ids):
            ids[f"batch-{i}"] = {m}
    assert not (root / "abort").exists()
    home = tmp_path_factory.mktemp("java")
    # killed at the end, not stopped: its clean stop takes 6-7 s and nothing here reads the store afterwards
    with peers.Cluster(home, root, clean_stop=False) as c:
        yield c, home, ids


# an mqadmin JVM per key (~4 s each): the default run asks for a single message's key, a key two messages
# share and the last of a batch; the first of the batch runs with -m slow
@pytest.mark.parametrize("key", ["single-3", "shared", pytest.param("batch-0", marks=pytest.mark.slow), "batch-49"])
def test_mqadmin_query_msg_by_key_finds_our_messages(java_over_our_store, key):
    c, home, ids = java_over_our_store
    out = _mqadmin(home, "queryMsgByKey", "-n", c.namesrv_addr, "-t", TOPIC, "-k", key)
    assert _found(out) == ids[key], out


def test_mqadmin_query_msg_by_key_finds_nothing_for_an_unknown_key(java_over_our_store):
    c, home, _ = java_over_our_store
    assert _found(_mqadmin(home, "queryMsgByKey", "-n", c.namesrv_addr, "-t", TOPIC, "-k", "no-such-key")) == set()
