"""Batch reads through Spark equal the store's own reads; positions, filters, brokers, data loss."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from rocketstream.errors import DataLossError
from rocketstream.spark import batch as batch_mod
from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.spark.options import parse_options
from rocketstream.spark.schema import projection_for
from spark_stores import TOPIC, fill, max_offsets, store_rows, trimmed_store

ORDER = ["brokerName", "queueId", "queueOffset"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """broker-a: 60 messages (some compressed) then, after a pause, 20 more; broker-b: 12 messages."""
    base = tmp_path_factory.mktemp("batch")
    a, b = base / "broker-a", base / "broker-b"
    fill(a, 60, big_every=7)
    time.sleep(0.05)
    split_ms = int(time.time() * 1000)
    time.sleep(0.05)
    fill(a, 20, start=60)
    fill(b, 12, queues=2)
    return {"a": a, "b": b, "split_ms": split_ms}


def load(spark, root, schema=None, **options):
    reader = spark.read.format("rocketmq").option("topic", TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v)
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load(str(root)) if root is not None else reader.load()


def expected(spark, table: pa.Table, schema=None):
    df = spark.createDataFrame(table) if schema is None else spark.createDataFrame(table.to_pylist(), schema)
    return df


def test_full_read_equals_store_read(spark, stores):
    df = load(spark, stores["a"])
    want = expected(spark, store_rows(stores["a"], "broker-a"))
    assert_df_equality(df.orderBy(ORDER), want.orderBy(ORDER), ignore_nullable=True)
    assert df.count() == 80


def test_broker_name_defaults_to_directory_name_and_option_overrides(spark, stores):
    assert {r.brokerName for r in load(spark, stores["a"]).select("brokerName").distinct().collect()} == {"broker-a"}
    rows = load(spark, stores["a"], brokerName="broker-x").select("brokerName").distinct().collect()
    assert [r.brokerName for r in rows] == ["broker-x"]


def test_narrow_schema(spark, stores):
    df = load(spark, stores["a"], schema="queueOffset BIGINT, queueId INT, tags STRING")
    assert df.columns == ["queueOffset", "queueId", "tags"]
    want = store_rows(stores["a"], "broker-a", columns=["queueOffset", "queueId", "tags"])
    assert sorted(map(tuple, df.collect())) == sorted((r["queueOffset"], r["queueId"], r["tags"])
                                                      for r in want.to_pylist())


def test_a_daemon_worker_freezes_its_heap_once_after_its_first_task(stores, monkeypatch):
    """PySpark's daemon runs gc.collect() after every task of a reused worker (pyspark/daemon.py): a worker
    moves what outlives its first task to the permanent generation, once; other processes are left alone."""
    import importlib.machinery
    import sys
    import types

    from rocketstream.spark import tasks as tasks_mod

    calls: list[str] = []
    monkeypatch.setattr(tasks_mod.gc, "collect", lambda *a: calls.append("collect") or 0)
    monkeypatch.setattr(tasks_mod.gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(tasks_mod, "_heap_frozen", False)
    opts = parse_options({"path": str(stores["a"]), "topic": TOPIC}, streaming=False)
    reader = batch_mod.RocketMQBatchReader(opts, projection_for(None))
    task = reader.partitions()[0]
    assert sum(b.num_rows for b in reader.read(task)) > 0
    assert calls == []  # this test process is no PySpark daemon worker
    daemon_main = types.ModuleType("__main__")
    daemon_main.__spec__ = importlib.machinery.ModuleSpec("pyspark.daemon", None)
    monkeypatch.setitem(sys.modules, "__main__", daemon_main)
    batches = reader.read(task)
    next(batches)
    assert calls == []  # not before the task's last batch
    for _ in batches:
        pass
    assert calls == ["collect", "freeze"]
    assert sum(b.num_rows for b in reader.read(task)) > 0
    assert calls == ["collect", "freeze"]  # once per process


def test_an_executor_read_does_not_import_pandas(stores):
    """pyarrow's pa.array / pa.scalar / BooleanArray.to_numpy import pandas on first use (~0.3 s of CPU in
    every fresh Spark worker); a task's read, with and without a tag filter, uses none of them."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from rocketstream.spark.source import RocketMQDataSource\n"
        "for sub in ('*', 'TagA'):\n"
        f"    reader = RocketMQDataSource({{'path': {str(stores['a'])!r}, 'topic': {TOPIC!r},"
        " 'subExpression': sub}).reader(None)\n"
        "    rows = sum(b.num_rows for t in reader.partitions() for b in reader.read(t))\n"
        "    assert rows > 0, (sub, rows)\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_narrow_schema_is_what_executors_read(stores):
    opts = parse_options({"path": str(stores["a"]), "topic": TOPIC}, streaming=False)
    from pyspark.sql.types import IntegerType, StructField, StructType

    reader = batch_mod.RocketMQBatchReader(opts, projection_for(StructType([StructField("queueId", IntegerType())])))
    tasks = reader.partitions()
    assert tasks and all(t.columns == ("queueId",) for t in tasks)
    batches = [b for t in tasks for b in reader.read(t)]
    assert all(b.schema.names == ["queueId"] for b in batches)
    assert sum(b.num_rows for b in batches) == 80


def test_starting_and_ending_offsets_json(spark, stores):
    start = json.dumps({TOPIC: {"broker-a": {"0": 5, "1": -2}}})
    end = json.dumps({TOPIC: {"broker-a": {"0": 10, "2": 3, "3": -1}}})
    rows = load(spark, stores["a"], startingOffsets=start, endingOffsets=end).select("queueId", "queueOffset").collect()
    got = sorted((r.queueId, r.queueOffset) for r in rows)
    maxes = max_offsets(stores["a"])
    want = sorted([(0, o) for o in range(5, 10)] + [(1, o) for o in range(maxes[1])]
                  + [(2, o) for o in range(3)] + [(3, o) for o in range(maxes[3])])
    assert got == want


def test_latest_start_reads_nothing(spark, stores):
    assert load(spark, stores["a"], startingOffsets="latest").count() == 0


def test_timestamps_first_message_at_or_after(spark, stores):
    split = stores["split_ms"]
    after = load(spark, stores["a"], startingTimestamp=str(split))
    assert sorted(int(r.body.decode().split("-")[1]) for r in after.select("body").collect()) == list(range(60, 80))
    before = load(spark, stores["a"], endingTimestamp=str(split))
    assert before.count() == 60


def test_sub_expression_tags(spark, stores):
    df = load(spark, stores["a"], subExpression="TagA || TagB")
    assert {r.tags for r in df.select("tags").distinct().collect()} == {"TagA", "TagB"}
    assert df.count() == len([i for i in range(80) if i % 3 != 2])


@pytest.mark.parametrize("pushdown", ["false", "true"])
def test_filters_exact_with_and_without_pushdown(spark, stores, pushdown):
    spark.conf.set("spark.sql.python.filterPushdown.enabled", pushdown)
    try:
        df = load(spark, stores["a"])
        full = df.toPandas()
        cases = [
            ("tags = 'TagA'", full[full.tags == "TagA"]),
            ("tags IN ('TagA', 'TagB') AND queueId = 1", full[full.tags.isin(["TagA", "TagB"]) & (full.queueId == 1)]),
            ("queueOffset >= 3 AND queueOffset < 6", full[(full.queueOffset >= 3) & (full.queueOffset < 6)]),
            ("queueId IN (0, 2) AND queueOffset > 15", full[full.queueId.isin([0, 2]) & (full.queueOffset > 15)]),
        ]
        for condition, want in cases:
            got = df.filter(condition).select("queueId", "queueOffset").collect()
            assert sorted(map(tuple, got)) == sorted(zip(want.queueId, want.queueOffset, strict=True)), condition
        ts = full.storeTimestamp.sort_values().iloc[40]
        got = df.filter(df.storeTimestamp >= ts.to_pydatetime()).count()
        assert got == int((full.storeTimestamp >= ts).sum())
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")


@pytest.mark.parametrize("pushdown", ["false", "true"])
def test_filters_reach_the_reader_only_with_pushdown_enabled(spark, stores, pushdown):
    """The conf decides: pushed queue filters shrink the plan (one task for queue 1 instead of four);
    without pushdown every query still runs (no DATA_SOURCE_PUSHDOWN_DISABLED) and Spark filters."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", pushdown)
    try:
        df = load(spark, stores["a"], numPartitions="4").filter("queueId = 1")
        assert df.rdd.getNumPartitions() == (1 if pushdown == "true" else 4)
        assert {r.queueId for r in df.select("queueId").collect()} == {1}
        # a negated filter is left to Spark (the pushdown reader used to fail on Not's missing attribute)
        assert load(spark, stores["a"]).filter("tags != 'TagA'").count() == len([i for i in range(80) if i % 3 == 1])
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")


def test_pushdown_reader_applies_filters_itself(stores):
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan

    opts = parse_options({"path": str(stores["a"]), "topic": TOPIC}, streaming=False)
    reader = batch_mod.RocketMQPushdownReader(opts, projection_for(None))
    rejected = list(reader.pushFilters([EqualTo(("tags",), "TagB"), In(("queueId",), (1, 3)),
                                        GreaterThanOrEqual(("queueOffset",), 2), LessThan(("queueOffset",), 9),
                                        EqualTo(("keys",), "k1")]))
    assert rejected == [EqualTo(("keys",), "k1")]
    rows = pa.Table.from_batches([b for t in reader.partitions() for b in reader.read(t)]).to_pylist()
    assert rows and all(r["tags"] == "TagB" and r["queueId"] in (1, 3) and 2 <= r["queueOffset"] < 9 for r in rows)


def test_multi_broker_topic(spark, stores):
    df = spark.read.format("rocketmq").option("topic", TOPIC).option(
        "brokers", f"broker-a={stores['a']},broker-b={stores['b']}").load()
    want = pa.concat_tables([store_rows(stores["a"], "broker-a"), store_rows(stores["b"], "broker-b")])
    assert_df_equality(df.orderBy(ORDER), expected(spark, want).orderBy(ORDER), ignore_nullable=True)
    start = json.dumps({TOPIC: {"broker-b": {"0": 4}}})
    df = spark.read.format("rocketmq").option("topic", TOPIC).option("startingOffsets", start).option(
        "brokers", f"broker-a={stores['a']},broker-b={stores['b']}").load()
    assert df.count() == 80 + 12 - 4


def test_partition_planning(stores):
    def plan(**extra):
        opts = parse_options({"path": str(stores["a"]), "topic": TOPIC, **extra}, streaming=False)
        return batch_mod.RocketMQBatchReader(opts, projection_for(None)).partitions()

    assert len(plan(numPartitions="1")) == 1
    assert len(plan(numPartitions="2")) == 2
    two = plan(numPartitions="2", allocateStrategy="AVG_BY_CIRCLE")
    assert [[r[2] for r in t.ranges] for t in two] == [[0, 2], [1, 3]]
    split = plan(numPartitions="1", maxMessagesPerPartition="5")
    assert all(end - start <= 5 for t in split for (*_, start, end) in t.ranges)
    assert sum(end - start for t in split for (*_, start, end) in t.ranges) == 80
    assert len(plan(allocateStrategy="CONSISTENT_HASH", numPartitions="3")) >= 1
    config = plan(allocateStrategy="CONFIG", allocateQueues="broker-a:1,broker-a:2")
    assert sorted(r[2] for t in config for r in t.ranges) == [1, 2]
    # default (no numPartitions): Kafka-like, small queue ranges packed into one task, whatever the cores
    assert [[r[2] for r in t.ranges] for t in plan()] == [[0, 1, 2, 3]]
    assert [[(r[2], r[3], r[4]) for r in t.ranges] for t in plan(maxMessagesPerPartition="15")] == [
        [(0, 0, 10)], [(0, 10, 20)], [(1, 0, 10)], [(1, 10, 20)], [(2, 0, 10)], [(2, 10, 20)], [(3, 0, 10)],
        [(3, 10, 20)]]
    assert len(plan(maxMessagesPerPartition="40")) == 2


def test_data_loss_rules(stores):
    from rocketstream.spark.positions import QueueBounds, check_starts

    q = QueueKey(TOPIC, "broker-a", 0)
    bounds = {q: QueueBounds(10, 20)}
    with pytest.raises(DataLossError) as err:
        check_starts({q: 4}, bounds, True)
    assert (err.value.topic, err.value.broker_name, err.value.queue_id) == (TOPIC, "broker-a", 0)
    assert (err.value.lost_from, err.value.lost_to) == (4, 10)
    assert check_starts({q: 4}, bounds, False) == {q: 10}
    with pytest.raises(DataLossError, match="beyond"):
        check_starts({q: 21}, bounds, False)


def test_offsets_beyond_the_end_fail_clearly(spark, stores):
    start = json.dumps({TOPIC: {"broker-a": {"0": 10_000}}})
    with pytest.raises(Exception, match="beyond the queue's max offset"):
        load(spark, stores["a"], startingOffsets=start).count()


def test_bad_options_fail_the_query_naming_the_option(spark, stores):
    with pytest.raises(Exception, match="(?i)startingOffsetz"):
        load(spark, stores["a"], startingOffsetz="earliest").count()
    with pytest.raises(Exception, match="numPartitions"):
        load(spark, stores["a"], numPartitions="zero").count()
    with pytest.raises(Exception, match="no queue of"):
        spark.read.format("rocketmq").option("topic", "NoSuchTopic").load(str(stores["a"])).count()


@pytest.fixture(scope="module")
def trimmed(tmp_path_factory):
    root = trimmed_store(tmp_path_factory.mktemp("trimmed") / "broker-a")
    assert max_offsets(root) == {0: 50, 1: 50}
    return root


def test_data_loss_in_batch_both_ways(spark, trimmed):
    start = json.dumps({TOPIC: {"broker-a": {"0": 5}}})
    with pytest.raises(Exception, match=r"messages \[5, 40\) of topic 'TopicTest' on broker 'broker-a' queue 0"):
        load(spark, trimmed, startingOffsets=start).count()
    rows = load(spark, trimmed, startingOffsets=start, failOnDataLoss="false").select("queueId", "queueOffset")
    assert sorted(map(tuple, rows.collect())) == [(q, o) for q in (0, 1) for o in range(40, 50)]
    assert load(spark, trimmed).count() == 20  # earliest is the current min: no alarm


def test_auto_discovery_module():
    import pkgutil

    from pyspark.sql.datasource import DataSource

    import pyspark_rocketmq

    # Spark's lookup lists top-level modules with pkgutil.iter_modules(): a regular install puts
    # pyspark_rocketmq.py in site-packages; here the repository root plays that part.
    repo = Path(__file__).resolve().parents[2]
    assert "pyspark_rocketmq" in {m.name for m in pkgutil.iter_modules([str(repo)])}
    assert issubclass(pyspark_rocketmq.DefaultSource, DataSource)
    assert pyspark_rocketmq.DefaultSource.name() == "rocketmq"


def test_check_crc_turns_a_damaged_body_into_an_error_naming_file_and_offset(spark, tmp_path):
    from rocketstream.store import MessageStore

    root = tmp_path / "broker-a"
    fill(root, 20)
    with MessageStore.open(root, read_only=True) as s:
        rec = s.get_message("g", TOPIC, 0, 3, 1).messages[0]
    assert rec.body and not rec.born_host.is_v6 and not rec.store_host.is_v6
    commitlog = sorted((root / "commitlog").iterdir())[0]
    body_at = rec.physical_offset + 88  # V1 record, IPv4 hosts: BODY starts at byte 88 (docs/store-format.md)
    with commitlog.open("r+b") as f:   # one byte flipped in place (the mapped file is 1 GiB)
        f.seek(body_at)
        byte = f.read(1)[0]
        f.seek(body_at)
        f.write(bytes([byte ^ 0x01]))
    assert load(spark, root).count() == 20  # RocketMQ's consumer default: bodies are not re-checked
    with pytest.raises(Exception, match=rf"(?s)BODYCRC.*{commitlog.name}.*offset {rec.physical_offset}"):
        load(spark, root, checkCRC="true").count()
    with pytest.raises(Exception, match="checkCRC"):
        load(spark, root, checkCRC="sometimes").count()
