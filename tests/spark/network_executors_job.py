"""A Spark job with executors in processes of their own (``local-cluster[2,1,1024]``: a master, two workers
and one executor JVM per worker, each with its own Python workers), reading a topic in network mode.

Run by tests/spark/test_network_executors.py with the venv's python (a driver process can hold one
SparkContext only, and the test session's is ``local[2]``):

    python -m tests.spark.network_executors_job NAMESRV TOPIC GROUP CHECKPOINT OUT.json

Writes OUT.json: the driver's JVM and Python pids, the executors Spark registered, and per read task the
pids of the Python worker that read it and of the JVM above it, with the rows it read; plus the rows of
a streaming query (AvailableNow, the group's offsets committed to the broker).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def _jvm_above(pid: int) -> int | None:
    """The nearest ancestor of ``pid`` that is a java process (the executor or driver JVM)."""
    while pid > 1:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        pid = int(fields[1])   # ppid
        with open(f"/proc/{pid}/comm") as fh:
            if fh.read().strip() == "java":
                return pid
    return None


def _task_info(rows):
    n = 0
    keys = []
    for r in rows:
        n += 1
        keys.append((r.brokerName, r.queueId, r.queueOffset))
    yield {"pid": os.getpid(), "jvm": _jvm_above(os.getpid()), "rows": n, "keys": keys}


def main(namesrv: str, topic: str, group: str, checkpoint: str, out: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    t0 = time.monotonic()
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("rocketstream-executors")
             .config("spark.ui.enabled", "false")
             .config("spark.executor.memory", "512m")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.pollingDelay", "10ms")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    started = time.monotonic() - t0
    from rocketstream.spark import register

    register(spark)
    jvm = spark.sparkContext._jvm
    driver_jvm = int(jvm.java.lang.ProcessHandle.current().pid())
    executors = sorted(filter(None, spark.sparkContext._jsc.sc().getExecutorIds().mkString(",").split(",")))

    df = (spark.read.format("rocketmq").option("nameServer", namesrv).option("topic", topic)
          .option("numPartitions", "4").load())
    tasks = df.select("brokerName", "queueId", "queueOffset").rdd.mapPartitions(_task_info).collect()

    seen: list[list] = []

    def sink(batch, batch_id):
        seen.extend([r.brokerName, r.queueId, r.queueOffset] for r in batch.collect())

    query = (spark.readStream.format("rocketmq").option("nameServer", namesrv).option("topic", topic)
             .option("consumerGroup", group).option("startingOffsets", "earliest").option("maxMessagesPerTrigger", "25")
             .load().select("brokerName", "queueId", "queueOffset")
             .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    error = query.exception()
    result = {"driver_pid": os.getpid(), "driver_jvm": driver_jvm, "executors": executors, "tasks": tasks,
              "stream": seen, "stream_error": None if error is None else str(error)[:3000],
              "session_start_s": started, "total_s": time.monotonic() - t0}
    spark.stop()
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:6])
