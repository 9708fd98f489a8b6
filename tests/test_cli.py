"""The rocketstream command against real stores: output, --json, exit statuses, read-only inspection."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import pytest

from rocketstream import cli
from rocketstream.store import Message, MessageStore, StoreConfig
from rocketstream.store.meta.offsets import ConsumerOffsetManager


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def store(tmp_path, capsys) -> Path:
    root = tmp_path / "broker-x"
    code, _, _ = run(capsys, "produce", "--store", str(root), "--topic", "T", "--count", "100",
                     "--tags", "TagA,TagB", "--queues", "2", "--body-size", "64")
    assert code == 0
    return root


def test_produce_writes_keys_tags_and_uniq_keys(store, capsys):
    code, out, _ = run(capsys, "query-msg", "--store", str(store), "--topic", "T", "--queue-id", "1",
                       "--offset", "2", "--json")
    assert code == 0
    row = json.loads(out)
    assert (row["topic"], row["queueId"], row["queueOffset"]) == ("T", 1, 2)
    assert row["brokerName"] == "broker-x"  # not the configured store: named after its directory
    assert row["keys"] == "key-5" and row["tags"] == "TagB"
    assert row["msgId"] == row["properties"]["UNIQ_KEY"] and len(row["msgId"]) == 32
    assert base64.b64decode(row["body"]).startswith(b"message-5 ")
    assert isinstance(row["storeTimestamp"], int) and row["storeTimestamp"] > 1_600_000_000_000


def test_produce_compresses_large_bodies_like_a_rocketmq_producer(tmp_path, capsys):
    root = tmp_path / "s"
    assert run(capsys, "produce", "--store", str(root), "--topic", "Big", "--count", "2", "--queues", "1",
               "--body-size", "5000")[0] == 0
    code, out, _ = run(capsys, "query-msg", "--store", str(root), "--topic", "Big", "--queue-id", "0",
                       "--offset", "1", "--json")
    row = json.loads(out)
    assert row["sysFlag"] & 0x1 and (row["sysFlag"] >> 8) & 0x7 == 3  # compressed, zlib
    assert len(base64.b64decode(row["body"])) == 5000  # shown decompressed


def test_query_by_msg_id_both_kinds(store, capsys):
    _, out, _ = run(capsys, "query-msg", "--store", str(store), "--topic", "T", "--queue-id", "0", "--offset", "7",
                    "--json")
    row = json.loads(out)
    for msg_id in (row["msgId"], row["offsetMsgId"]):
        code, out2, _ = run(capsys, "query-msg", "--store", str(store), "--msg-id", msg_id, "--json")
        assert code == 0 and json.loads(out2) == row


def test_topic_list_and_status(store, capsys):
    code, out, _ = run(capsys, "topic-list", "--store", str(store), "--json")
    assert code == 0 and json.loads(out)["topics"] == ["T"]
    code, out, _ = run(capsys, "topic-status", "--store", str(store), "--topic", "T", "--json")
    queues = json.loads(out)["queues"]
    assert [(q["brokerName"], q["queueId"], q["minOffset"], q["maxOffset"]) for q in queues] == [
        ("broker-x", 0, 0, 50), ("broker-x", 1, 0, 50)]
    assert all(q["lastUpdateTimestamp"] > 0 for q in queues)
    code, out, _ = run(capsys, "topic-status", "--store", str(store), "--topic", "T")
    assert "minOffset" in out and "broker-x" in out


def test_consumer_progress_shows_lag(store, capsys):
    ConsumerOffsetManager(store).commit("g1", "T", {0: 50, 1: 20})
    code, out, _ = run(capsys, "consumer-progress", "--store", str(store), "--group", "g1", "--json")
    data = json.loads(out)
    assert code == 0 and data["diffTotal"] == 30
    assert [(q["queueId"], q["brokerOffset"], q["consumerOffset"], q["diff"]) for q in data["queues"]] == [
        (0, 50, 50, 0), (1, 50, 20, 30)]
    code, _, err = run(capsys, "consumer-progress", "--store", str(store), "--group", "nobody")
    assert code == 2 and "--group" in err


def test_inspection_is_read_only(store, capsys):
    before = {p: p.stat().st_mtime_ns for p in store.rglob("*")}
    for argv in (["topic-list"], ["topic-status", "--topic", "T"], ["check"],
                 ["query-msg", "--topic", "T", "--queue-id", "0", "--offset", "0"]):
        assert run(capsys, *argv, "--store", str(store))[0] == 0
    after = {p: p.stat().st_mtime_ns for p in store.rglob("*")}
    assert after == before


def test_check_reports_a_flipped_body_byte_with_file_and_offset(store, capsys):
    assert run(capsys, "check", "--store", str(store))[0] == 0
    code, out, _ = run(capsys, "check", "--store", str(store), "--json")
    assert code == 0 and json.loads(out)["notes"] == []   # notes: what was seen that is not a problem
    with MessageStore.open(store, read_only=True) as s:
        rec = s.get_message("g", "T", 0, 3, 1).messages[0]
    commitlog = sorted((store / "commitlog").iterdir())[0]
    assert rec.body and not rec.sys_flag & 0x30   # IPv4 hosts: the body starts at byte 88
    body_at = rec.physical_offset + 88 + len(rec.body) // 2   # inside the body (the old formula hit PROPERTIES)
    with commitlog.open("r+b") as f:   # one byte flipped in place (the mapped file is 1 GiB)
        f.seek(body_at)
        byte = f.read(1)[0]
        f.seek(body_at)
        f.write(bytes([byte ^ 0xFF]))
    code, out, _ = run(capsys, "check", "--store", str(store), "--json")
    report = json.loads(out)
    assert code == 1 and not report["ok"]
    assert any(p["file"].endswith(commitlog.name) and p["offset"] == rec.physical_offset for p in report["problems"])


def test_errors_are_one_clean_line(tmp_path, capsys):
    code, out, err = run(capsys, "topic-list", "--store", str(tmp_path / "nope"))
    assert code == 2 and out == ""
    assert err.startswith("rocketstream topic-list: error:") and "nope" in err and "Traceback" not in err
    code, _, err = run(capsys, "produce", "--store", str(tmp_path / "s"), "--topic", "T", "--count", "-1")
    assert code == 2 and "--count" in err
    code, _, err = run(capsys, "query-msg", "--store", str(tmp_path / "s"), "--topic", "T")
    assert code == 2 and "--msg-id" in err


def _aged_small_store(root: Path, hours: float) -> list[Path]:
    """A store of 4 KiB commit-log files (100 messages) whose files are ``hours`` old; its files."""
    with MessageStore.open(root, config=StoreConfig(root, mapped_file_size_commit_log=4096,
                                                    mapped_file_size_consume_queue=320)) as s:
        for _i in range(100):
            s.put_message(Message("T", b"x" * 90), 0)
    files = sorted((root / "commitlog").iterdir())
    old = time.time() - hours * 3600
    for f in files:
        os.utime(f, (old, old))
    return files


def test_delete_expired_removes_old_commit_log_files(tmp_path, capsys):
    root = tmp_path / "ret"
    files = _aged_small_store(root, 3)
    code, out, _ = run(capsys, "delete-expired", "--store", str(root), "--reserved-hours", "1", "--json")
    deleted = json.loads(out)["deleted"]
    assert code == 0 and sorted(Path(p).name for p in deleted if "commitlog" in p) == [f.name for f in files[:-1]]
    assert sorted((root / "commitlog").iterdir()) == files[-1:]
    code, _, err = run(capsys, "delete-expired", "--store", str(root), "--reserved-hours", "-1")
    assert code == 2 and "--reserved-hours" in err


def test_produce_into_a_foreign_store_deletes_no_old_files(tmp_path, capsys):
    """conf/broker.conf's fileReservedTime belongs to the store it configures, not to a copy of a broker's."""
    root = tmp_path / "copy"
    files = _aged_small_store(root, 200)
    os.unlink(root / "config" / "rocketstream.json")    # as a real broker's store: not ours
    assert run(capsys, "produce", "--store", str(root), "--topic", "N", "--count", "3")[0] == 0
    assert sorted((root / "commitlog").iterdir())[:len(files)] == files
    code, _, err = run(capsys, "delete-expired", "--store", str(root))
    assert code == 2 and "--reserved-hours" in err
    assert sorted((root / "commitlog").iterdir())[:len(files)] == files
    code, out, _ = run(capsys, "delete-expired", "--store", str(root), "--reserved-hours", "100", "--json")
    assert code == 0 and json.loads(out)["reservedHours"] == 100
    assert files[0] not in sorted((root / "commitlog").iterdir())


def test_query_msg_by_key(store, capsys):
    code, out, _ = run(capsys, "query-msg", "--store", str(store), "--topic", "T", "--key", "key-7", "--json")
    doc = json.loads(out)
    assert code == 0 and (doc["topic"], doc["key"]) == ("T", "key-7")
    assert [(r["keys"], r["queueId"], r["queueOffset"]) for r in doc["messages"]] == [("key-7", 1, 3)]
    assert set(doc["messages"][0]) >= {"msgId", "offsetMsgId", "commitLogOffset", "body", "properties"}
    code, out, _ = run(capsys, "query-msg", "--store", str(store), "--topic", "T", "--key", "key-1")
    assert code == 0 and "key-1" in out and "key-10" not in out
    code, out, _ = run(capsys, "query-msg", "--store", str(store), "--topic", "T", "--key", "nope", "--json")
    assert code == 0 and json.loads(out)["messages"] == []
    code, out, _ = run(capsys, "query-msg", "--store", str(store), "--topic", "T", "--key", "key-7",
                       "--end-ms", "1", "--json")
    assert code == 0 and json.loads(out)["messages"] == []


def test_query_msg_by_key_option_errors(store, capsys):
    code, _, err = run(capsys, "query-msg", "--store", str(store), "--key", "key-7")
    assert code == 2 and "'--topic'" in err
    code, _, err = run(capsys, "query-msg", "--store", str(store), "--topic", "T", "--key", "key-7", "--max", "0")
    assert code == 2 and "'--max'" in err
    code, _, err = run(capsys, "query-msg", "--store", str(store), "--topic", "T", "--key", "k", "--offset", "1")
    assert code == 2 and "'--offset'" in err
    code, _, err = run(capsys, "query-msg", "--store", str(store), "--topic", "T", "--queue-id", "0",
                       "--offset", "0", "--max", "3")
    assert code == 2 and "'--max'" in err
