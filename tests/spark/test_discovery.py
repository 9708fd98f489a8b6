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


# The fresh session is a JVM start of its own (half a minute on a busy 2-core machine): it is started when
# the first tests/spark test is about to run (tests/conftest.py "subprocess work started ahead of its
# test") and runs alongside the tests before this one; a run of this file alone starts it in the test.
START_EARLY_BEFORE = "tests/spark/"
_RUN: dict = {}


def start_early(config) -> None:
    if _RUN:
        return
    work = config._tmp_path_factory.mktemp("discovery")
    root = work / "store"
    config_ = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=1 << 20)
    with MessageStore.open(root, config=config_) as s:
        for i in range(30):
            tag = "TagA" if i % 3 else "TagB"
            s.put_message(Message(topic="Discovered", body=b"x%d" % i, tags=tag), queue_id=i % 2)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    with open(work / "stdout.txt", "wb") as out, open(work / "stderr.txt", "wb") as err:
        _RUN["proc"] = subprocess.Popen([sys.executable, "-c", SCRIPT, str(root)], stdout=out, stderr=err,
                                        env=env, cwd=work)
    _RUN["work"] = work

    def kill() -> None:
        if _RUN["proc"].poll() is None:
            _RUN["proc"].kill()
            _RUN["proc"].wait()
    config.add_cleanup(kill)


def test_format_rocketmq_is_auto_discovered_in_a_fresh_session(request):
    start_early(request.config)
    proc, work = _RUN["proc"], _RUN["work"]
    try:
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout, stderr = ((work / f).read_text(errors="replace") for f in ("stdout.txt", "stderr.txt"))
    assert proc.returncode == 0, stderr[-3000:]
    line = next(x for x in stdout.splitlines() if x.startswith("RESULT "))
    assert json.loads(line[len("RESULT "):]) == {"TagA": 20, "TagB": 10}
