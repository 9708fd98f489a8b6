"""The broker-view interface over a local store, the offset value type's JSON, and how pushdown is decided.

No Spark session here: these are the pieces the planner and executors use, called directly.
"""

from __future__ import annotations

import json
import sys
import time
import types

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.datasource import DataSourceReader

from rocketstream.errors import OptionError, RocketStreamError, StoreError
from rocketstream.spark import batch as batch_mod
from rocketstream.spark import positions
from rocketstream.spark.broker_view import BrokerView, open_views, queue_bounds
from rocketstream.spark.brokers import broker_locations
from rocketstream.spark.commits import commit_offsets
from rocketstream.spark.local_view import LocalBroker, LocalBrokerView
from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.spark.offsets import QueueOffsets
from rocketstream.spark.options import parse_options
from rocketstream.spark.schema import projection_for
from spark_stores import TOPIC, fill, store_rows


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("view") / "broker-a"
    fill(root, 20)
    time.sleep(0.05)
    split_ms = int(time.time() * 1000)
    time.sleep(0.05)
    fill(root, 8, start=20)
    return root, split_ms


def test_local_view_answers_what_planning_asks(store):
    root, split_ms = store
    view: BrokerView = LocalBroker("broker-a", str(root)).open()  # statically checked against the Protocol
    try:
        assert view.broker_name == "broker-a"
        assert TOPIC in view.topics() and list(view.queue_ids(TOPIC)) == [0, 1, 2, 3]
        assert [(view.min_offset(TOPIC, q), view.max_offset(TOPIC, q)) for q in range(4)] == [(0, 7)] * 4
        sizes = view.message_sizes(TOPIC, 0, 1, 4)
        assert sizes.dtype == np.int64 and sizes.shape == (3,) and (sizes > 0).all()
        # messages 20.. were stored after split_ms: queue 0 holds 0,4,..,24 -> offset 5 is message 20
        assert view.search_offset(TOPIC, 0, split_ms) == 5
        assert view.search_offset(TOPIC, 0, 0) == 0 and view.search_offset(TOPIC, 0, 1 << 50) == 7
        batches = list(view.read_ranges([(TOPIC, 1, 2, 5)], columns=["queueOffset", "brokerName", "tags"], tags=None,
                                        check_crc=True, fail_on_data_loss=True))
        table = pa.Table.from_batches(batches)
        assert table.column_names == ["queueOffset", "brokerName", "tags"]
        assert table.column("queueOffset").to_pylist() == [2, 3, 4]
        assert set(table.column("brokerName").to_pylist()) == {"broker-a"}
        tagged = pa.Table.from_batches(list(view.read_ranges([(TOPIC, 1, 0, 7)], columns=["tags"], tags={"TagA"},
                                                             check_crc=False, fail_on_data_loss=True)))
        want = store_rows(root, "broker-a", columns=["queueId", "tags"], tags={"TagA"})
        assert tagged.num_rows == sum(1 for r in want.to_pylist() if r["queueId"] == 1)
    finally:
        view.close()


def test_offsets_of_a_group_round_trip_through_the_view(tmp_path):
    root = tmp_path / "broker-a"
    fill(root, 8)
    view = LocalBrokerView("broker-a", str(root))
    assert view.query_offsets("g1", TOPIC, [0, 1]) == {0: -1, 1: -1}
    view.commit_offsets("g1", [{TOPIC: {0: 2}}, {TOPIC: {1: 1}}])
    view.commit_offsets("g1", [{TOPIC: {1: 2}}])  # other queues' entries are kept
    assert view.query_offsets("g1", TOPIC, [0, 1, 2]) == {0: 2, 1: 2, 2: -1}
    assert view._store is None  # offsets need no store files opened
    assert "TopicTest@g1" in (root / "config" / "consumerOffset.json").read_text()


def test_commit_through_views_checks_every_broker_before_writing(tmp_path):
    root = tmp_path / "broker-a"
    fill(root, 4)
    opts = parse_options({"path": str(root), "topic": TOPIC, "consumerGroup": "g"}, streaming=True)
    a, unknown = QueueKey(TOPIC, "broker-a", 0), QueueKey(TOPIC, "broker-x", 0)
    with open_views(broker_locations(opts)) as views:
        with pytest.raises(StoreError, match="broker-x"):
            commit_offsets(opts, views, {a: 1, unknown: 1})
        with pytest.raises(RocketStreamError, match="negative"):
            commit_offsets(opts, views, {a: -1})
        assert positions.read_committed(opts, views, [a]) == {a: -1}  # nothing written by either
        commit_offsets(opts, views, {a: 3})
        assert positions.read_committed(opts, views, [a]) == {a: 3}
        assert queue_bounds(views, [TOPIC])[a] == (0, 1)


def test_queue_offsets_json_is_what_checkpoints_hold():
    # a checkpoint line written by the stream reader before QueueOffsets existed (Spark: json.dumps(offset))
    line = '{"TopicTest": {"broker-a": {"0": 10, "1": 10, "2": 10, "10": 3}, "broker-b": {"0": 1}}}'
    offsets = QueueOffsets.from_json(line)
    assert offsets[QueueKey(TOPIC, "broker-a", 10)] == 3 and len(offsets) == 5
    assert offsets.to_json() == line == json.dumps(offsets.to_dict())
    assert QueueOffsets.from_dict(json.loads(line)) == offsets
    shuffled = QueueOffsets(dict(reversed(list(offsets.items()))))
    assert shuffled.to_json() == line  # key order never depends on insertion order
    assert offsets.by_broker() == {"broker-a": {TOPIC: {0: 10, 1: 10, 2: 10, 10: 3}}, "broker-b": {TOPIC: {0: 1}}}
    assert offsets == dict(offsets) and offsets != {}
    with pytest.raises(OptionError):
        QueueOffsets.from_json('{"TopicTest": {"broker-a": {"0": -1}}}')  # -1/-2 only where a user writes them
    assert QueueOffsets.from_json('{"T": {"b": {"0": -2}}}', allow_special=True)[QueueKey("T", "b", 0)] == -2


def test_pushdown_reader_only_in_sparks_pushdown_planner(store, monkeypatch):
    opts = parse_options({"path": str(store[0]), "topic": TOPIC}, streaming=False)
    projection = projection_for(None)
    # Anywhere but the pushdown planner (the driver, the plan_data_source_read worker) the reader must not
    # override pushFilters: that worker fails the query if it does while the conf is false.
    reader = batch_mod.batch_reader(opts, projection)
    assert type(reader) is batch_mod.RocketMQBatchReader
    assert reader.pushFilters.__func__ is DataSourceReader.pushFilters
    monkeypatch.setitem(sys.modules, "pyspark.sql.worker.data_source_pushdown_filters", types.ModuleType("x"))
    assert batch_mod.filter_pushdown_planner()
    assert type(batch_mod.batch_reader(opts, projection)) is batch_mod.RocketMQPushdownReader
    monkeypatch.delitem(sys.modules, "pyspark.sql.worker.data_source_pushdown_filters")
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="pyspark.sql.worker.data_source_pushdown_filters")
    monkeypatch.setitem(sys.modules, "__main__", main)  # the planner run as `python -m` (no daemon)
    assert batch_mod.filter_pushdown_planner()
    main.__spec__ = types.SimpleNamespace(name="pyspark.sql.worker.plan_data_source_read")
    assert not batch_mod.filter_pushdown_planner()


def test_pushdown_reader_leaves_not_filters_to_spark(store):
    from pyspark.sql.datasource import EqualTo, Not

    opts = parse_options({"path": str(store[0]), "topic": TOPIC}, streaming=False)
    reader = batch_mod.RocketMQPushdownReader(opts, projection_for(None))
    negated = Not(EqualTo(("tags",), "TagA"))
    assert list(reader.pushFilters([negated, EqualTo(("queueId",), 2)])) == [negated]
    assert reader.pushed.queue_ids == frozenset({2}) and reader.pushed.tags is None
