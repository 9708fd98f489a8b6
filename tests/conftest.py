"""Shared fixtures: the one local[2] Spark session of a test run (tests/spark, tests/reliability, notebooks).

Spark tests are marked ``spark`` (tests/spark/conftest.py marks that directory); the session starts on
first use, so a run without Spark tests starts no JVM.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:   # tests.realbroker is imported as a package from the repository root
    sys.path.insert(0, str(REPO))


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


# --- stores written by the real Apache RocketMQ 4.9.8 broker (tests/realstore, tests/broker) -----------
# ``real_stores`` runs ``tests.realbroker.make_store.generate`` (name server + broker + our Java peer
# program, see that module) once per session into a temp dir: variants clean, abort, retention, aged,
# each with the Java client's reading of it (the oracle). Tests must work on copies (``copy_of``): the
# originals are shared by the whole session. Skips only when the runtime is missing (no Java 17 JDK or no
# ../shared/rocketmq-4.9.8); any other problem generating the stores is an error.
# ``ROCKETSTREAM_REAL_STORES=DIR`` reuses stores made earlier with ``python -m tests.realbroker.make_store
# DIR`` (all four variants) instead of starting the broker - handy while iterating on a fix.


@pytest.fixture(scope="session")
def real_stores(tmp_path_factory):
    """{variant: make_store.RealStore} (see the comment above)."""
    from tests.realbroker import make_store, peers

    try:
        peers.find_dist()
        peers.find_java()
    except peers.JavaUnavailable as e:
        pytest.skip(f"real RocketMQ 4.9.8 stores cannot be generated: {e}")
    reuse = os.environ.get("ROCKETSTREAM_REAL_STORES")
    if reuse:
        stores = {}
        for v in make_store.VARIANTS:
            d = Path(reuse) / v
            info = json.loads((d / "info.json").read_text())
            stores[v] = make_store.RealStore(v, d / "store", d / "oracle.jsonl", info)
        return stores
    t0 = time.monotonic()
    stores = make_store.generate(tmp_path_factory.mktemp("real-stores"), make_store.VARIANTS, log=lambda s: None)
    print(f"\nreal stores generated in {time.monotonic() - t0:.1f} s: {stores['clean'].info['timings']}")
    return stores


@pytest.fixture(scope="session")
def peer_classes(real_stores, tmp_path_factory) -> Path:
    """RealStorePeer compiled (for tests that start a broker themselves)."""
    from tests.realbroker import peers

    return peers.compile_peer(tmp_path_factory.mktemp("peer-classes"))


@pytest.fixture(scope="session")
def copy_of(tmp_path_factory):
    """copy_of(src) -> a fresh copy of a store directory (mtimes kept)."""
    from tests.realbroker import make_store

    def copy(src: Path, name: str = "store") -> Path:
        return make_store.copy_store(src, tmp_path_factory.mktemp(name) / "store")
    return copy


# --- a name server + broker, "ours" (rocketstream serve) and "java" (the real Apache RocketMQ 4.9.8), each
# started once per session with the same settings (tests/broker/java_fixtures.py); "java" is skipped only
# when Java or the distribution is missing. Used by tests/client and the Spark network tests.
BROKER_KINDS = ["ours", "java"]


@pytest.fixture(scope="session", params=BROKER_KINDS)
def mq_broker(request, tmp_path_factory):
    from tests.broker import java_fixtures
    from tests.realbroker import peers

    kind = request.param
    if kind == "java":
        try:
            peers.find_java()
            peers.find_dist()
        except peers.JavaUnavailable as exc:
            pytest.skip(f"real broker unavailable: {exc}")
    home = tmp_path_factory.mktemp(f"client-{kind}")
    target = java_fixtures._start_java(home) if kind == "java" else java_fixtures.start_ours(home)
    try:
        yield target
    finally:
        java_fixtures.stop(target, clean=(kind == "ours"))


