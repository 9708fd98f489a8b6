"""Streaming: offsets, admission control, AvailableNow, restarts from a checkpoint, broker commits."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows, ReadMinRows

from rocketstream.client.offset_store import LocalOffsetStore
from rocketstream.errors import DataLossError
from rocketstream.spark.options import parse_options
from rocketstream.spark.schema import projection_for
from rocketstream.spark.stream import RocketMQStreamReader
from rocketstream.store.meta.offsets import ConsumerOffsetManager
from spark_stores import TOPIC, fill, max_offsets, trimmed_store


def reader(root: Path, **extra: str) -> RocketMQStreamReader:
    return RocketMQStreamReader(parse_options({"path": str(root), "topic": TOPIC, **extra}, streaming=True),
                                projection_for(None))


def total(offsets: dict) -> int:
    return sum(o for brokers in offsets.values() for queues in brokers.values() for o in queues.values())


def broker_table(root: Path, group: str) -> dict[str, int]:
    return {str(q): o for q, o in sorted(ConsumerOffsetManager(root, read_only=True).offsets_of(group, TOPIC).items())}


@pytest.fixture()
def store(tmp_path):
    root = tmp_path / "broker-a"
    fill(root, 40)
    return root


# ---- the reader on its own (driver-side lifecycle, no Spark) ----------------------------------------

def test_initial_offset_is_stable_and_deterministic(store):
    r = reader(store, startingOffsets="latest")
    first = r.initialOffset()
    fill(store, 8, start=40)
    assert r.initialOffset() == first
    assert json.dumps(first) == json.dumps({TOPIC: {"broker-a": {"0": 10, "1": 10, "2": 10, "3": 10}}})


def test_group_start_uses_committed_offsets_then_consume_from_where(store):
    ConsumerOffsetManager(store).commit("g1", TOPIC, {0: 3, 1: 7})
    start = reader(store, consumerGroup="g1", consumeFromWhere="CONSUME_FROM_TIMESTAMP",
                   consumeTimestamp="20990101000000").initialOffset()
    # queues 2 and 3 have no offset: a timestamp in the future -> after the last message
    assert start[TOPIC]["broker-a"] == {"0": 3, "1": 7, "2": 10, "3": 10}
    # a new group on a young queue starts at 0 even with CONSUME_FROM_LAST_OFFSET (the broker answers 0)
    assert total(reader(store, consumerGroup="fresh").initialOffset()) == 0
    first = reader(store, consumerGroup="fresh", consumeFromWhere="CONSUME_FROM_FIRST_OFFSET")
    assert total(first.initialOffset()) == 0


def test_read_limits(store):
    r = reader(store, startingOffsets="earliest", maxMessagesPerTrigger="10")
    start = r.initialOffset()
    assert r.getDefaultReadLimit() == ReadMaxRows(10)
    assert total(r.latestOffset(start, ReadMaxRows(10))) == 10
    assert total(r.latestOffset(start, ReadAllAvailable())) == 40  # the engine's limit wins over options
    one = r.latestOffset(start, ReadMaxBytes(1))  # a message larger than the budget still advances alone
    assert total(one) == 1
    sizes = reader(store, maxBytesPerTrigger="500")
    assert sizes.getDefaultReadLimit() == ReadMaxBytes(500)
    end = sizes.latestOffset(start, ReadMaxBytes(500))
    assert 0 < total(end) < 40


def test_min_rows_waits_until_max_trigger_delay(store):
    r = reader(store, startingOffsets="earliest", minMessagesPerTrigger="100", maxTriggerDelay="300ms")
    start = r.initialOffset()
    assert r.getDefaultReadLimit() == ReadMinRows(100)
    assert r.latestOffset(start, ReadMinRows(100)) == start
    time.sleep(0.35)
    assert total(r.latestOffset(start, ReadMinRows(100))) == 40


def test_available_now_stops_at_the_target(store):
    r = reader(store, startingOffsets="earliest")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    fill(store, 8, start=40)
    end = r.latestOffset(start, ReadAllAvailable())
    assert total(end) == 40
    assert r.latestOffset(end, ReadAllAvailable()) == end
    assert total(r.reportLatestOffset()) == 48


def test_commit_and_latest_offset_write_the_broker_table(store):
    r = reader(store, startingOffsets="earliest", consumerGroup="g2")
    start = r.initialOffset()
    end = r.latestOffset(start, ReadMaxRows(6))
    assert broker_table(store, "g2") == {"0": 0, "1": 0, "2": 0, "3": 0}  # start committed
    r.commit(end)
    assert broker_table(store, "g2") == end[TOPIC]["broker-a"]
    assert (store / "config" / "consumerOffset.json").read_text().count("TopicTest@g2") == 1


def test_broadcasting_commits_locally(store, tmp_path):
    r = reader(store, startingOffsets="earliest", consumerGroup="gb", messageModel="BROADCASTING",
               offsetsStoreDir=str(tmp_path / "local"), clientId="127.0.0.1@DEFAULT")
    end = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    r.commit(end)
    local = LocalOffsetStore(tmp_path / "local", "127.0.0.1@DEFAULT", "gb").read()
    assert sum(local.values()) == 40
    assert broker_table(store, "gb") == {}
    # and a restarted broadcasting reader with startingOffsets=group resumes there
    again = reader(store, consumerGroup="gb", messageModel="BROADCASTING", offsetsStoreDir=str(tmp_path / "local"),
                   clientId="127.0.0.1@DEFAULT")
    assert again.initialOffset() == end


def test_new_queues_start_at_their_min_and_offsets_past_the_end_fail(store):
    r = reader(store, startingOffsets="earliest")
    start = {TOPIC: {"broker-a": {"0": 0, "1": 0}}}  # queues 2 and 3 unknown to the checkpoint
    end = r.latestOffset(start, ReadAllAvailable())
    assert end[TOPIC]["broker-a"] == {"0": 10, "1": 10, "2": 10, "3": 10}
    parts = r.partitions(start, end)
    assert sum(e - s for t in parts for (*_, s, e) in t.ranges) == 40
    with pytest.raises(DataLossError, match="beyond"):
        r.latestOffset({TOPIC: {"broker-a": {"0": 99}}}, ReadAllAvailable())


# ---- end to end through Spark ---------------------------------------------------------------------

def run_available_now(spark, root: Path, checkpoint: Path, **options: str) -> list[tuple[int, list[tuple]]]:
    seen: list[tuple[int, list[tuple]]] = []

    def sink(df, batch_id):
        seen.append((batch_id, [tuple(r) for r in df.select("queueId", "queueOffset").collect()]))

    stream = spark.readStream.format("rocketmq").option("topic", TOPIC)
    for k, v in options.items():
        stream = stream.option(k, v)
    query = (stream.load(str(root)).writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    return seen


def checkpoint_offsets(checkpoint: Path) -> dict:
    last = max((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    return json.loads(last.read_text().strip().splitlines()[-1])


def test_stream_restart_no_duplicates_no_gaps_and_broker_table_matches(spark, store, tmp_path):
    ckpt = tmp_path / "ckpt"
    first = run_available_now(spark, store, ckpt, consumerGroup="sg", maxMessagesPerTrigger="15")
    assert all(len(rows) <= 15 for _, rows in first) and len(first) >= 3
    fill(store, 20, start=40)
    second = run_available_now(spark, store, ckpt, consumerGroup="sg", maxMessagesPerTrigger="15")
    rows = [r for _, batch in first + second for r in batch]
    assert len(rows) == len(set(rows)) == 60
    for qid, end in max_offsets(store).items():
        assert sorted(o for q, o in rows if q == qid) == list(range(end))
    assert broker_table(store, "sg") == checkpoint_offsets(ckpt)[TOPIC]["broker-a"]
    assert broker_table(store, "sg") == {str(q): o for q, o in max_offsets(store).items()}


def test_stream_from_group_offsets_with_tag_filter(spark, store, tmp_path):
    ConsumerOffsetManager(store).commit("tg", TOPIC, {0: 5, 1: 5, 2: 5, 3: 5})
    seen = run_available_now(spark, store, tmp_path / "ck", consumerGroup="tg", subExpression="TagA",
                             maxBytesPerTrigger="2000")
    rows = [r for _, batch in seen for r in batch]
    # message i sits at (queue i % 4, offset i // 4) and has TagA when i % 3 == 0
    assert sorted(rows) == sorted((i % 4, i // 4) for i in range(40) if i % 3 == 0 and i // 4 >= 5)
    assert broker_table(store, "tg") == {"0": 10, "1": 10, "2": 10, "3": 10}


def test_stream_data_loss_both_ways(tmp_path):
    root = trimmed_store(tmp_path / "broker-a")
    start = {TOPIC: {"broker-a": {"0": 0, "1": 45}}}
    with pytest.raises(DataLossError) as err:
        reader(root).latestOffset(start, ReadAllAvailable())
    assert (err.value.topic, err.value.broker_name) == (TOPIC, "broker-a")
    assert (err.value.queue_id, err.value.lost_from, err.value.lost_to) == (0, 0, 40)
    lenient = reader(root, failOnDataLoss="false")
    end = lenient.latestOffset(start, ReadAllAvailable())
    assert end == {TOPIC: {"broker-a": {"0": 50, "1": 50}}}
    parts = lenient.partitions(start, end)
    assert sorted((q, a, b) for t in parts for (_, _, q, a, b) in t.ranges) == [(0, 40, 50), (1, 45, 50)]
