"""The rocketmq sink in network mode (option nameServer, our Producer's send_batch) against our broker and the
real Apache RocketMQ 4.9.8 (``mq_broker``), read back with the real Java client (tests/client/java/
ProducedReader.java: DefaultLitePullConsumer assign, JSON lines) and, for our broker, with our source over
the broker's store; plus streaming writes (writeStream) in local mode."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.realbroker import peers

READER_SRC = Path(__file__).resolve().parents[1] / "client" / "java" / "ProducedReader.java"
USER = ("UNIQ_KEY", "WAIT", "TAGS", "KEYS")


@pytest.fixture(scope="module")
def java_reader(tmp_path_factory) -> Path:
    try:
        peers.find_java()
        peers.find_dist()
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))
    return peers.compile_java(tmp_path_factory.mktemp("sink-reader"), READER_SRC)


def java_read(classes: Path, namesrv: str, topic: str, count: int, home: Path) -> list[dict]:
    java, _ = peers.find_java()
    res = subprocess.run([str(java), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                          "-Dfile.encoding=UTF-8", f"-Duser.home={home}", f"-Drocketmq.client.logRoot={home}/logs",
                          "-cp", f"{classes}:{peers.find_dist()}/lib/*", "ProducedReader", namesrv, topic,
                          str(count), "40"], capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, f"{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    # one row per stored message: the reader may print a queue's first messages twice (its seek races the
    # pulls assign() started); a message stored twice has two queue offsets and stays two rows
    out: dict[tuple[str, int, int], dict] = {}
    for o in (json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")):
        if "msgId" in o:
            out.setdefault((o["brokerName"], o["queueId"], o["queueOffset"]), o)
    return list(out.values())


def rows(n: int) -> list[tuple]:
    return [(f"payload-{i}-".encode() * (1 + i % 5), f"T{i % 2}" if i % 3 else None,
             [f"key{i}", "shared"] if i % 2 else None, {"i": str(i), "u": "wert-ä"} if i % 4 else None)
            for i in range(n)]


def test_network_write_read_back_by_java_client(spark, mq_broker, java_reader, tmp_path):
    topic = f"SinkNet{uuid.uuid4().hex[:8]}"
    data = rows(60)
    df = spark.createDataFrame(data, "body binary, tags string, keys array<string>, properties map<string,string>")
    df.repartition(2).write.format("rocketmq").option("nameServer", mq_broker.namesrv_addr).option("topic", topic) \
        .option("batchSize", "16").mode("append").save()
    got = java_read(java_reader, mq_broker.namesrv_addr, topic, len(data), tmp_path / "java")
    want = sorted((hashlib.sha256(b).hexdigest(), t, " ".join(k) if k else None, sorted((p or {}).items()))
                  for b, t, k, p in data)
    seen = sorted((o["bodySha256"], o.get("tags"), o.get("keys"),
                   sorted((k, v) for k, v in o["properties"].items() if k not in USER and k != "MIN_OFFSET"
                          and k != "MAX_OFFSET" and k != "CLUSTER"))
                  for o in got)
    assert seen == want, f"against {mq_broker.kind}"
    assert len({o["msgId"] for o in got}) == len(data)
    if mq_broker.kind == "ours":   # our source reads the broker's store (readers take no lock)
        store = mq_broker.home / "store"
        deadline = time.monotonic() + 10
        while True:
            back = spark.read.format("rocketmq").option("topic", topic).load(str(store)) \
                .select("body", "tags", "keys").collect()
            if len(back) == len(data) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert sorted((bytes(r.body), r.tags, r.keys) for r in back) == \
            sorted((b, t, " ".join(k) if k else None) for b, t, k, _ in data)


def test_network_refused_send_fails_the_task_with_the_brokers_answer(spark, mq_broker):
    """A 5 MiB body with maxBatchBytes raised past the broker's maxMessageSize (4 MiB): the broker refuses."""
    topic = f"SinkBig{uuid.uuid4().hex[:8]}"
    df = spark.createDataFrame([(b"x" * (5 * 1024 * 1024),)], "body binary")
    with pytest.raises(Exception) as info:
        df.write.format("rocketmq").option("nameServer", mq_broker.namesrv_addr).option("topic", topic) \
            .option("maxBatchBytes", str(8 * 1024 * 1024)).mode("append").save()
    text = str(info.value)
    assert "response code" in text and "remark" in text, text[-3000:]


def test_network_queue_id_column(spark, mq_broker):
    from rocketstream.client import LitePullConsumer  # noqa: F401  (imported lazily by the client package)
    from rocketstream.client.common import MessageQueue
    from rocketstream.client.lite_pull import LitePullConsumer as LPC

    topic = f"SinkQid{uuid.uuid4().hex[:8]}"
    # the topic must exist for queueId rows: a first write without queueId creates it (auto-create, 4 queues)
    spark.createDataFrame([(b"first",)], "body binary").write.format("rocketmq") \
        .option("nameServer", mq_broker.namesrv_addr).option("topic", topic).mode("append").save()
    data = [(f"q{i}".encode(), i % 2) for i in range(20)]
    spark.createDataFrame(data, "body binary, queueId int").coalesce(1).write.format("rocketmq") \
        .option("nameServer", mq_broker.namesrv_addr).option("topic", topic).mode("append").save()
    c = LPC(f"sinkqid{uuid.uuid4().hex[:8]}", namesrv=mq_broker.namesrv_addr)
    c.start()
    try:
        got: dict[int, list[bytes]] = {}
        for q in (0, 1):
            mq = MessageQueue(topic, mq_broker.broker_name, q)
            c.assign([mq])
            c.seek(mq, 0)
            deadline = time.monotonic() + 20
            while len([b for b in got.get(q, []) if b.startswith(b"q")]) < 10 and time.monotonic() < deadline:
                for m in c.poll(1.0):
                    got.setdefault(m.queue_id, []).append(m.body)
        for q in (0, 1):   # in order, within the queue the row named
            assert [b for b in got[q] if b.startswith(b"q")] == [f"q{i}".encode() for i in range(20) if i % 2 == q]
    finally:
        c.shutdown()


# ---- streaming (local mode: our source -> the sink) -------------------------------------------------------

def test_write_stream_local_at_least_once_no_loss(spark, tmp_path):
    from spark_stores import fill

    src, dst, ckpt = tmp_path / "src", tmp_path / "dst", tmp_path / "ckpt"
    fill(src, 30, topic="StreamIn")

    def run():
        q = (spark.readStream.format("rocketmq").option("topic", "StreamIn").option("startingOffsets", "earliest")
             .load(str(src)).selectExpr("body", "tags", "'StreamOut' AS topic")
             .writeStream.format("rocketmq").option("checkpointLocation", str(ckpt)).trigger(availableNow=True)
             .start(str(dst)))
        q.awaitTermination(120)
        assert q.exception() is None

    run()
    fill(src, 12, topic="StreamIn", start=30)
    run()
    back = spark.read.format("rocketmq").option("topic", "StreamOut").load(str(dst)).select("body", "tags").collect()
    assert sorted(bytes(r.body) for r in back) == sorted(f"body-{i}".encode() for i in range(42))


def test_write_stream_network(spark, mq_broker, java_reader, tmp_path):
    """writeStream through the broker (micro-batches of our source over a local store), read by the Java client."""
    from spark_stores import fill

    src, ckpt = tmp_path / "src", tmp_path / "ckpt"
    fill(src, 25, topic="StreamIn")
    topic = f"SinkStream{uuid.uuid4().hex[:8]}"
    q = (spark.readStream.format("rocketmq").option("topic", "StreamIn").option("startingOffsets", "earliest")
         .option("maxMessagesPerTrigger", "10").load(str(src)).select("body", "tags", "keys")
         .writeStream.format("rocketmq").option("nameServer", mq_broker.namesrv_addr).option("topic", topic)
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    got = java_read(java_reader, mq_broker.namesrv_addr, topic, 25, tmp_path / "java")
    assert sorted(o["bodySha256"] for o in got) == sorted(hashlib.sha256(f"body-{i}".encode()).hexdigest()
                                                          for i in range(25))
