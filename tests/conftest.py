"""Shared fixtures: the one local[2] Spark session of a test run (tests/spark, tests/reliability, notebooks).

Spark tests are marked ``spark`` (tests/spark/conftest.py marks that directory); the session starts on
first use, so a run without Spark tests starts no JVM.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    # Workers must run this interpreter (it has pyarrow and rocketstream installed).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    log_conf = REPO / "conf" / "log4j2.properties"
    java_opts = f"-Dlog4j2.configurationFile=file:{log_conf}" if log_conf.exists() else ""
    session = (
        SparkSession.builder.master("local[2]")
        .appName("rocketstream-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.sql.streaming.pollingDelay", "10ms")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from rocketstream.spark import register

    register(session)
    yield session
    session.stop()
