"""Item 5: bad Spark options and offsets give an error that names the option (or the value at fault).

Table-driven. Every case runs twice over the same table:

* against :class:`RocketMQDataSource` directly, the way Spark's Python workers call it (``schema()``,
  then ``reader().partitions()`` or ``streamReader().initialOffset()/latestOffset()``) — fast, default run;
* through Spark itself (``spark.read`` / ``spark.readStream``), asserting on the text Spark surfaces,
  where our exception arrives wrapped in ``PYTHON_DATA_SOURCE_ERROR`` / ``STREAM_FAILED``. The default
  run pushes a sample of rows through Spark (each costs a Python worker, ~1-3 s); ``-m slow`` all of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_reliutil import TOPIC, fill_simple

Q = '{"%s":{"broker-a":{"0":%s}}}'


@dataclass(frozen=True)
class Case:
    name: str
    options: dict[str, str]
    needles: tuple[str, ...]  # all must appear in the error text
    stream: bool = False
    path: str | None = "store"  # "store": the test store; None: no load() path; else literally

    def __str__(self) -> str:
        return self.name


CASES = [
    # numbers: not a number, negative, zero, fractional
    Case("numPartitions-not-int", {"numPartitions": "abc"}, ("numPartitions", "abc")),
    Case("numPartitions-zero", {"numPartitions": "0"}, ("numPartitions", ">= 1")),
    Case("minPartitions-negative", {"minPartitions": "-1"}, ("minPartitions",)),
    Case("maxMessagesPerPartition-fraction", {"maxMessagesPerPartition": "1.5"}, ("maxMessagesPerPartition", "1.5")),
    Case("maxPartitionBytes-zero", {"maxPartitionBytes": "0"}, ("maxPartitionBytes", ">= 1")),
    Case("openCostInBytes-negative", {"openCostInBytes": "-1"}, ("openCostInBytes", ">= 0")),
    Case("maxMessagesPerTrigger-negative", {"maxMessagesPerTrigger": "-5"}, ("maxMessagesPerTrigger",), stream=True),
    Case("maxOffsetsPerTrigger-word", {"maxOffsetsPerTrigger": "lots"}, ("maxOffsetsPerTrigger", "lots"), stream=True),
    Case("maxBytesPerTrigger-zero", {"maxBytesPerTrigger": "0"}, ("maxBytesPerTrigger",), stream=True),
    Case("minMessagesPerTrigger-word", {"minMessagesPerTrigger": "x"}, ("minMessagesPerTrigger",), stream=True),
    Case("minOffsetsPerTrigger-zero", {"minOffsetsPerTrigger": "0"}, ("minOffsetsPerTrigger",), stream=True),
    Case("maxTriggerDelay-word", {"maxTriggerDelay": "soon"}, ("maxTriggerDelay", "soon"), stream=True),
    Case("maxTriggerDelay-negative", {"maxTriggerDelay": "-5s"}, ("maxTriggerDelay",), stream=True),
    Case("virtualNodeCnt-negative", {"allocateStrategy": "CONSISTENT_HASH", "virtualNodeCnt": "-1"},
         ("virtualNodeCnt",)),
    # enums
    Case("failOnDataLoss-maybe", {"failOnDataLoss": "maybe"}, ("failOnDataLoss", "maybe")),
    Case("checkCRC-maybe", {"checkCRC": "maybe"}, ("checkCRC", "maybe")),
    Case("messageModel-unknown", {"messageModel": "CLUSTER"}, ("messageModel", "CLUSTER")),
    Case("allocateStrategy-unknown", {"allocateStrategy": "RANDOM"}, ("allocateStrategy", "RANDOM")),
    Case("consumeFromWhere-unknown", {"consumeFromWhere": "CONSUME_FROM_MIDDLE"}, ("consumeFromWhere",)),
    Case("nearby-inner-unknown", {"allocateStrategy": "MACHINE_ROOM_NEARBY-FOO"}, ("allocateStrategy",)),
    # timestamps
    Case("consumeTimestamp-iso", {"consumeFromWhere": "CONSUME_FROM_TIMESTAMP", "consumeTimestamp": "2024-01-01"},
         ("consumeTimestamp", "yyyyMMddHHmmss")),
    Case("consumeTimestamp-month13", {"consumeFromWhere": "CONSUME_FROM_TIMESTAMP",
                                      "consumeTimestamp": "20241301000000"}, ("consumeTimestamp",)),
    Case("startingTimestamp-word", {"startingTimestamp": "yesterday"}, ("startingTimestamp", "yesterday")),
    Case("startingTimestamp-negative", {"startingTimestamp": "-1"}, ("startingTimestamp",)),
    Case("endingTimestamp-float", {"endingTimestamp": "1e12"}, ("endingTimestamp",)),
    # startingOffsets / endingOffsets JSON
    Case("startingOffsets-word", {"startingOffsets": "sometime"}, ("startingOffsets", "sometime")),
    Case("startingOffsets-malformed-json", {"startingOffsets": f'{{"{TOPIC}": {{'}, ("startingOffsets", "JSON")),
    Case("startingOffsets-array", {"startingOffsets": "[1, 2]"}, ("startingOffsets",)),
    Case("startingOffsets-offset-string", {"startingOffsets": Q % (TOPIC, '"x"')}, ("startingOffsets",)),
    Case("startingOffsets-offset-minus3", {"startingOffsets": Q % (TOPIC, -3)}, ("startingOffsets",)),
    Case("startingOffsets-queue-not-int", {"startingOffsets": f'{{"{TOPIC}":{{"broker-a":{{"q":1}}}}}}'},
         ("startingOffsets", "'q'")),
    Case("startingOffsets-unknown-topic", {"startingOffsets": Q % ("Other", 1)}, ("startingOffsets", "Other")),
    Case("startingOffsets-unknown-queue", {"startingOffsets": f'{{"{TOPIC}":{{"broker-a":{{"9":1}}}}}}'},
         ("startingOffsets", "queueId=9")),
    Case("startingOffsets-unknown-broker", {"startingOffsets": f'{{"{TOPIC}":{{"broker-z":{{"0":1}}}}}}'},
         ("startingOffsets", "broker-z")),
    Case("startingOffsets-beyond-end", {"startingOffsets": Q % (TOPIC, 999)}, ("startingOffsets", "999", "queueId=0")),
    Case("startingOffsets-beyond-end-stream", {"startingOffsets": Q % (TOPIC, 999)},
         ("startingOffsets", "999", "queueId=0"), stream=True),
    Case("endingOffsets-beyond-end", {"endingOffsets": Q % (TOPIC, 999)}, ("endingOffsets", "999", "queueId=0")),
    Case("endingOffsets-earliest-word", {"endingOffsets": "earliest"}, ("endingOffsets", "earliest")),
    Case("endingOffsets-minus2", {"endingOffsets": Q % (TOPIC, -2)}, ("endingOffsets", "-2")),
    Case("endingOffsets-malformed-json", {"endingOffsets": "{'a': 1}"}, ("endingOffsets", "JSON")),
    Case("endingOffsets-in-stream", {"endingOffsets": "latest"}, ("endingOffsets", "batch"), stream=True),
    Case("endingTimestamp-in-stream", {"endingTimestamp": "0"}, ("endingTimestamp", "batch"), stream=True),
    # topics, names, queues
    Case("topic-missing", {"topic": None}, ("topic", "required")),
    Case("topic-bad-chars", {"topic": "bad topic!"}, ("topic", "bad topic!")),
    Case("topic-unknown", {"topic": "Nope"}, ("topic", "Nope")),
    Case("topic-unknown-stream", {"topic": "Nope"}, ("topic", "Nope"), stream=True),
    Case("consumerGroup-bad-chars", {"consumerGroup": "my group"}, ("consumerGroup", "my group")),
    Case("brokerName-empty", {"brokerName": ""}, ("brokerName",)),
    Case("subExpression-no-tag", {"subExpression": "||"}, ("subExpression", "||")),
    Case("allocateQueues-missing", {"allocateStrategy": "CONFIG"}, ("allocateQueues",)),
    Case("allocateQueues-malformed", {"allocateStrategy": "CONFIG", "allocateQueues": "a:b"},
         ("allocateQueues", "a:b")),
    Case("consumeridcs-missing", {"allocateStrategy": "MACHINE_ROOM"}, ("consumeridcs",)),
    Case("path-not-a-store", {}, ("no-such-store",), path="/nonexistent/no-such-store"),
    Case("path-missing", {}, ("path", "required"), path=None),
    # conflicts and unknown names
    Case("unknown-option", {"startingOffset": "earliest"}, ("startingOffset", "unknown option", "startingOffsets")),
    Case("alias-and-name", {"minPartitions": "2", "numPartitions": "3"}, ("numPartitions", "twice")),
    Case("brokers-and-path", {"brokers": "broker-a=/tmp/x"}, ("brokers", "not both")),
    Case("brokers-and-brokerName", {"brokers": "broker-a=/tmp/x", "brokerName": "b"}, ("brokerName", "brokers"),
         path=None),
    Case("brokers-malformed", {"brokers": "broker-a:/tmp/x"}, ("brokers", "broker-a:/tmp/x"), path=None),
    # network mode and the live-broker address
    Case("brokerAddr-no-port", {"brokerAddr": "nohost"}, ("brokerAddr", "nohost")),
    Case("nameServer-and-path", {"nameServer": "127.0.0.1:9876"}, ("path", "nameServer")),
    Case("namesrvAddr-malformed", {"namesrvAddr": "abc"}, ("namesrvAddr", "abc"), path=None),
    Case("consumeTimestamp-without-from-timestamp", {"consumeTimestamp": "20240101000000"},
         ("consumeTimestamp", "consumeFromWhere")),
    Case("allocateQueues-without-config", {"allocateQueues": "0,1"}, ("allocateQueues", "allocateStrategy")),
    Case("virtualNodeCnt-without-consistent-hash", {"virtualNodeCnt": "3"}, ("virtualNodeCnt", "allocateStrategy")),
    Case("offsetsStoreDir-with-clustering", {"offsetsStoreDir": "/tmp/o"}, ("offsetsStoreDir", "BROADCASTING")),
    Case("clientId-with-clustering", {"clientId": "c1"}, ("clientId", "BROADCASTING")),
    # topics by pattern, offsets by timestamp
    Case("topicPattern-bad-regex", {"topic": None, "topicPattern": "(["}, ("topicPattern", "regular expression")),
    Case("topicPattern-and-topic", {"topicPattern": "T.*"}, ("topicPattern", "not both")),
    Case("startingOffsetsByTimestamp-word", {"startingOffsetsByTimestamp": "soon"},
         ("startingOffsetsByTimestamp", "JSON")),
    Case("endingOffsetsByTimestamp-negative", {"endingOffsetsByTimestamp": Q % (TOPIC, -5)},
         ("endingOffsetsByTimestamp", "-5")),
    Case("startingOffsetsByTimestampStrategy-unknown", {"startingOffsetsByTimestampStrategy": "maybe"},
         ("startingOffsetsByTimestampStrategy", "maybe")),
    # network tunables (checked before any connection: the name server address is never dialled)
    Case("routeRefreshIntervalMs-zero", {"nameServer": "127.0.0.1:1", "routeRefreshIntervalMs": "0"},
         ("routeRefreshIntervalMs", "at least 1 ms"), path=None),
    Case("pollNameServerInterval-word", {"nameServer": "127.0.0.1:1", "pollNameServerInterval": "often"},
         ("pollNameServerInterval", "often"), path=None),
    Case("requestTimeoutMs-zero", {"nameServer": "127.0.0.1:1", "requestTimeoutMs": "0"},
         ("requestTimeoutMs", "at least 1 ms"), path=None),
    Case("mqClientApiTimeout-word", {"nameServer": "127.0.0.1:1", "mqClientApiTimeout": "x"},
         ("mqClientApiTimeout",), path=None),
    Case("pullTimeoutMs-negative", {"nameServer": "127.0.0.1:1", "pullTimeoutMs": "-1"}, ("pullTimeoutMs", "-1"),
         path=None),
    Case("pullBatchSize-zero", {"nameServer": "127.0.0.1:1", "pullBatchSize": "0"}, ("pullBatchSize", ">= 1"),
         path=None),
    Case("pullRetries-negative", {"nameServer": "127.0.0.1:1", "pullRetries": "-1"}, ("pullRetries", ">= 0"),
         path=None),
    # secured clusters: a secret's value is never part of the error (the needles hold no secret)
    Case("accessKey-with-a-store", {"accessKey": "ak", "secretKey": "sk-SECRET"}, ("accessKey", "network mode")),
    Case("secretKey-without-accessKey", {"nameServer": "127.0.0.1:1", "secretKey": "sk-SECRET"},
         ("accessKey", "secretKey"), path=None),
    Case("securityToken-without-account", {"nameServer": "127.0.0.1:1", "securityToken": "tok-SECRET"},
         ("accessKey", "securityToken"), path=None),
    Case("namespace-percent", {"nameServer": "127.0.0.1:1", "namespace": "a%b"}, ("namespace", "a%b"), path=None),
    Case("tls.enable-maybe", {"nameServer": "127.0.0.1:1", "tls.enable": "maybe"}, ("tls.enable", "maybe"),
         path=None),
    Case("tls.client.trustCertPath-missing", {"nameServer": "127.0.0.1:1", "tls.enable": "true",
                                              "tls.client.trustCertPath": "/nonexistent/ca.pem"},
         ("tls.client.trustCertPath", "/nonexistent/ca.pem"), path=None),
    Case("tls.client.keyPath-without-cert", {"nameServer": "127.0.0.1:1", "tls.enable": "true",
                                             "tls.client.keyPath": "/etc/hostname"},
         ("tls.client.certPath", "both"), path=None),
    Case("tls.client.keyPassword-with-a-store", {"tls.client.keyPassword": "kp-SECRET"},
         ("tls.client.keyPassword", "network mode")),
    Case("tls.test.mode.enable-maybe", {"nameServer": "127.0.0.1:1", "tls.test.mode.enable": "maybe"},
         ("tls.test.mode.enable", "maybe"), path=None),
]
SECRETS = ("sk-SECRET", "tok-SECRET", "kp-SECRET")
# one per way an error reaches Spark: schema() at load, batch planning, stream initialOffset
SPARK_SAMPLE = {"numPartitions-not-int", "startingOffsets-malformed-json", "endingOffsets-beyond-end",
                "startingOffsets-beyond-end-stream"}


def _options(case: Case, store: Path) -> tuple[dict[str, str], str | None]:
    options = {"topic": TOPIC}
    options.update(case.options)
    options = {k: v for k, v in options.items() if v is not None}
    path = str(store) if case.path == "store" else case.path
    return options, path


def run_direct(case: Case, store: Path) -> None:
    """What Spark's Python workers do with the options, without a JVM."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import StructType

    from rocketstream.spark.source import RocketMQDataSource

    options, path = _options(case, store)
    if path is not None:
        options["path"] = path
    source = RocketMQDataSource(options)
    if not case.stream:
        source.schema()
        source.reader(StructType()).partitions()
    else:
        reader = source.streamReader(StructType())
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        reader.partitions(start, end)


def run_spark(spark, case: Case, store: Path, tmp: Path) -> None:  # noqa: F811
    options, path = _options(case, store)
    if not case.stream:
        frame = spark.read.format("rocketmq").options(**options)
        (frame.load(path) if path else frame.load()).count()
        return
    frame = spark.readStream.format("rocketmq").options(**options)
    frame = frame.load(path) if path else frame.load()
    query = (frame.writeStream.format("memory").queryName(f"bad_{abs(hash(case.name))}")
             .option("checkpointLocation", str(tmp / "ckpt")).trigger(availableNow=True).start())
    try:
        query.awaitTermination(60)
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def _check(case: Case, error: BaseException | None) -> str | None:
    """None when ``error`` is right for ``case``, else what is wrong."""
    if error is None:
        return f"{case}: no error"
    text = str(error)
    missing = [n for n in case.needles if n not in text]
    if missing:
        return f"{case}: {missing} not in error: {text[:600]}"
    shown = [s for s in SECRETS if s in text]
    if shown:
        return f"{case}: the error shows a secret value"
    return None


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("badopts") / "broker-a"
    fill_simple(root, 40)
    return root


def _valid_options(store: Path) -> list[str]:
    """The option names the source accepts, as its unknown-option error lists them."""
    with pytest.raises(Exception) as info:  # noqa: B017 - the text is what is judged
        run_direct(Case("probe", {"noSuchOption": "x"}, ()), store)
    match = re.search(r"valid options: ([A-Za-z.]+(?:, [A-Za-z.]+)*)", str(info.value))
    assert match, f"the unknown-option error lists no valid options: {info.value}"
    return match.group(1).split(", ")


def test_every_option_the_source_accepts_has_a_bad_case(store: Path) -> None:
    """A new option without a row here fails: every accepted name is set (or named) by some case."""
    covered = {name for c in CASES for name in c.options} | {n for c in CASES for n in c.needles}
    missing = [name for name in _valid_options(store) if name not in covered]
    assert not missing, f"options with no bad-value case: {missing}"
    assert len({c.name for c in CASES}) == len(CASES), "duplicate case names"


@pytest.mark.parametrize("stream", [False, True], ids=["batch", "stream"])
def test_the_cases_base_options_are_good(store: Path, stream: bool) -> None:
    """Every case adds its bad value to ``topic`` + the test store: that base must plan without an error,
    or the table's errors would not show that the bad value is what is caught."""
    run_direct(Case("base", {}, (), stream=stream), store)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bad_option_direct(case: Case, store: Path) -> None:
    try:
        run_direct(case, store)
        error = None
    except Exception as exc:  # noqa: BLE001 - judged by _check
        error = exc
    problem = _check(case, error)
    assert problem is None, problem


def _spark_case(spark, case: Case, store: Path, tmp: Path) -> None:  # noqa: F811
    try:
        run_spark(spark, case, store, tmp)
        error = None
    except Exception as exc:  # noqa: BLE001 - judged by _check
        error = exc
    problem = _check(case, error)
    assert problem is None, problem


@pytest.mark.spark
@pytest.mark.parametrize("case", [c for c in CASES if c.name in SPARK_SAMPLE], ids=str)
def test_bad_option_through_spark_sample(spark, case: Case, store: Path, tmp_path: Path) -> None:  # noqa: F811
    _spark_case(spark, case, store, tmp_path)


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("case", [c for c in CASES if c.name not in SPARK_SAMPLE], ids=str)
def test_bad_option_through_spark_all(spark, case: Case, store: Path, tmp_path: Path) -> None:  # noqa: F811
    _spark_case(spark, case, store, tmp_path)
