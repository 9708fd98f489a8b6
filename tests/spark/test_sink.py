"""The rocketmq sink: ``df.write`` / ``df.writeStream`` with ``format("rocketmq")``, local mode (a store path)
and network mode (a name server: our broker and the real 4.9.8), read back with our source and our client.
Column and option validation runs without Spark where it can (the checks are plain functions)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from rocketstream.errors import ColumnError, OptionError
from rocketstream.spark.sink import SinkColumns, check_columns, parse_sink_options, split_batch

ROWS = [
    (f"body-{i}".encode() * (1 + i % 3), "TagA" if i % 2 else None, f"k{i}" if i % 3 else None,
     {"p": str(i)} if i % 4 == 0 else None)
    for i in range(40)
]
SCHEMA = StructType([
    StructField("body", BinaryType()), StructField("tags", StringType()), StructField("keys", StringType()),
    StructField("properties", MapType(StringType(), StringType())),
])


def read_back(spark, root, topic, cols=("body", "tags", "keys", "properties")):
    df = spark.read.format("rocketmq").option("topic", topic).load(str(root))
    return df


def as_set(rows):
    """Rows as comparable tuples; ``properties`` reduced to the user's (the store adds UNIQ_KEY, WAIT ...)."""
    out = []
    for body, tags, keys, props in rows:
        user = {k: v for k, v in (props or {}).items() if k not in ("UNIQ_KEY", "WAIT", "TAGS", "KEYS")}
        out.append((bytes(body), tags, keys, tuple(sorted(user.items()))))
    return sorted(out)


def expected(rows):
    return as_set([(b, t, k, p) for b, t, k, p in rows])


# ---- local mode ---------------------------------------------------------------------------------------

def test_local_write_reads_back_row_by_row(spark, tmp_path):
    root = tmp_path / "store"
    df = spark.createDataFrame(ROWS, SCHEMA).repartition(3)
    df.write.format("rocketmq").option("topic", "SinkLocal").option("batchSize", "7").mode("append").save(str(root))
    got = read_back(spark, root, "SinkLocal").select("body", "tags", "keys", "properties").collect()
    assert as_set(got) == expected(ROWS)
    # a second write appends
    spark.createDataFrame([(b"more",)], "body binary").write.format("rocketmq").option("topic", "SinkLocal") \
        .mode("append").save(str(root))
    assert read_back(spark, root, "SinkLocal").count() == len(ROWS) + 1


def test_local_topic_and_queue_columns(spark, tmp_path):
    root = tmp_path / "store"
    rows = [(f"m{i}", "SinkT1" if i % 2 else "SinkT2", i % 3, ["a", f"b{i}"]) for i in range(30)]
    df = spark.createDataFrame(rows, "body string, topic string, queueId int, keys array<string>")
    df.write.format("rocketmq").mode("append").save(str(root))
    for topic in ("SinkT1", "SinkT2"):
        got = read_back(spark, root, topic).select("body", "queueId", "queueOffset", "keys").collect()
        want = [(f"m{i}".encode(), i % 3, f"a b{i}") for i in range(30) if ("SinkT1" if i % 2 else "SinkT2") == topic]
        assert sorted((bytes(r.body), r.queueId, r.keys) for r in got) == sorted(want)
        # rows of one queue keep their order within a task (one task here: createDataFrame of a small list
        # may use two; check order per queue on the offsets of each body's index)
        assert {r.queueId for r in got} == {q for _, q, _ in want}


# ---- validation (no Spark job) -------------------------------------------------------------------------

def _schema(*fields):
    return StructType([StructField(n, t) for n, t in fields])


@pytest.mark.parametrize("fields, column", [
    ((("value", BinaryType()),), "value"),
    ((("body", BinaryType()), ("extra", StringType())), "extra"),
    ((("body", DoubleType()),), "body"),
    ((("body", BinaryType()), ("keys", ArrayType(IntegerType()))), "keys"),
    ((("body", BinaryType()), ("properties", MapType(StringType(), IntegerType()))), "properties"),
    ((("body", BinaryType()), ("queueId", StringType())), "queueId"),
    ((("tags", StringType()),), "body"),
])
def test_bad_columns_name_the_column(fields, column):
    with pytest.raises(ColumnError, match=f"column '{column}'"):
        check_columns(_schema(*fields), parse_sink_options({"path": "/tmp/x", "topic": "T"}, streaming=False))


def test_topic_from_one_place():
    opts = parse_sink_options({"path": "/tmp/x"}, streaming=False)
    with pytest.raises(ColumnError, match="column 'topic'.*required"):
        check_columns(_schema(("body", BinaryType())), opts)
    both = parse_sink_options({"path": "/tmp/x", "topic": "T"}, streaming=False)
    with pytest.raises(ColumnError, match="column 'topic'.*not both"):
        check_columns(_schema(("body", BinaryType()), ("topic", StringType())), both)


@pytest.mark.parametrize("options, option", [
    ({}, "path"),
    ({"path": "/tmp/x", "nameServer": "h:1"}, "path"),
    ({"path": "/tmp/x", "batchSize": "0"}, "batchSize"),
    ({"path": "/tmp/x", "startingOffsets": "earliest"}, "startingOffsets"),
    ({"path": "/tmp/x", "producerGroup": "g"}, "producerGroup"),
    ({"nameServer": "h:1", "lockTimeoutMs": "5"}, "lockTimeoutMs"),
    ({"nameServer": "h:1", "topic": "bad topic"}, "topic"),
    ({"nameServer": "h:1", "namesrvAddr": "h:1"}, "namesrvAddr"),
])
def test_bad_options_name_the_option(options, option):
    with pytest.raises(OptionError, match=f"option '{option}'"):
        parse_sink_options(options, streaming=False)


def test_null_body_and_batch_limits():
    opts = parse_sink_options({"path": "/tmp/x", "topic": "T", "batchSize": "3", "maxBatchBytes": "1100"},
                              streaming=False)
    cols = SinkColumns(("body",), False, False)
    with pytest.raises(ColumnError, match="column 'body'.*null"):
        list(split_batch(pa.record_batch([pa.array([b"a", None])], names=["body"]), cols, opts))
    bodies = [b"x" * 300] * 10
    chunks = list(split_batch(pa.record_batch([pa.array(bodies)], names=["body"]), cols, opts))
    # 300-byte bodies cost ~374 encoded bytes: 2 per 1100-byte batch (below batchSize 3)
    assert [len(c.bodies) for c in chunks] == [2, 2, 2, 2, 2]
    with pytest.raises(ColumnError, match="does not fit"):
        list(split_batch(pa.record_batch([pa.array([b"x" * 2000])], names=["body"]), cols, opts))


def test_overwrite_refused(spark, tmp_path):
    df = spark.createDataFrame([(b"a",)], "body binary")
    with pytest.raises(Exception, match="append-only"):
        df.write.format("rocketmq").option("topic", "T").mode("overwrite").save(str(tmp_path / "s"))
    with pytest.raises(Exception, match="column 'value'"):
        spark.createDataFrame([(b"a",)], "value binary").write.format("rocketmq").option("topic", "T") \
            .mode("append").save(str(tmp_path / "s"))




def test_local_store_held_by_a_writer_is_refused(spark, tmp_path):
    """A store whose lock another process holds (a running broker) is refused when the write is planned."""
    from rocketstream.store import MessageStore

    root = tmp_path / "held"
    with MessageStore.open(root, create=True):
        df = spark.createDataFrame([(b"a",)], "body binary")
        with pytest.raises(Exception, match="write through it with option 'nameServer'"):
            df.write.format("rocketmq").option("topic", "T").mode("append").save(str(root))
