"""Option parsing: every option, aliases, case-insensitive keys, and every bad value named."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketstream.errors import OptionError
from rocketstream.spark import options as o
from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.spark.offsets import (
    EARLIEST,
    GROUP,
    LATEST,
    AtTimestamp,
    QueueOffsets,
    SpecificOffsets,
)
from rocketstream.spark.options import parse_options

BASE = {"path": "/tmp/store", "topic": "TopicTest"}


def parse(streaming: bool = False, **extra: str) -> o.RocketMQOptions:
    return parse_options({**BASE, **extra}, streaming=streaming)


def test_defaults():
    opts = parse()
    assert opts.topics == ("TopicTest",)
    assert opts.brokers == (("", Path("/tmp/store")),)
    assert opts.subscription.sub_all
    assert opts.starting is EARLIEST and opts.ending is LATEST
    assert parse(streaming=True).starting is GROUP  # a stream resumes its consumer group
    assert opts.consumer_group == o.DEFAULT_CONSUMER_GROUP
    assert opts.consume_from_where == o.CONSUME_FROM_LAST_OFFSET
    assert opts.message_model == o.CLUSTERING and not opts.broadcasting
    assert opts.allocate_strategy == "AVG"
    assert opts.fail_on_data_loss is True
    assert opts.max_trigger_delay_ms == 15 * 60 * 1000


def test_keys_are_case_insensitive_as_spark_lowercases_them():
    opts = parse_options({"PATH": "/s", "topic": "T", "maxoffsetspertrigger": "7", "FAILONDATALOSS": "false"},
                         streaming=True)
    assert opts.max_messages_per_trigger == 7 and opts.fail_on_data_loss is False


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(OptionError) as err:
        parse(startingOffset="earliest")
    assert err.value.option == "startingOffset"
    assert "startingOffsets" in str(err.value) and "maxMessagesPerTrigger" in str(err.value)


@pytest.mark.parametrize("alias,canonical,attr", [
    ("minPartitions", "numPartitions", "num_partitions"),
    ("maxOffsetsPerTrigger", "maxMessagesPerTrigger", "max_messages_per_trigger"),
    ("minOffsetsPerTrigger", "minMessagesPerTrigger", "min_messages_per_trigger"),
])
def test_aliases(alias, canonical, attr):
    assert getattr(parse(**{alias: "3"}), attr) == 3
    assert getattr(parse(**{canonical: "4"}), attr) == 4
    with pytest.raises(OptionError, match="alias"):
        parse(**{alias: "3", canonical: "4"})


def test_topics_comma_separated_deduplicated():
    assert parse(topic=" A, B ,A").topics == ("A", "B")


def test_positions():
    assert parse(startingOffsets="EARLIEST").starting is EARLIEST
    assert parse(startingOffsets="group").starting is GROUP
    assert parse(startingOffsets=" latest ").starting is LATEST
    assert parse(endingOffsets="latest").ending is LATEST
    spec = parse(startingOffsets='{"T":{"broker-a":{"0":5,"1":-2,"2":-1}}}').starting
    assert isinstance(spec, SpecificOffsets)
    assert spec.offsets == {QueueKey("T", "broker-a", 0): 5, QueueKey("T", "broker-a", 1): -2,
                            QueueKey("T", "broker-a", 2): -1}
    assert spec == SpecificOffsets(QueueOffsets(spec.offsets))
    end = parse(endingOffsets='{"T":{"broker-a":{"0":7}}}').ending
    assert end == SpecificOffsets(QueueOffsets({QueueKey("T", "broker-a", 0): 7}))


def test_timestamps_take_precedence_over_offsets_and_both_are_validated():
    # as Spark's Kafka source: startingTimestamp over startingOffsets (and endingTimestamp over endingOffsets)
    assert parse(startingTimestamp="1700000000000").starting == AtTimestamp(1_700_000_000_000)
    assert parse(startingTimestamp="5", startingOffsets="latest").starting == AtTimestamp(5)
    assert parse(endingTimestamp="9", endingOffsets="latest").ending == AtTimestamp(9)
    with pytest.raises(OptionError) as err:
        parse(startingTimestamp="5", startingOffsets="yesterday")
    assert err.value.option == "startingOffsets"


def test_streaming_rejects_batch_only_options():
    for key in ("endingOffsets", "endingTimestamp"):
        with pytest.raises(OptionError) as err:
            parse(streaming=True, **{key: "latest" if key == "endingOffsets" else "5"})
        assert err.value.option == key


def test_brokers_option():
    opts = parse_options({"topic": "T", "brokers": "broker-a=/a, broker-b=/b"}, streaming=False)
    assert opts.brokers == (("broker-a", Path("/a")), ("broker-b", Path("/b")))
    assert parse(brokerName="broker-x").brokers == (("broker-x", Path("/tmp/store")),)


def test_consume_timestamp_and_durations():
    assert parse(consumeFromWhere="CONSUME_FROM_TIMESTAMP", consumeTimestamp="20240102030405").consume_timestamp_ms
    with pytest.raises(OptionError, match="consumeFromWhere=CONSUME_FROM_TIMESTAMP"):
        parse(consumeTimestamp="20240102030405")  # ignored otherwise: reading from elsewhere than asked
    assert parse(maxTriggerDelay="30s").max_trigger_delay_ms == 30_000
    assert parse(maxTriggerDelay="2m").max_trigger_delay_ms == 120_000
    assert parse(maxTriggerDelay="250").max_trigger_delay_ms == 250


def test_strategies_and_their_arguments():
    assert parse(allocateStrategy="avg_by_circle").allocate_strategy == "AVG_BY_CIRCLE"
    assert dict(parse(allocateStrategy="CONSISTENT_HASH", virtualNodeCnt="3").strategy_args) == {"virtual_node_cnt": 3}
    assert dict(parse(allocateStrategy="MACHINE_ROOM", consumeridcs="r1,r2").strategy_args) == {
        "consumeridcs": frozenset({"r1", "r2"})}
    assert parse(allocateStrategy="MACHINE_ROOM_NEARBY-AVG").allocate_strategy == "MACHINE_ROOM_NEARBY-AVG"
    cfg = dict(parse(allocateStrategy="CONFIG", allocateQueues="broker-a:0,1").strategy_args)
    assert cfg == {"config_queues": (("broker-a", 0), ("", 1))}


def test_broadcasting():
    opts = parse(messageModel="broadcasting", offsetsStoreDir="/tmp/x", clientId="c1")
    assert opts.broadcasting and opts.offsets_store_dir == Path("/tmp/x") and opts.client_id == "c1"


@pytest.mark.parametrize("key,value", [
    ("topic", ""), ("topic", "bad topic"), ("subExpression", "||"),
    ("startingOffsets", "yesterday"), ("startingOffsets", "{not json"), ("startingOffsets", '{"T":{"b":{"x":1}}}'),
    ("startingOffsets", '{"T":{"b":{"0":-3}}}'), ("endingOffsets", "earliest"),
    ("startingTimestamp", "-1"), ("startingTimestamp", "soon"), ("endingTimestamp", "1.5"),
    ("consumerGroup", "a b"), ("consumeFromWhere", "CONSUME_FROM_MIDDLE"), ("consumeTimestamp", "2024-01-02"),
    ("messageModel", "P2P"), ("allocateStrategy", "RANDOM"), ("numPartitions", "0"), ("minPartitions", "x"),
    ("maxMessagesPerPartition", "-5"), ("maxMessagesPerTrigger", "0"), ("maxBytesPerTrigger", "1k"),
    ("minMessagesPerTrigger", "0"), ("maxTriggerDelay", "soon"), ("failOnDataLoss", "maybe"),
    ("brokerName", "a b"), ("virtualNodeCnt", "-1"),
])
def test_bad_values_name_the_option(key, value):
    extra = {key: value}
    if key == "virtualNodeCnt":
        extra["allocateStrategy"] = "CONSISTENT_HASH"
    with pytest.raises(OptionError) as err:
        parse(**extra)
    assert err.value.option == key


def test_required_and_conflicting_locations():
    with pytest.raises(OptionError) as err:
        parse_options({"topic": "T"}, streaming=False)
    assert err.value.option == "path"
    with pytest.raises(OptionError) as err:
        parse_options({"topic": "T", "path": "/p", "brokers": "a=/a"}, streaming=False)
    assert err.value.option == "brokers"
    for bad in ("a", "a=", "=/p", "a=/x,a=/y"):
        with pytest.raises(OptionError) as err:
            parse_options({"topic": "T", "brokers": bad}, streaming=False)
        assert err.value.option == "brokers"
    with pytest.raises(OptionError) as err:
        parse(allocateStrategy="MACHINE_ROOM")
    assert err.value.option == "consumeridcs"
    with pytest.raises(OptionError) as err:
        parse(allocateStrategy="CONFIG", allocateQueues="broker-a:x")
    assert err.value.option == "allocateQueues"


def test_broker_name_of_an_unnamed_store(tmp_path):
    from rocketstream.spark.brokers import broker_locations
    from rocketstream.store import StoreConfig, default_broker_conf

    conf = StoreConfig.from_broker_conf(default_broker_conf())
    default_root = str(conf.store_path_root_dir)
    # the configured default store takes broker.conf's brokerName; any other store its directory's name
    assert broker_locations(parse_options({"path": default_root, "topic": "T"}, streaming=False)) == (
        (conf.broker_name, default_root, None),)
    other = tmp_path / "my-broker"
    assert broker_locations(parse_options({"path": str(other), "topic": "T"}, streaming=False)) == (
        ("my-broker", str(other), None),)
