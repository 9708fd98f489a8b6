"""Network mode (``.option("nameServer", ...)``) against our broker and the real Apache RocketMQ 4.9.8
(``mq_broker`` of tests/conftest.py: ours, java): rows equal local mode over the same store and what
was sent; ranges, tags, timestamps; streaming with the group's offsets committed to the broker (read back
with GET_CONSUME_STATS, as mqadmin consumerProgress does) and a restart from the checkpoint; bad options."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocketstream.client.admin import consume_stats
from rocketstream.client.api import MQClientAPI
from rocketstream.errors import OptionError
from rocketstream.spark.options import parse_options
from tests.client.scenario_util import produce, unique

TAGS = ["a", "b", None]


@pytest.fixture(scope="module")
def sent(mq_broker):
    """A topic of 60 messages (tags a, b, none in turn) on 4 queues; the send results and the times around."""
    topic = unique("NetT")
    before = int(time.time() * 1000)
    results = produce(mq_broker.namesrv_addr, topic, [f"body-{i}".encode() for i in range(60)], tags=TAGS)
    time.sleep(0.05)
    return SimpleNamespace(topic=topic, results=results, before=before, after=int(time.time() * 1000),
                           broker=mq_broker)


def net(spark, sent, **options):
    reader = spark.read.format("rocketmq").option("nameServer", sent.broker.namesrv_addr).option("topic", sent.topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def local(spark, sent, **options):
    reader = (spark.read.format("rocketmq").option("brokerName", sent.broker.broker_name)
              .option("topic", sent.topic))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(str(sent.broker.home / "store"))


def rows(df):
    return sorted((r.asDict() for r in df.collect()), key=lambda d: (d["brokerName"], d["queueId"], d["queueOffset"]))


def test_batch_equals_local_mode_and_what_was_sent(spark, sent):
    got = rows(net(spark, sent))
    assert got == rows(local(spark, sent))  # every column, against the broker's own store files
    want = sorted((r.queue.broker_name, r.queue.queue_id, r.queue_offset, r.msg_id) for r in sent.results)
    assert [(d["brokerName"], d["queueId"], d["queueOffset"], d["msgId"]) for d in got] == want
    bodies = {r.msg_id: i for i, r in enumerate(sent.results)}
    for d in got:
        i = bodies[d["msgId"]]
        assert d["body"] == f"body-{i}".encode() and d["tags"] == TAGS[i % 3]


def test_batch_ranges_tags_timestamps_and_narrow_schema(spark, sent):
    t = sent.topic
    name = sent.broker.broker_name
    ranges = {"startingOffsets": json.dumps({t: {name: {"0": 3, "1": 10}}}),
              "endingOffsets": json.dumps({t: {name: {"0": 9, "2": 4}}})}
    for opts in (ranges, {"subExpression": "a || b"}, {"subExpression": "b", **ranges},
                 {"startingTimestamp": str(sent.before), "endingTimestamp": str(sent.after)},
                 {"endingTimestamp": str(sent.before)}):
        assert rows(net(spark, sent, **opts)) == rows(local(spark, sent, **opts)), opts
    narrow = (spark.read.format("rocketmq").schema("queueId INT, queueOffset BIGINT, tags STRING")
              .option("nameServer", sent.broker.namesrv_addr).option("topic", t).option("subExpression", "a").load())
    got = narrow.collect()
    assert len(got) == 20 and {r.tags for r in got} == {"a"} and narrow.columns == ["queueId", "queueOffset", "tags"]


def _stats(sent, group):
    async def ask():
        api = MQClientAPI(sent.broker.namesrv_addr)
        try:
            return await consume_stats(SimpleNamespace(api=api), sent.broker.broker_addr, group, sent.topic)
        finally:
            await api.close()

    return {r.queue.queue_id: r.consumer_offset for r in asyncio.run(ask())}


def _run_stream(spark, sent, checkpoint: Path, group: str) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []

    def sink(df, batch_id):
        seen.extend((r.queueId, r.queueOffset) for r in df.select("queueId", "queueOffset").collect())

    query = (spark.readStream.format("rocketmq").option("nameServer", sent.broker.namesrv_addr)
             .option("topic", sent.topic).option("consumerGroup", group).option("startingOffsets", "earliest")
             .option("maxMessagesPerTrigger", "25").load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    return seen


def test_stream_commits_group_to_broker_and_restarts_without_loss(spark, sent, tmp_path):
    group = unique("sparkg")
    first = _run_stream(spark, sent, tmp_path / "ckpt", group)
    assert sorted(first) == sorted((r.queue.queue_id, r.queue_offset) for r in sent.results)
    ends = {r.queue.queue_id: r.queue_offset + 1 for r in sent.results}
    want = {q: max(o for qq, o in ends.items() if qq == q) for q in ends}
    assert _stats(sent, group) == want  # GET_CONSUME_STATS: what mqadmin consumerProgress shows
    more = produce(sent.broker.namesrv_addr, sent.topic, [b"late-%d" % i for i in range(12)])
    second = _run_stream(spark, sent, tmp_path / "ckpt", group)
    assert sorted(second) == sorted((r.queue.queue_id, r.queue_offset) for r in more)  # no loss, no duplicates
    for r in more:
        want[r.queue.queue_id] = max(want[r.queue.queue_id], r.queue_offset + 1)
    assert _stats(sent, group) == want


def test_options_of_the_other_mode_are_errors():
    with pytest.raises(OptionError, match="'path'.*network mode"):
        parse_options({"topic": "T", "nameServer": "127.0.0.1:9876", "path": "/tmp/x"}, streaming=False)
    with pytest.raises(OptionError, match="'brokers'"):
        parse_options({"topic": "T", "namesrvAddr": "127.0.0.1:9876", "brokers": "a=/x"}, streaming=False)
    with pytest.raises(OptionError, match="brokerName"):
        parse_options({"topic": "T", "nameServer": "127.0.0.1:9876", "brokerName": "a"}, streaming=False)
    # maxBytesPerTrigger works in both modes (tests/spark/test_network_max_bytes.py)
    assert parse_options({"topic": "T", "nameServer": "h:1", "maxBytesPerTrigger": "100"},
                         streaming=True).max_bytes_per_trigger == 100
    with pytest.raises(OptionError, match="namesrvAddr.*host:port"):
        parse_options({"topic": "T", "namesrvAddr": "nohost"}, streaming=False)
    with pytest.raises(OptionError, match="given twice"):
        parse_options({"topic": "T", "namesrvAddr": "h:1", "nameServer": "h:1"}, streaming=False)
    o = parse_options({"topic": "T", "nameServer": " a:9876 ; b:9876 "}, streaming=True)
    assert o.name_server == "a:9876;b:9876" and o.network and o.brokers == ()


def test_unknown_topic_and_beyond_max_are_errors(spark, sent):
    with pytest.raises(Exception, match="no route for topic NoSuchTopic"):
        spark.read.format("rocketmq").option("nameServer", sent.broker.namesrv_addr).option(
            "topic", "NoSuchTopic").load().collect()
    name = sent.broker.broker_name
    with pytest.raises(Exception, match="beyond"):
        net(spark, sent, startingOffsets=json.dumps({sent.topic: {name: {"0": 10_000}}})).collect()
