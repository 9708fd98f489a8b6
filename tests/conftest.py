"""Shared fixtures: the one local[2] Spark session of a test run (tests/spark, tests/reliability, notebooks).

Spark tests are marked ``spark`` (tests/spark/conftest.py marks that directory); the session starts on
first use, so a run without Spark tests starts no JVM.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

# Hypothesis' default 200 ms deadline per example fails examples that a loaded 2-core machine only slows
# down (seen: allocation examples taking 276-413 ms under load); what the examples check is unchanged.
hypothesis_settings.register_profile("rocketstream", deadline=None)
hypothesis_settings.load_profile("rocketstream")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:   # tests.realbroker is imported as a package from the repository root
    sys.path.insert(0, str(REPO))


def _start_spark():
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
    return session


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    bg = _BACKGROUND.get("spark")   # usually started in the background (see "session resources" below)
    session = bg.result() if bg is not None else _start_spark()
    # The JVM's active session is per thread (py4j gives each Python thread a JVM thread of its own): one
    # built in the background thread is not active in the test thread, and DataStreamWriter.start looks a
    # Python data source up in the active session's registry (DATA_SOURCE_NOT_FOUND for "rocketmq" otherwise)
    session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(session._jsparkSession)
    yield session
    session.stop()


# --- scratch space on tmpfs ------------------------------------------------------------------------------
# A store's open and close fsync its lock, checkpoint and metadata files; tests that open hundreds of small
# stores (cut-at-every-byte campaigns, property tests) spend most of their time there on a busy disk.
# ``scratch_path`` is a fresh directory on /dev/shm when the machine has a writable one (else tmp_path):
# the same files and bytes, without the disk.
SCRATCH_ROOT = "/dev/shm"


def scratch_dir() -> str | None:
    """The tmpfs parent for scratch directories, or None (use the default temporary directory)."""
    return SCRATCH_ROOT if os.path.isdir(SCRATCH_ROOT) and os.access(SCRATCH_ROOT, os.W_OK) else None


@pytest.fixture
def scratch_path(tmp_path):
    import shutil
    import tempfile

    parent = scratch_dir()
    if parent is None:
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="rocketstream-test-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --- stores written by the real Apache RocketMQ 4.9.8 broker (tests/realstore, tests/broker) -----------
# ``real_stores`` runs ``tests.realbroker.make_store.generate`` (name server + broker + our Java peer
# program, see that module) once per session into a temp dir: variants clean, abort, retention, aged,
# each with the Java client's reading of it (the oracle). Tests must work on copies (``copy_of``): the
# originals are shared by the whole session. Skips only when the runtime is missing (no Java 17 JDK or no
# ../shared/rocketmq-4.9.8); any other problem generating the stores is an error.
# ``ROCKETSTREAM_REAL_STORES=DIR`` reuses stores made earlier with ``python -m tests.realbroker.make_store
# DIR`` (all four variants) instead of starting the broker - handy while iterating on a fix.


# --- session resources started in the background -------------------------------------------------------
# The real-store generation (about a minute and a half, most of it waiting: the 4.9.8 broker's first
# CleanCommitLogService pass comes 60 s after its start), the shared Java broker of ``mq_broker`` and the
# Spark session (JVM starts) are begun on threads as soon as collection finishes, when a selected test needs them, so
# they overlap the tests that run before their first user (pytest runs one test at a time, so one of the
# machine's cores is often idle). Their fixtures join them; an error is raised there, in the first test
# that needs the resource.
class Background:
    """``fn()`` run on a thread; ``result()`` joins and returns its value or raises its exception. With
    ``hold``, ``fn`` returns (value, stop) and the thread stays alive until ``release()`` has run
    ``stop``: tests/realbroker/peers.py's children die with the thread that started them (PDEATHSIG)."""

    def __init__(self, name: str, fn, hold: bool = False) -> None:
        self.name, self._fn, self._hold = name, fn, hold
        self._value = self._error = self._stop = None
        self._ready, self._release = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"background-{name}", daemon=True)
        self.started = time.monotonic()
        self._thread.start()

    def _run(self) -> None:
        try:
            value = self._fn()
            if self._hold:
                value, self._stop = value
            self._value = value
        except BaseException as exc:   # handed to the fixture, raised there
            self._error = exc
        finally:
            self._ready.set()
        if self._hold and self._stop is not None:
            self._release.wait()
            self._stop()

    def result(self):
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def release(self) -> None:
        """Stop a held resource (and wait for that); an unfinished one-shot job is left to the exit-time
        cleanup (peers' atexit kill, daemon thread) rather than waited for."""
        self._release.set()
        if self._hold and self._ready.is_set():
            self._thread.join(120)


_BACKGROUND: dict[str, Background] = {}


def _java_available() -> bool:
    from tests.realbroker import peers

    try:
        peers.find_dist()
        peers.find_java()
    except peers.JavaUnavailable:
        return False
    return True


def pytest_collection_finish(session) -> None:
    items = session.items
    if not items or session.config.option.collectonly:
        return
    _register_early_starts(items)
    if importlib.util.find_spec("pyspark") is not None and any("spark" in i.fixturenames for i in items):
        _BACKGROUND["spark"] = Background("spark", _start_spark)
    if not _java_available():
        return
    factory = session.config._tmp_path_factory
    if not os.environ.get("ROCKETSTREAM_REAL_STORES") and any("real_stores" in i.fixturenames for i in items):
        from tests.realbroker import make_store

        outdir = factory.mktemp("real-stores")
        _BACKGROUND["real_stores"] = Background(
            "real_stores", lambda: make_store.generate(outdir, make_store.VARIANTS, log=lambda s: None))
    if any("java_broker" in i.fixturenames or getattr(getattr(i, "callspec", None), "params", {}).get("mq_broker")
           == "java" for i in items):
        from tests.broker import java_fixtures

        home = factory.mktemp("client-java")

        def start_java():
            target = java_fixtures._start_java(home)
            return target, lambda: java_fixtures.stop(target, clean=False)
        _BACKGROUND["java_broker"] = Background("java_broker", start_java, hold=True)


# --- subprocess work started ahead of its test -------------------------------------------------------------
# A test module whose test mostly waits on processes of its own (the notebooks: kernels and Spark JVMs) may
# define ``START_EARLY_BEFORE`` (a node id prefix, e.g. "tests/store/") and ``start_early(config)``: when the
# first selected test under that prefix is about to run (and comes before the module's own tests), conftest
# calls ``start_early``, so the processes run alongside the tests in between (single-threaded unit tests that
# leave a core idle) instead of the session waiting for them at the end. ``start_early`` must be idempotent
# (the module's fixture calls it too, for runs where no trigger test was selected) and register its own
# cleanup (``config.add_cleanup``).
_EARLY_TRIGGERS: dict[str, list] = {}


def _register_early_starts(items) -> None:
    _EARLY_TRIGGERS.clear()
    first_index: dict = {}
    for index, item in enumerate(items):
        module = getattr(item, "module", None)
        if module is not None and hasattr(module, "start_early") and module not in first_index:
            first_index[module] = index
    for module, own in first_index.items():
        prefix = getattr(module, "START_EARLY_BEFORE", None)
        trigger = next((i for i in items[:own] if prefix and i.nodeid.startswith(prefix)), None)
        if trigger is not None:
            _EARLY_TRIGGERS.setdefault(trigger.nodeid, []).append(module.start_early)


def pytest_runtest_setup(item) -> None:
    for start in _EARLY_TRIGGERS.pop(item.nodeid, []):
        start(item.config)


def pytest_unconfigure(config) -> None:
    _EARLY_TRIGGERS.clear()
    for bg in _BACKGROUND.values():
        bg.release()
    _BACKGROUND.clear()


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
    bg = _BACKGROUND.get("real_stores")
    if bg is not None:
        stores = bg.result()
        print(f"\nreal stores generated in the background in {time.monotonic() - bg.started:.1f} s "
              f"(waited {time.monotonic() - t0:.1f} s): {stores['clean'].info['timings']}")
        return stores
    stores = make_store.generate(tmp_path_factory.mktemp("real-stores"), make_store.VARIANTS, log=lambda s: None)
    print(f"\nreal stores generated in {time.monotonic() - t0:.1f} s: {stores['clean'].info['timings']}")
    return stores


@pytest.fixture(scope="session")
def peer_classes(real_stores, tmp_path_factory) -> Path:
    """RealStorePeer compiled (for tests that start a broker themselves): the generation's own build
    (make_store.generate compiles it into OUTDIR/_work/classes), else a fresh one."""
    from tests.realbroker import peers

    built = Path(real_stores["clean"].root).parents[1] / "_work" / "classes"
    if (built / "RealStorePeer.class").is_file():
        return built
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
# when Java or the distribution is missing. Used by tests/client, the Spark network tests, and (as
# ``broker_target``) the Java-client scenarios of tests/broker; ``java_broker`` alone by tests that compare
# with the real broker only. Tests sharing them use names of their own (topics, groups).
BROKER_KINDS = ["ours", "java"]


@pytest.fixture(scope="session")
def java_broker(tmp_path_factory):
    """The session's real 4.9.8 name server + broker (a java_fixtures.BrokerTarget; usually started in the
    background as soon as collection finished)."""
    from tests.broker import java_fixtures
    from tests.realbroker import peers

    try:
        peers.find_java()
        peers.find_dist()
    except peers.JavaUnavailable as exc:
        pytest.skip(f"real broker unavailable: {exc}")
    if "java_broker" in _BACKGROUND:
        yield _BACKGROUND["java_broker"].result()   # killed when the session ends (pytest_unconfigure)
        return
    target = java_fixtures._start_java(tmp_path_factory.mktemp("client-java"))
    try:
        yield target
    finally:
        java_fixtures.stop(target, clean=False)   # the Java broker's clean stop takes 6-7 s; nothing checks it


@pytest.fixture(scope="session")
def ours_broker(tmp_path_factory):
    """The session's ``rocketstream serve`` (a java_fixtures.BrokerTarget); it must exit 0 on SIGTERM."""
    from tests.broker import java_fixtures

    target = java_fixtures.start_ours(tmp_path_factory.mktemp("client-ours"))
    try:
        yield target
    finally:
        codes = java_fixtures.stop(target, clean=True)
        if codes != [0]:
            pytest.fail(f"rocketstream serve exited with {codes} after SIGTERM (expected 0):\n{target.log_tail()}")


@pytest.fixture(scope="session", params=BROKER_KINDS)
def mq_broker(request):
    return request.getfixturevalue(f"{request.param}_broker")
