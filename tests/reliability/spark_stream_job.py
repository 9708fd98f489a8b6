"""A streaming query in its own process, for the restart campaign (killed with SIGKILL, restarted).

Usage: spark_stream_job.py <store root | ns:<name server>> <checkpoint> <output dir> <run|final>
       <consumer group> <maxMessagesPerTrigger>

Reads topic ``RelSpark`` as format("rocketmq") with a narrow schema and appends it to a parquet file
sink. ``run`` triggers as fast as it can until killed; ``final`` is a clean Trigger.AvailableNow run
that exits 0 when everything available has been written. Prints ``STARTED`` once the query runs.
``ns:host:port`` reads over the network (option ``nameServer``) instead of a store directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from spark_reliutil import TOPIC

SCHEMA = "queueId int, queueOffset long, body binary"


def main() -> int:
    root, checkpoint, output, mode, group, per_trigger = sys.argv[1:7]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    repo = Path(__file__).resolve().parents[2]
    log_conf = repo / "conf" / "log4j2.properties"
    spark = (
        SparkSession.builder.master("local[2]").appName("rocketstream-restarts")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_conf}")
        .config("spark.sql.streaming.pollingDelay", "10ms")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from rocketstream.spark import register

    register(spark)
    query = start_query(spark, root, checkpoint, output, mode, group, per_trigger)
    print("STARTED", flush=True)
    query.awaitTermination()
    if query.exception() is not None:
        print(f"QUERY FAILED: {query.exception()}", file=sys.stderr, flush=True)
        return 1
    print("FINISHED", flush=True)
    return 0


def start_query(spark, root: str, checkpoint: str, output: str, mode: str, group: str, per_trigger: str):
    """The query of this job in ``spark`` (a session with format("rocketmq") registered), started."""
    reader = (spark.readStream.format("rocketmq").schema(SCHEMA).option("topic", TOPIC)
              .option("consumerGroup", group).option("startingOffsets", "earliest")
              .option("maxMessagesPerTrigger", per_trigger))
    if root.startswith("ns:"):
        frame = reader.option("nameServer", root[3:]).load()
    else:
        frame = reader.load(root)
    writer = frame.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if mode == "final" else writer.trigger(processingTime="0 seconds")
    return writer.start()


if __name__ == "__main__":
    sys.exit(main())
