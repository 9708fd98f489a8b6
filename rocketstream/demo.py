"""`rocketstream demo`: the main job on the embedded store.

Produces a sample topic with tags and keys into the store, runs a Spark streaming query over it with
Trigger.AvailableNow that counts messages per tag and per queue, prints the result, then prints the
consumer group's progress read back from the broker's offset table (config/consumerOffset.json).
Running it again appends more messages; the checkpoint under the store root makes the second run
read only what is new, and the counts stay cumulative.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

DEMO_TOPIC = "DemoTopic"
DEMO_GROUP = "demo-group"
DEMO_TAGS = ("TagA", "TagB", "TagC")
DEMO_QUEUES = 4


def spark_session(app_name: str = "rocketstream-demo", *, master: str = "local[2]"):
    """A quiet local SparkSession with the rocketmq source registered."""
    from pyspark.sql import SparkSession

    # Spark starts Python workers with `python3` from PATH unless told otherwise; they need this
    # interpreter's packages (pyarrow, rocketstream).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log_conf = Path.cwd() / "conf" / "log4j2.properties"   # ./conf as for broker.conf, else the built-in copy
    if not log_conf.is_file():
        log_conf = Path(__file__).resolve().parent / "defaults" / "log4j2.properties"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if log_conf.exists():
        opt = f"-Dlog4j.configurationFile=file:{log_conf}"
        builder = builder.config("spark.driver.extraJavaOptions", opt)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from rocketstream.spark import register

    register(spark)
    return spark


def produce_sample(store_root: Path, count: int) -> dict:
    """Append ``count`` messages to DemoTopic with tags TagA/TagB/TagC and one key each."""
    from rocketstream.store import MessageStore
    from rocketstream.store.meta.config import writer_config

    with MessageStore.open(store_root, config=writer_config(store_root), create=True) as store:
        store.create_topic(DEMO_TOPIC, DEMO_QUEUES)
        start = time.time()
        for q in range(DEMO_QUEUES):   # message i goes to queue i % DEMO_QUEUES
            ids = range(q, count, DEMO_QUEUES)
            bodies = [json.dumps({"order": i, "amount": (i * 37) % 1000}).encode() for i in ids]
            tags = [DEMO_TAGS[(i * 7 + i // 3) % len(DEMO_TAGS)] for i in ids]
            keys = [f"order-{i}" for i in ids]
            for k in range(0, len(bodies), 256):
                result = store.put_batch(DEMO_TOPIC, q, bodies[k : k + 256], tags=tags[k : k + 256],
                                         keys=keys[k : k + 256])
                if result.status.name != "PUT_OK":
                    raise RuntimeError(f"demo put failed: {result.status.name}")
        store.flush()
        elapsed = time.time() - start
        broker_name = store.broker_name
    return {"produced": count, "seconds": round(elapsed, 3), "brokerName": broker_name}


def produce_sample_network(namesrv: str, count: int) -> dict:
    """``produce_sample`` through a running broker (network mode): batches per queue with our Producer."""
    from rocketstream.client import Producer
    from rocketstream.client.common import Message, MessageQueue

    start = time.time()
    with Producer("demo-producer", namesrv=namesrv) as producer:
        first = producer.send(DEMO_TOPIC, b"{}", tags=DEMO_TAGS[0], keys="order-warmup")  # creates the topic
        queues = sorted({first.queue.queue_id} | set(range(DEMO_QUEUES)))
        broker = first.queue.broker_name
        for q in queues:
            ids = range(q, count, len(queues))
            msgs = [Message(DEMO_TOPIC, json.dumps({"order": i, "amount": (i * 37) % 1000}).encode(),
                            tags=DEMO_TAGS[(i * 7 + i // 3) % len(DEMO_TAGS)], keys=f"order-{i}") for i in ids]
            for k in range(0, len(msgs), 256):
                producer.send_batch(DEMO_TOPIC, msgs[k:k + 256], queue=MessageQueue(DEMO_TOPIC, broker, q))
    return {"produced": count + 1, "seconds": round(time.time() - start, 3), "brokerName": broker}


def run_demo(store: Path, count: int = 20000, json_output: bool = False, *,
             run_command: Callable[[list[str]], int], namesrv: str | None = None) -> int:
    """Produce ``count`` sample messages, count them per tag and queue with a streaming query, then show
    the group's progress through ``run_command`` (the CLI's ``main``, passed in by ``rocketstream demo``).
    With ``namesrv`` everything goes through a running broker (network mode): the messages are sent with
    the Producer, Spark reads by name server and commits the group's offsets to the broker."""
    store = Path(store)
    store.mkdir(parents=True, exist_ok=True)
    produced = produce_sample_network(namesrv, count) if namesrv else produce_sample(store, count)
    if not json_output:
        where = f"name server {namesrv}" if namesrv else f"store {store}"
        print(f"produced {produced['produced']} messages to {DEMO_TOPIC} in {produced['seconds']} s "
              f"({where}, broker {produced['brokerName']})")

    spark = spark_session()
    try:
        stream = (
            spark.readStream.format("rocketmq")
            .option("topic", DEMO_TOPIC)
            .option("consumerGroup", DEMO_GROUP)
            .option("consumeFromWhere", "CONSUME_FROM_FIRST_OFFSET")
            .option("maxMessagesPerTrigger", "50000")
        )
        stream = stream.option("nameServer", namesrv).load() if namesrv else stream.load(str(store))
        counts = stream.groupBy("tags", "queueId").count()
        query = (
            counts.writeStream.outputMode("complete")
            .format("memory")
            .queryName("demo_counts")
            .option("checkpointLocation", str(store / "spark-checkpoints" / (DEMO_GROUP + ("-net" if namesrv else ""))))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        rows = spark.sql("SELECT tags, queueId, `count` FROM demo_counts ORDER BY tags, queueId").collect()
    finally:
        spark.stop()

    result = [{"tags": r["tags"], "queueId": r["queueId"], "count": r["count"]} for r in rows]
    if json_output:
        print(json.dumps({"produced": produced, "counts": result}, indent=2))
    else:
        print("\nmessages per tag and queue (streaming query, Trigger.AvailableNow):")
        print(f"{'tags':6}  {'queueId':7}  count")
        for r in result:
            print(f"{r['tags']:6}  {r['queueId']:7}  {r['count']}")
        print(f"total: {sum(r['count'] for r in result)}\n")
        print(f"consumer progress of group {DEMO_GROUP} (rocketstream consumer-progress):")
        sys.stdout.flush()
    source = ["--namesrv", namesrv] if namesrv else ["--store", str(store)]
    args = ["consumer-progress", *source, "--group", DEMO_GROUP, "--topic", DEMO_TOPIC]
    return run_command(args + (["--json"] if json_output else []))
