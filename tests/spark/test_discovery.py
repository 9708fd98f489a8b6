"""After `pip install`, format("rocketmq") works in a fresh Spark session with no register() call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from rocketstream.store import Message, MessageStore, StoreConfig

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.read.format("rocketmq").option("topic", "Discovered").load(sys.argv[1])
    rows = df.groupBy("tags").count().orderBy("tags").collect()
    print("RESULT " + json.dumps({r["tags"]: r["count"] for r in rows}))
    spark.stop()
    """
)


def test_format_rocketmq_is_auto_discovered_in_a_fresh_session(tmp_path):
    root = tmp_path / "store"
    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=1 << 20)
    with MessageStore.open(root, config=config) as s:
        for i in range(30):
            tag = "TagA" if i % 3 else "TagB"
            s.put_message(Message(topic="Discovered", body=b"x%d" % i, tags=tag), queue_id=i % 2)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(root)], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    assert json.loads(line[len("RESULT "):]) == {"TagA": 20, "TagB": 10}
