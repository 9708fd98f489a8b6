"""Executors in processes separate from the driver (issue 12): a ``local-cluster[2,1,1024]`` Spark (two
executor JVMs started by their workers, each with its own Python workers) reads our broker in network mode,
so the read path has nothing of the driver's but the pickled InputPartition. The job runs in a subprocess
(tests/spark/network_executors_job.py): one process holds one SparkContext, and the test session's is the
``local[2]`` one of tests/conftest.py. pip's PySpark ships what local-cluster needs (bin/, jars/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.scenario_util import produce, unique

REPO = Path(__file__).resolve().parents[2]


def _spark_home(home: Path) -> Path:
    """A SPARK_HOME of links to pip's pyspark directory (bin/, jars/, python/, ...): local-cluster's workers
    keep each executor's directory in ``$SPARK_HOME/work``, which must not land in the shared venv."""
    import pyspark

    home.mkdir()
    for entry in Path(pyspark.__file__).parent.iterdir():
        if entry.name != "work":
            (home / entry.name).symlink_to(entry)
    (home / "work").mkdir()
    return home


@pytest.mark.slow
@pytest.mark.parametrize("mq_broker", ["ours"], indirect=True)
def test_executor_processes_read_over_the_network(mq_broker, tmp_path):
    pytest.importorskip("pyspark")
    topic, group = unique("ExecT"), unique("execg")
    results = produce(mq_broker.namesrv_addr, topic, [b"e-%d" % i for i in range(80)])
    out = tmp_path / "out.json"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               SPARK_HOME=str(_spark_home(tmp_path / "spark-home")), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable)
    log = tmp_path / "job.log"
    with open(log, "wb") as fh:
        proc = subprocess.run([sys.executable, "-m", "tests.spark.network_executors_job", mq_broker.namesrv_addr,
                               topic, group, str(tmp_path / "ckpt"), str(out)], cwd=tmp_path, env=env,
                              stdout=fh, stderr=subprocess.STDOUT, timeout=600)
    tail = log.read_text(errors="replace")[-4000:]
    assert proc.returncode == 0 and out.exists(), tail
    assert any((tmp_path / "spark-home" / "work").iterdir())   # the executors' directories were here
    res = json.loads(out.read_text())
    want = sorted([r.queue.broker_name, r.queue.queue_id, r.queue_offset] for r in results)
    assert len(res["executors"]) == 2, res["executors"]
    jvms = {t["jvm"] for t in res["tasks"] if t["rows"]}
    assert res["driver_jvm"] not in jvms and None not in jvms, (res["driver_jvm"], jvms)
    assert all(t["pid"] != res["driver_pid"] for t in res["tasks"])
    assert sorted(k for t in res["tasks"] for k in t["keys"]) == want   # every message once
    assert res["stream_error"] is None and sorted(res["stream"]) == want
    print(f"\nlocal-cluster: session {res['session_start_s']:.1f} s, job {res['total_s']:.1f} s, "
          f"read tasks in executor JVMs {sorted(jvms)} (driver JVM {res['driver_jvm']})")
