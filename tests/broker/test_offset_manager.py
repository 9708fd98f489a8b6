"""BrokerOffsetManager: RocketMQ's ConsumerOffsetManager, and no lost commits of other processes.

The other writers of ``config/consumerOffset.json`` are :class:`rocketstream.store.meta.offsets.
ConsumerOffsetManager` users (Spark local mode, the CLI), in this process or in another one.
"""

from __future__ import annotations

import multiprocessing
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstream.broker.offset_manager import BrokerOffsetManager
from rocketstream.errors import OffsetFileError, OptionError
from rocketstream.store.meta.offsets import (
    ConsumerOffsetManager,
    dump_consumer_offsets,
    load_consumer_offset_document,
    load_consumer_offsets,
)


def _file(root: Path) -> Path:
    return root / "config" / "consumerOffset.json"


def _disk(root: Path) -> dict[str, dict[int, int]]:
    return load_consumer_offsets(_file(root).read_bytes(), path=_file(root))


def _broker(root: Path) -> BrokerOffsetManager:
    m = BrokerOffsetManager(root)
    m.load()
    return m


@pytest.fixture(scope="module")
def real_config(real_stores) -> Path:
    """``config/`` of the clean store the real 4.9.8 broker wrote (tests/conftest.py)."""
    return Path(real_stores["clean"].root) / "config"


# ------------------------------------------------------------------------------- RocketMQ semantics


def test_real_broker_file_loads_and_persists_in_its_layout(real_config: Path, tmp_path: Path) -> None:
    shutil.copytree(real_config, tmp_path / "config")
    original = _file(tmp_path).read_bytes()
    table = load_consumer_offsets(original)
    assert table, "the real store has committed offsets"
    m = _broker(tmp_path)
    assert m.table() == table
    key = next(iter(table))
    topic, group = key.split("@")
    queue = next(iter(table[key]))
    assert m.query_offset(group, topic, queue) == table[key][queue]
    assert m.query_offset(group, topic, 999) == -1
    assert m.topics_of_group(group) == {k.split("@")[0] for k in table if k.split("@")[1] == group}

    m.persist()  # nothing changed: the real broker's file is left as it is
    assert _file(tmp_path).read_bytes() == original
    # the real broker's text is exactly our printer's (sorted keys, queue ids ascending, TAB indent)
    assert dump_consumer_offsets(table) == original.decode()

    m.commit_offset("127.0.0.1:5000", group, topic, queue, table[key][queue] + 10)
    m.commit_offset("127.0.0.1:5000", "NewGroup", "NewTopic", 3, 42)
    m.persist()
    expected = {k: dict(v) for k, v in table.items()}
    expected[key][queue] += 10
    expected["NewTopic@NewGroup"] = {3: 42}
    assert _file(tmp_path).read_text() == dump_consumer_offsets(expected)
    assert (tmp_path / "config" / "consumerOffset.json.bak").read_bytes() == original  # string2File's .bak
    assert _broker(tmp_path).table() == expected


def test_commit_query_and_java_table_operations(tmp_path: Path) -> None:
    m = _broker(tmp_path)
    assert m.table() == {}
    assert m.query_offset("g", "t", 0) == -1
    m.commit_offset("h", "g", "t", 0, 10)
    m.commit_offset("h", "g", "t", 1, 20)
    m.commit_offset("h", "g2", "t", 0, 5)
    m.commit_offset("h", "g", "u", 0, 7)
    m.commit_offset("h", "g@broadcast", "t", 0, 1)  # a three-part key: not a (topic, group) pair
    assert m.query_offset("g", "t", 1) == 20
    m.commit_offset("h", "g", "t", 1, 15)  # a decrease is taken (and logged), as in Java
    assert m.query_offset("g", "t", 1) == 15
    assert m.topics_of_group("g") == {"t", "u"}
    assert m.groups_of_topic("t") == {"g", "g2"}

    assert m.query_min_offset_in_all_group("t", "") == {0: 1, 1: 15}
    # filtered by the key's second part, as Java does: "t@g@broadcast" belongs to group "g"
    assert m.query_min_offset_in_all_group("t", "g,g2") == {}
    assert m.query_min_offset_in_all_group("t", "g") == {0: 5}
    assert m.table()["t@g"] == {0: 10, 1: 15}, "filtering must not remove entries (Java's side effect)"
    assert m.query_min_offset_in_all_group("t", ["g2"], min_offset_in_queue=lambda t, q: 3) == {0: 10, 1: 15}

    m.clone_offset("g", "g3", "t")
    assert m.table()["t@g3"] == {0: 10, 1: 15}
    m.clone_offset("nobody", "g4", "t")
    assert "t@g4" not in m.table()

    copy = m.table()
    copy["t@g"][0] = 999
    assert m.query_offset("g", "t", 0) == 10, "table() returns a copy"

    m.remove_offset("g")
    assert m.topics_of_group("g") == set()
    assert "t@g@broadcast" in m.table(), "removeOffset drops two-part keys only"
    m.persist()
    assert _disk(tmp_path) == m.table()


def test_out_of_range_commits_are_refused_naming_the_field(tmp_path: Path) -> None:
    m = _broker(tmp_path)
    with pytest.raises(OptionError, match="queueId"):
        m.commit_offset("h", "g", "t", 2**31, 1)
    with pytest.raises(OptionError, match="commitOffset"):
        m.commit_offset("h", "g", "t", 0, 2**63)
    assert m.table() == {}


def test_min_offset_filter_uses_the_groups_second_key_part(tmp_path: Path) -> None:
    m = _broker(tmp_path)
    m.commit_offset("h", "a", "t", 0, 100)
    m.commit_offset("h", "b", "t", 0, 50)
    m.commit_offset("h", "b", "t", 1, 70)
    assert m.query_min_offset_in_all_group("t", "b") == {0: 100}
    assert m.query_min_offset_in_all_group("t", None) == {0: 50, 1: 70}
    m.persist()
    m2 = BrokerOffsetManager(tmp_path, min_offset_in_queue=lambda t, q: 60)
    m2.load()
    assert m2.query_min_offset_in_all_group("t", "") == {0: 100, 1: 70}  # 50 < the queue's min: left out


# --------------------------------------------------------------------------- offsets of other processes


def test_external_commit_is_visible_to_queries_before_any_persist(tmp_path: Path) -> None:
    m = _broker(tmp_path)
    m.commit_offset("h", "g", "t", 0, 5)
    ConsumerOffsetManager(tmp_path).commit("spark", "t", {0: 11, 1: 12})
    assert m.query_offset("spark", "t", 1) == 12
    assert m.groups_of_topic("t") == {"g", "spark"}
    assert m.table() == {"t@g": {0: 5}, "t@spark": {0: 11, 1: 12}}


def test_broker_and_external_commits_both_survive_persist(tmp_path: Path) -> None:
    m = _broker(tmp_path)
    m.commit_offset("h", "g", "t", 0, 5)
    m.persist()
    m.commit_offset("h", "g", "t", 0, 6)  # not yet persisted
    m.commit_offset("h", "g", "t", 1, 60)
    external = ConsumerOffsetManager(tmp_path)
    external.commit("spark", "t", {0: 100})  # a new group
    external.commit("g", "t", {2: 200})  # a new queue of the broker's group
    external.commit("g", "other", {0: 7})  # a new topic of the broker's group
    m.persist()
    expected = {"t@g": {0: 6, 1: 60, 2: 200}, "t@spark": {0: 100}, "other@g": {0: 7}}
    assert _disk(tmp_path) == expected
    assert m.table() == expected
    assert _broker(tmp_path).table() == expected


def _external_commits(root: str, group: str, topic: str, count: int) -> None:
    external = ConsumerOffsetManager(root)
    for i in range(1, count + 1):
        external.commit(group, topic, {0: i, 1: 10 * i})


def test_commits_of_another_process_survive_a_persisting_broker(tmp_path: Path) -> None:
    """A separate process commits in a loop while the broker commits and persists every few ms."""
    m = _broker(tmp_path)
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=_external_commits, args=(str(tmp_path), "spark", "t", 150))
    child.start()
    n = 0
    while child.is_alive() or n < 50:
        n += 1
        m.commit_offset("h", "broker", "t", n % 4, n)
        if n % 5 == 0:
            m.persist()
        time.sleep(0.001)
    child.join(30)
    assert child.exitcode == 0
    m.persist()
    disk = _disk(tmp_path)
    assert disk["t@spark"] == {0: 150, 1: 1500}, "the other process's last commit is kept"
    assert disk["t@broker"] == {q: max(i for i in range(1, n + 1) if i % 4 == q) for q in range(4)}
    assert m.query_offset("spark", "t", 1) == 1500


def test_newest_wins_on_the_same_queue(tmp_path: Path) -> None:
    external = ConsumerOffsetManager(tmp_path)
    m = _broker(tmp_path)
    # the broker commits, then another process commits the same queue: the other process is newer
    m.commit_offset("h", "g", "t", 0, 5)
    external.commit("g", "t", {0: 9})
    assert m.query_offset("g", "t", 0) == 9
    m.persist()
    assert _disk(tmp_path)["t@g"] == {0: 9}
    # another process commits, then the broker commits the same queue: the broker is newer
    external.commit("g", "t", {0: 20})
    m.commit_offset("h", "g", "t", 0, 21)
    m.persist()
    assert _disk(tmp_path)["t@g"] == {0: 21}
    # both before one persist, interleaved on two queues
    m.commit_offset("h", "g", "t", 0, 30)
    external.commit("g", "t", {0: 31, 1: 41})
    m.commit_offset("h", "g", "t", 1, 42)
    m.persist()
    assert _disk(tmp_path)["t@g"] == {0: 31, 1: 42}


def test_removals_propagate_both_ways(tmp_path: Path) -> None:
    external = ConsumerOffsetManager(tmp_path)
    m = _broker(tmp_path)
    m.commit_offset("h", "a", "t", 0, 1)
    m.commit_offset("h", "b", "t", 0, 2)
    m.persist()
    external.remove_group("a")  # e.g. the CLI dropping a group
    assert m.query_offset("a", "t", 0) == -1
    m.remove_offset("b")
    external.commit("c", "t", {0: 3})
    m.persist()
    assert _disk(tmp_path) == {"t@c": {0: 3}}
    # a removal on disk loses against a newer broker commit of the same entry; it removes what was on
    # disk only (queue 1 was in the broker's memory alone: not removed, as a same-value rewrite is no change)
    m.commit_offset("h", "c", "t", 1, 4)
    external.remove_group("c")
    assert m.query_offset("c", "t", 0) == -1
    m.commit_offset("h", "c", "t", 0, 5)
    m.persist()
    assert _disk(tmp_path) == {"t@c": {0: 5, 1: 4}}


def test_rewriting_the_value_already_on_disk_is_no_change(tmp_path: Path) -> None:
    """Documented limit: a change is a difference from what the broker last saw on disk."""
    external = ConsumerOffsetManager(tmp_path)
    m = _broker(tmp_path)
    m.commit_offset("h", "g", "t", 0, 1)
    m.persist()
    m.commit_offset("h", "g", "t", 0, 2)
    external.commit("g", "t", {0: 1, 1: 1})  # queue 0 unchanged on disk, queue 1 new
    m.persist()
    assert _disk(tmp_path)["t@g"] == {0: 2, 1: 1}


def test_a_5x_document_keeps_and_advances_its_data_version(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    _file(tmp_path).write_text(dump_consumer_offsets({"t@g": {0: 1}}, data_version={"counter": 7, "timestamp": 1}))
    m = _broker(tmp_path)
    m.commit_offset("h", "g", "t", 0, 2)
    m.persist()
    doc = load_consumer_offset_document(_file(tmp_path).read_bytes())
    assert doc.table == {"t@g": {0: 2}}
    assert doc.data_version is not None and doc.data_version["counter"] == 8


# ------------------------------------------------------------------------------------------ bad files


def test_corrupt_file_without_backup_is_a_typed_error_and_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    _file(tmp_path).write_text('{"offsetTable":{"t@g":{0:12')
    m = BrokerOffsetManager(tmp_path)
    with pytest.raises(OffsetFileError) as info:
        m.load()
    assert str(_file(tmp_path)) in str(info.value)
    assert _file(tmp_path).read_text() == '{"offsetTable":{"t@g":{0:12'
    assert not (tmp_path / "config" / "consumerOffset.json.bak").exists()


def test_corrupt_main_file_falls_back_to_backup_and_persist_heals_it(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    good = dump_consumer_offsets({"t@g": {0: 3}})
    (tmp_path / "config" / "consumerOffset.json.bak").write_text(good)
    _file(tmp_path).write_text("garbage")
    m = _broker(tmp_path)
    assert m.query_offset("g", "t", 0) == 3
    m.commit_offset("h", "g", "t", 0, 4)
    m.persist()
    assert _disk(tmp_path) == {"t@g": {0: 4}}
    assert (tmp_path / "config" / "consumerOffset.json.bak").read_text() == good, "garbage never becomes the .bak"


def test_file_turning_corrupt_is_not_overwritten(tmp_path: Path) -> None:
    m = _broker(tmp_path)
    m.commit_offset("h", "g", "t", 0, 1)
    m.persist()
    _file(tmp_path).write_text("{ not json")
    m.commit_offset("h", "g", "t", 0, 2)  # commits and queries go on from memory
    assert m.query_offset("g", "t", 0) == 2
    with pytest.raises(OffsetFileError) as info:
        m.persist()
    assert str(_file(tmp_path)) in str(info.value)
    assert _file(tmp_path).read_text() == "{ not json"
    # repaired by another writer: merged and persisted again
    _file(tmp_path).write_text(dump_consumer_offsets({"t@g": {0: 1}, "t@x": {0: 9}}))
    m.persist()
    assert _disk(tmp_path) == {"t@g": {0: 2}, "t@x": {0: 9}}


# ---------------------------------------------------------------------------------- model-based test

GROUPS = ("g1", "g2")  # few entries: commits of both sides collide often
op = st.one_of(
    st.tuples(st.just("broker"), st.sampled_from(GROUPS), st.integers(0, 1)),
    st.tuples(st.just("external"), st.sampled_from(GROUPS), st.integers(0, 1)),
    st.tuples(st.just("query"), st.sampled_from(GROUPS), st.integers(0, 1)),
    st.tuples(st.just("persist"), st.just(""), st.just(0)),
    st.tuples(st.just("restart"), st.just(""), st.just(0)),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=40))
def test_no_committed_offset_is_ever_lost(ops: list[tuple[str, str, int]]) -> None:
    """Broker commits, external commits, queries, persists and restarts in any order: every query
    answers the newest commit of its queue, and the final file holds the newest value of every entry.

    Values increase, so every commit changes its entry (see test_rewriting_the_value_already_on_disk)."""
    root = Path(tempfile.mkdtemp(prefix="offsets-model-"))
    try:
        external = ConsumerOffsetManager(root)
        broker = _broker(root)
        model: dict[tuple[str, int], int] = {}
        for value, (kind, group, queue) in enumerate(ops, 1):
            if kind == "broker":
                broker.commit_offset("h", group, "t", queue, value)
                model[(group, queue)] = value
            elif kind == "external":
                external.commit(group, "t", {queue: value})
                model[(group, queue)] = value
            elif kind == "query":
                assert broker.query_offset(group, "t", queue) == model.get((group, queue), -1)
            elif kind == "persist":
                broker.persist()
            else:  # a broker restart: persist on shutdown, load on start
                broker.persist()
                broker = _broker(root)
        broker.persist()
        expected: dict[str, dict[int, int]] = {}
        for (group, queue), v in sorted(model.items()):
            expected.setdefault(f"t@{group}", {})[queue] = v
        assert broker.table() == expected
        assert _disk(root) == expected
        assert _broker(root).table() == expected
    finally:
        shutil.rmtree(root)
