"""Stores written by a real broker (no config/rocketstream.json): retention, broker.conf, layouts we refuse,
index/ kept correct for Java, zero-length last files, 5.x checkpoint fields, the lock.

Layouts the 4.9.8 broker cannot produce are built by hand from a store of ours with its
``config/rocketstream.json`` removed (what makes a store foreign).
"""

from __future__ import annotations

import logging
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocketstream.errors import (
    NotAStoreError,
    StoreConfigError,
    StoreLockedError,
    UnsupportedLayoutError,
)
from rocketstream.store import Message, MessageStore, StoreConfig
from rocketstream.store.meta.config import parse_properties
from storeutil import CL_SIZE, CQ_SIZE, open_small

HOUR = 3600


def age(path: Path, hours: float) -> None:
    t = time.time() - hours * HOUR
    os.utime(path, (t, t))


def foreign_store(root: Path, n: int = 100, topic: str = "T") -> Path:
    """A store with several commit-log files, made foreign: as a Java broker leaves it (no rocketstream.json)."""
    with open_small(root) as st:
        for i in range(n):   # ~180 bytes each: about 20 per 4 KiB file
            st.put_message(Message(topic, b"r%03d" % i + b"." * 90, keys=f"k{i}"), i % 2)
    os.unlink(root / "config" / "rocketstream.json")
    return root


def cl_names(root: Path) -> list[str]:
    return sorted(os.listdir(root / "commitlog"))


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --- 1. retention ------------------------------------------------------------------------------
def test_writer_open_and_roll_delete_nothing_in_a_foreign_store(tmp_path):
    root = foreign_store(tmp_path / "s")
    names = cl_names(root)
    assert len(names) >= 5
    for n in names:
        age(root / "commitlog" / n, 200)     # older than the 72 h default: a broker that keeps 168+ h
    with MessageStore.open(root) as st:
        assert cl_names(root) == names
        while len(cl_names(root)) < len(names) + 2:   # roll twice: a roll is our retention tick
            st.put_message(Message("New", b"x" * 100), 0)
        assert st.max_offset("T", 0) == 50 and st.min_offset("T", 0) == 0
    assert cl_names(root)[:len(names)] == names
    assert not (root / "config" / "rocketstream.json").exists()   # never marked as ours
    with MessageStore.open(root) as st:                            # so a second open is still foreign
        assert cl_names(root)[:len(names)] == names and st.foreign


def test_explicit_retention_applies_to_a_foreign_store(tmp_path):
    root = foreign_store(tmp_path / "s")
    names = cl_names(root)
    for n in names:
        age(root / "commitlog" / n, 200)
    cfg = StoreConfig(root, mapped_file_size_commit_log=CL_SIZE, mapped_file_size_consume_queue=CQ_SIZE,
                      file_reserved_time_hours=168)
    with MessageStore.open(root, config=cfg) as st:
        assert cl_names(root) == names[-1:]
        assert st.max_offset("T", 0) == 50 and st.min_offset("T", 0) > 0


def test_delete_expired_on_a_foreign_store_needs_the_hours(tmp_path):
    root = foreign_store(tmp_path / "s")
    names = cl_names(root)
    for n in names:
        age(root / "commitlog" / n, 200)
    with MessageStore.open(root) as st:
        with pytest.raises(StoreConfigError, match="reserved_hours"):
            st.delete_expired_files()
        assert cl_names(root) == names
        st.delete_expired_files(reserved_hours=100)
        assert cl_names(root) == names[-1:]


def test_own_store_keeps_the_72h_default(tmp_path):
    root = tmp_path / "own"
    with open_small(root) as st:
        for i in range(100):
            st.put_message(Message("T", b"r%03d" % i + b"." * 90), 0)
    names = cl_names(root)
    for n in names:
        age(root / "commitlog" / n, 73)
    with MessageStore.open(root):   # unchanged behaviour (a guard, not a regression test)
        pass
    assert cl_names(root) == names[-1:]


def test_broker_conf_retention_of_that_store(tmp_path, monkeypatch):
    root = foreign_store(tmp_path / "repo" / "store")
    names = cl_names(root)
    for n in names:
        age(root / "commitlog" / n, 100)
    conf = tmp_path / "repo" / "conf" / "broker.conf"
    conf.parent.mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    conf.write_text("storePathRootDir = store\nfileReservedTime : 168\n")   # Properties separators
    with MessageStore.open(root) as st:
        assert st.config.file_reserved_time_hours == 168
    assert cl_names(root) == names
    conf.write_text("storePathRootDir store\ndeleteWhen=04\n")   # deleteWhen alone: Java's default 72 h
    with MessageStore.open(root) as st:
        assert st.config.retention_configured
    assert cl_names(root) == names[-1:]


# --- 2. broker.conf as java.util.Properties --------------------------------------------------------
def test_properties_syntax():
    text = ("# comment\n"
            "  ! another comment \\\n"
            "a=1\n"
            "b: 2\n"
            "c 3\n"
            "   d   =   4  \n"
            "e\t:\t5\n"
            "f=six\\\n"
            "    seven\\\n"
            "# not a comment\n"
            "g=\\t\\n\\u0041\\=\\:\\\\x\n"
            "h\\ i=j\r\n"
            "k=\\\\\n"
            "l\n"
            "m=first\n"
            "m=second\r"
            "n=last\\")
    assert parse_properties(text) == {
        "a": "1", "b": "2", "c": "3", "d": "4  ", "e": "5", "f": "sixseven# not a comment",
        "g": "\t\nA=:\\x", "h i": "j", "k": "\\", "l": "", "m": "second", "n": "last"}


def test_broker_conf_escapes_and_continuations(tmp_path):
    conf = tmp_path / "conf" / "broker.conf"
    conf.parent.mkdir()
    conf.write_bytes(b"brokerName   broker-\\u00e9\\\n    x\nmappedFileSizeCommitLog: 8192\n"
                     b"fileReservedTime 48\nlistenPort=10912\n")
    cfg = StoreConfig.from_broker_conf(conf)
    assert cfg.broker_name == "broker-\u00e9x" and cfg.mapped_file_size_commit_log == 8192
    assert cfg.file_reserved_time_hours == 48 and cfg.store_host.port == 10912
    conf.write_bytes(b"fileReservedTime=48 \n")   # Java's parseInt refuses it and keeps 72: we refuse too
    with pytest.raises(StoreConfigError, match="fileReservedTime"):
        StoreConfig.from_broker_conf(conf)
    conf.write_bytes(b"brokerName=\\u00zz\n")
    with pytest.raises(StoreConfigError, match="uxxxx"):
        StoreConfig.from_broker_conf(conf)


# --- 3. produce never creates over store data ----------------------------------------------------
def dledger_store(root: Path) -> Path:
    """A DLedger store as 4.9.8 leaves it: dledger-<selfId>/data and consume queues, no commitlog/."""
    foreign_store(root)
    data = root / "dledger-n0" / "data"
    data.mkdir(parents=True)
    for name in cl_names(root):
        os.rename(root / "commitlog" / name, data / name)
    os.rmdir(root / "commitlog")
    return root


def test_produce_over_a_dledger_store_is_refused_and_changes_nothing(tmp_path, capsys):
    from rocketstream import cli

    root = dledger_store(tmp_path / "d")
    before = tree(root)
    code = cli.main(["produce", "--store", str(root), "--topic", "N", "--count", "3"])
    err = capsys.readouterr().err
    assert code == 2 and "enableDLegerCommitLog" in err and "dledger-n0" in err
    assert tree(root) == before
    with pytest.raises(UnsupportedLayoutError, match="enableDLegerCommitLog") as info:
        MessageStore.open(root, read_only=True)
    assert info.value.path.endswith("dledger-n0")
    with pytest.raises(UnsupportedLayoutError):
        MessageStore.open(root, create=True)
    assert tree(root) == before


def test_create_over_queues_without_a_commit_log_is_refused(tmp_path, capsys):
    from rocketstream import cli

    root = foreign_store(tmp_path / "s")
    for name in cl_names(root):      # storePathCommitLog elsewhere: the root has queues only
        os.unlink(root / "commitlog" / name)
    os.rmdir(root / "commitlog")
    before = tree(root)
    with pytest.raises(NotAStoreError, match="consumequeue/"):
        MessageStore.open(root, create=True)
    assert cli.main(["produce", "--store", str(root), "--topic", "N", "--count", "3"]) == 2
    assert "consumequeue/" in capsys.readouterr().err
    assert tree(root) == before


# --- 4. layouts: refused for reads and writes ------------------------------------------------------
def _batch_cq(root: Path) -> None:
    (root / "batchconsumequeue" / "BT" / "0").mkdir(parents=True)
    (root / "batchconsumequeue" / "BT" / "0" / ("0" * 20)).write_bytes(bytes(46 * 4))


def _rocksdb_cq(root: Path) -> None:
    (root / "consumequeue" / "CURRENT").write_text("MANIFEST-000005\n")
    (root / "consumequeue" / "MANIFEST-000005").write_bytes(b"\0" * 64)


def _rocksdb_config(root: Path) -> None:
    (root / "config" / "rdb").mkdir(parents=True)
    (root / "config" / "rdb" / "CURRENT").write_text("MANIFEST-000001\n")


def _multi_path(root: Path) -> None:
    os.rename(root / "commitlog" / cl_names(root)[1], root / "elsewhere")   # file 1 lives on another disk


@pytest.mark.parametrize("build, setting, where", [
    (_batch_cq, "queue.type=BatchCQ", "batchconsumequeue"),
    (_rocksdb_cq, "storeType=defaultRocksDB", "CURRENT"),
    (_rocksdb_config, "storeType=defaultRocksDB", "rdb"),
    (_multi_path, "storePathCommitLog", "commitlog"),
])
def test_unsupported_layout_is_refused_for_reads_and_writes(tmp_path, build, setting, where):
    root = foreign_store(tmp_path / "s")
    build(root)
    before = tree(root)
    for read_only in (True, False):
        with pytest.raises(UnsupportedLayoutError) as info:
            MessageStore.open(root, read_only=read_only)
        assert setting in str(info.value) and where in info.value.path
    assert tree(root) == before


@pytest.mark.parametrize("conf_line, setting", [
    ("enableDLegerCommitLog=true", "enableDLegerCommitLog=true"),
    ("storeType=defaultRocksDB", "storeType=defaultRocksDB"),
    ("storePathCommitLog=/data/a/commitlog,/data/b/commitlog", "storePathCommitLog=/data/a/commitlog,/data/b"),
    ("readOnlyCommitLogStorePaths=/old/commitlog", "readOnlyCommitLogStorePaths=/old/commitlog"),
])
def test_broker_conf_layout_settings_are_refused(tmp_path, conf_line, setting):
    root = foreign_store(tmp_path / "s")
    conf = tmp_path / "conf" / "broker.conf"
    conf.parent.mkdir()
    conf.write_text(f"storePathRootDir={root}\n{conf_line}\n")
    cfg = StoreConfig.from_broker_conf(conf)
    for read_only in (True, False):
        with pytest.raises(UnsupportedLayoutError, match=setting.replace(".", r"\.")):
            MessageStore.open(root, read_only=read_only, config=cfg)


def test_own_commit_log_path_in_broker_conf_is_fine(tmp_path):
    root = foreign_store(tmp_path / "s")
    conf = tmp_path / "conf" / "broker.conf"
    conf.parent.mkdir()
    conf.write_text(f"storePathRootDir={root}\nstorePathCommitLog={root}/commitlog\n"
                    f"mappedFileSizeCommitLog={CL_SIZE}\nmappedFileSizeConsumeQueue={CQ_SIZE}\n")
    with MessageStore.open(root, read_only=True, config=StoreConfig.from_broker_conf(conf)) as ro:
        assert ro.max_offset("T", 0) == 50


def _cq_ext(root: Path) -> None:
    (root / "consumequeue_ext" / "T" / "0").mkdir(parents=True)
    (root / "consumequeue_ext" / "T" / "0" / ("0" * 20)).write_bytes(bytes(64))


def _lmq(root: Path) -> None:
    os.rename(root / "consumequeue" / "T" / "1", root / "consumequeue" / "%LMQ%room1")
    (root / "consumequeue" / "T" / "1").mkdir()


@pytest.mark.parametrize("build, setting", [(_cq_ext, "enableConsumeQueueExt=true"), (_lmq, "enableLmq")])
def test_read_only_layouts_refuse_a_writer_with_the_reason(tmp_path, build, setting):
    root = foreign_store(tmp_path / "s")
    build(root)
    before = tree(root)
    with MessageStore.open(root, read_only=True) as ro:
        assert ro.max_offset("T", 0) == 50
    with pytest.raises(UnsupportedLayoutError, match="read-only") as info:
        MessageStore.open(root)
    assert setting in str(info.value) and info.value.writer_only
    assert tree(root) == before


# --- 5. index/: our writer continues the broker's index files ----------------------------------------
def _checkpoint(root: Path) -> tuple[int, int, int]:
    return struct.unpack_from(">qqq", (root / "checkpoint").read_bytes())


def _index_end(root: Path) -> int:
    (path,) = sorted((root / "index").iterdir())
    return struct.unpack_from(">q", path.read_bytes()[:40], 24)[0]


def test_append_to_a_store_with_index_continues_its_index(tmp_path):
    """The writer indexes what it appends in the existing file (its geometry: 1000 slots here, not
    RocketMQ's default) and leaves no ``abort``: Java's next start is normal and reads the index."""
    root = foreign_store(tmp_path / "s")
    index0 = _checkpoint(root)[2]
    with MessageStore.open(root) as st:
        r = st.put_message(Message("New", b"x", keys="mine"), 0)
    assert not (root / "abort").exists()
    assert _checkpoint(root)[2] == index0                  # moves only when a full file rolls over
    assert len(list((root / "index").iterdir())) == 1 and _index_end(root) == r.physical_offset
    with MessageStore.open(root, read_only=True) as st:
        assert [m.physical_offset for m in st.query_message("New", "mine")] == [r.physical_offset]
        assert [m.keys for m in st.query_message("T", "k7")] == ["k7"]


def test_no_append_to_a_store_with_index_leaves_it_as_it_was(tmp_path):
    root = foreign_store(tmp_path / "s")
    cp = _checkpoint(root)
    (index,) = (root / "index").iterdir()
    before = index.read_bytes()
    with MessageStore.open(root) as st:
        assert st.max_offset("T", 0) == 50
    assert not (root / "abort").exists() and _checkpoint(root) == cp and index.read_bytes() == before


def test_found_abort_with_index_recovers_and_completes_the_index(tmp_path):
    """A crashed broker's store: recovery keeps its sound index file, and indexes what it lacks."""
    root = foreign_store(tmp_path / "s")
    (index,) = (root / "index").iterdir()
    raw = bytearray(index.read_bytes())
    count = struct.unpack_from(">i", raw, 36)[0]
    (root / "abort").touch()
    with MessageStore.open(root) as st:
        st.put_message(Message("New", b"x", keys="mine"), 0)
    assert not (root / "abort").exists()
    assert struct.unpack_from(">i", index.read_bytes(), 36)[0] == count + 2    # UNIQ_KEY and "mine"
    with MessageStore.open(root, read_only=True) as st:
        assert [m.keys for m in st.query_message("New", "mine")] == ["mine"]


# --- 6. zero-length last file, 5.x checkpoint ------------------------------------------------------
@pytest.mark.parametrize("where", ["commitlog", "consumequeue/T/0"])
def test_zero_length_last_file_is_skipped_by_readers_and_removed_by_writers(tmp_path, where):
    root = foreign_store(tmp_path / "s")
    directory = root / where
    last = sorted(os.listdir(directory))[-1]
    size = CL_SIZE if where == "commitlog" else CQ_SIZE
    empty = directory / f"{int(last) + size:020d}"
    empty.touch()
    with MessageStore.open(root, read_only=True) as ro:
        assert ro.max_offset("T", 0) == 50
        assert ro.get_message("g", "T", 0, 49, 1).messages
    assert empty.exists()
    with MessageStore.open(root) as st:
        assert st.max_offset("T", 0) == 50
        st.put_message(Message("T", b"after"), 0)
        assert st.max_offset("T", 0) == 51
    with MessageStore.open(root, read_only=True) as ro:
        assert ro.get_message("g", "T", 0, 50, 1).messages[0].body == b"after"


def test_checkpoint_5x_fields_survive_a_writer(tmp_path):
    root = foreign_store(tmp_path / "s")
    data = bytearray((root / "checkpoint").read_bytes())
    struct.pack_into(">qq", data, 24, 123456789, 987654321)   # masterFlushedOffset, confirmPhyOffset
    data[4000:4008] = b"5.x-tail"
    (root / "checkpoint").write_bytes(bytes(data))
    with MessageStore.open(root) as st:
        st.put_message(Message("New", b"x"), 0)
    after = (root / "checkpoint").read_bytes()
    assert after[24:40] == bytes(data[24:40]) and after[4000:4008] == b"5.x-tail"


def test_short_checkpoint_is_read_as_java_maps_it(tmp_path):
    root = foreign_store(tmp_path / "s")
    after = (root / "checkpoint").read_bytes()
    (root / "checkpoint").write_bytes(after[:24])   # a short file: FileChannel.map extends it
    with MessageStore.open(root, read_only=True) as ro:
        assert ro.checkpoint.physic_msg_timestamp == struct.unpack_from(">q", after)[0]
    with MessageStore.open(root) as st:
        assert st.max_offset("T", 0) == 50
    assert len((root / "checkpoint").read_bytes()) == 4096


# --- 7. the lock --------------------------------------------------------------------------------
HOLD = ("import fcntl, os, sys, time\n"
        "fd = os.open(os.path.join(sys.argv[1], 'lock'), os.O_RDWR | os.O_CREAT)\n"
        "fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)\nprint('held', flush=True)\ntime.sleep(60)\n")


def test_reader_warns_when_another_process_holds_the_lock(tmp_path, caplog):
    root = foreign_store(tmp_path / "s")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with caplog.at_level(logging.WARNING, logger="rocketstream"):
            with MessageStore.open(root, read_only=True) as ro:
                assert ro.max_offset("T", 0) == 50
        assert any(str(holder.pid) in r.getMessage() and "lock" in r.getMessage() for r in caplog.records)
        with pytest.raises(StoreLockedError, match=f"process {holder.pid}.*running RocketMQ broker"):
            MessageStore.open(root)
    finally:
        holder.kill()
        holder.wait()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rocketstream"):
        with MessageStore.open(root) as st, MessageStore.open(root, read_only=True) as ro:   # our own lock
            assert ro.max_offset("T", 0) == 50
        assert not [r for r in caplog.records if "locked" in r.getMessage()]
    with MessageStore.open(root) as st:     # the reader's probe did not drop the writer's lock
        assert st.max_offset("T", 0) == 50
