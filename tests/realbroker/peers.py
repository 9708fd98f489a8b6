"""Start and stop Apache RocketMQ name servers, brokers and mqadmin (4.9.x: ``$ROCKETSTREAM_RMQ_DIST`` or the
runnable distribution in ``../shared/rocketmq-4.9.8``; 5.x: ``$ROCKETSTREAM_RMQ5_DIST`` or
``../shared/rocketmq-5.3.3``; see their READMEs) as child processes on 127.0.0.1, and run our Java peer
program (``tests/java/RealStorePeer.java``) against them.

The JVM classes are started directly (``NamesrvStartup``, ``BrokerStartup``, ``MQAdminStartup``) with the
flags and generated configuration of the shared dists' ``bin/`` scripts, so any binary distribution works:
only its ``lib/*.jar`` and ``conf/`` are used (README: "Contributors: the real RocketMQ peers").

No pytest here: the store generator (``make_store``) and the test fixtures both use it.

Every process started here is registered and killed at interpreter exit (``atexit``), and each
child gets ``PR_SET_PDEATHSIG = SIGKILL`` so that a JVM never outlives the Python process that
started it, even when that process is killed.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
JAVA_SRC = REPO / "tests" / "java" / "RealStorePeer.java"
BIND = "127.0.0.1"

# Small files so that a few thousand messages span several commit-log and CQ files. 4.9.8 takes
# any mappedFileSizeCommitLog (MessageStoreConfig has no lower bound; a record must fit in one
# file) and rounds mappedFileSizeConsumeQueue up to a multiple of 20
# (MessageStoreConfig.getMappedFileSizeConsumeQueue).
COMMITLOG_FILE_SIZE = 1024 * 1024
CQ_FILE_SIZE = 100 * 20

_LIVE: list[subprocess.Popen] = []


class PeerError(RuntimeError):
    """A Java peer did not start, exited badly or timed out (the message carries its log tail)."""


class JavaUnavailable(RuntimeError):
    """No Java 17 runtime or no RocketMQ 4.9.8 distribution: the real-broker tests cannot run."""


# --- locating the runtime -----------------------------------------------------------------------
# Any Apache RocketMQ binary distribution will do (``rocketmq-all-4.9.x-bin-release`` unpacked, or the
# shared dists): only its ``lib/*.jar`` and ``conf/`` are used; the JVMs are started here directly, with
# the settings of the shared dists' ``bin/`` scripts (``_common.sh``, ``namesrv``, ``broker``, ``mqadmin``).
DIST_ENV = "ROCKETSTREAM_RMQ_DIST"       # a 4.9.x distribution
DIST5_ENV = "ROCKETSTREAM_RMQ5_DIST"     # a 5.x distribution
README_HINT = "see README, 'Contributors: the real RocketMQ peers'"


def dist_version(dist: Path) -> str | None:
    """The RocketMQ version of a distribution, from its ``lib/rocketmq-broker-<version>.jar``; None when
    ``dist`` has no such jar or no ``conf/`` (not a RocketMQ binary distribution)."""
    if not (dist / "conf").is_dir():
        return None
    jars = sorted((dist / "lib").glob("rocketmq-broker-*.jar"))
    return jars[0].name[len("rocketmq-broker-"):-len(".jar")] if jars else None


def _find(env_name: str, shared: str, series: str) -> Path:
    env = os.environ.get(env_name)
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / shared, Path("/work/shared") / shared]
    for c in candidates:
        version = dist_version(c)
        if version is not None and version.startswith(series):
            return c.resolve()
    raise JavaUnavailable(f"no Apache RocketMQ {series}x binary distribution (lib/rocketmq-broker-{series}*.jar "
                          f"and conf/) in {[str(c) for c in candidates]}: set {env_name} to an unpacked "
                          f"rocketmq-all-{series}x-bin-release ({README_HINT})")


def find_dist() -> Path:
    """A RocketMQ 4.9.x distribution: ``$ROCKETSTREAM_RMQ_DIST``, else ``../shared/rocketmq-4.9.8``."""
    return _find(DIST_ENV, "rocketmq-4.9.8", "4.9.")


def find_dist5() -> Path:
    """A RocketMQ 5.x distribution: ``$ROCKETSTREAM_RMQ5_DIST``, else ``../shared/rocketmq-5.3.3``."""
    return _find(DIST5_ENV, "rocketmq-5.3.3", "5.")


def _is5(dist: Path) -> bool:
    return (dist_version(dist) or "").startswith("5.")


# find_java's answers by JAVA_HOME: every JVM command line asks, and each ask ran `java -version` (a JVM start)
_JAVA_FOUND: dict[str | None, tuple[Path, Path]] = {}


def find_java() -> tuple[Path, Path]:
    """(java, javac) of a Java 11+ JDK; the distribution was only tested with 17 (its README). Found once
    per ``$JAVA_HOME`` value and process (a failure is not remembered: it is raised again on the next ask)."""
    key = os.environ.get("JAVA_HOME") or None
    found = _JAVA_FOUND.get(key)
    if found is None:
        found = _JAVA_FOUND[key] = _find_java()
    return found


def _find_java() -> tuple[Path, Path]:
    homes = [os.environ["JAVA_HOME"]] if os.environ.get("JAVA_HOME") else []
    homes.append("/usr/lib/jvm/java-17-openjdk-amd64")
    for home in homes:
        java, javac = Path(home) / "bin" / "java", Path(home) / "bin" / "javac"
        if java.is_file() and javac.is_file():
            break
    else:
        j, jc = shutil.which("java"), shutil.which("javac")
        if not (j and jc):
            raise JavaUnavailable(f"no java/javac found (install a Java 17 JDK or set JAVA_HOME; {README_HINT})")
        java, javac = Path(j), Path(jc)
    out = subprocess.run([str(java), "-version"], capture_output=True, text=True).stderr
    try:
        major = int(out.split('"')[1].split(".")[0])
    except (IndexError, ValueError):
        raise JavaUnavailable(f"cannot tell the Java version from: {out.strip()!r}") from None
    if major < 11:
        raise JavaUnavailable(f"Java {major} found; the RocketMQ distributions need Java 11+ (tested: 17)")
    return java, javac


JAVA_DIR = REPO / "tests" / "java"
# every tests/java source compiled once per process against the 4.9.x distribution (one javac start instead of
# one per fixture: each costs ~3 s of CPU); None: that compile failed, so sources are compiled one set at a time.
# Not for 5.x: only some sources build against its client API.
_ALL_CLASSES: dict[Path, Path | None] = {}


def compile_java(outdir: Path, *sources: Path, dist: Path | None = None) -> Path:
    """Compile the Java ``sources`` (tests/java/...) against ``dist``'s lib/ (default: the 4.9.8 distribution)
    into ``outdir``; PeerError with javac's output when it fails. Sources from tests/java are compiled all
    together once per process against the 4.9.x distribution, and the classes copied into ``outdir`` (it
    may then hold the other sources' classes too)."""
    default: Path | None = None
    with contextlib.suppress(JavaUnavailable):
        default = find_dist()
    dist = (find_dist() if dist is None else dist).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    if dist == default and all(Path(s).resolve().parent == JAVA_DIR for s in sources):
        if dist not in _ALL_CLASSES:
            every = _compiled_together(dist)
            _ALL_CLASSES[dist] = every
        every = _ALL_CLASSES[dist]
        if every is not None and all((every / (Path(s).stem + ".class")).is_file() for s in sources):
            shutil.copytree(every, outdir, dirs_exist_ok=True)
            return outdir
    return _javac(outdir, sources, dist)


def _compiled_together(dist: Path) -> Path | None:
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="rocketstream-java-"))
    atexit.register(shutil.rmtree, where, True)
    try:
        return _javac(where, tuple(sorted(JAVA_DIR.glob("*.java"))), dist)
    except PeerError:
        return None   # e.g. a source that needs another distribution's API: compile per fixture instead


def _javac(outdir: Path, sources: tuple[Path, ...], dist: Path | None) -> Path:
    """javac ``sources`` into ``outdir`` against ``dist``'s lib/ (None: no classpath)."""
    _, javac = find_java()
    cp = [] if dist is None else ["-cp", f"{dist}/lib/*"]
    res = subprocess.run([str(javac), "-nowarn", "-encoding", "UTF-8", "-d", str(outdir), *cp, *map(str, sources)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        names = " ".join(Path(s).name for s in sources)
        against = "" if dist is None else f" against {dist}"
        raise PeerError(f"javac {names}{against} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return outdir


def compile_peer(outdir: Path) -> Path:
    """Compile tests/java/RealStorePeer.java against the distribution's lib/ into ``outdir``."""
    return compile_java(outdir, JAVA_SRC)


# --- processes ----------------------------------------------------------------------------------
# resolved once here: the child between fork and exec must not load libraries (tests/conftest.py starts
# brokers from background threads, and a lock another thread held at fork time stays held in the child)
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:
    _PRCTL(1, signal.SIGKILL)   # PR_SET_PDEATHSIG (fires when the *thread* that started the child ends)


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                preexec_fn=_die_with_parent)
    _LIVE.append(proc)
    return proc


@atexit.register
def _kill_all() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(10)
    _LIVE.clear()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((BIND, port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to outgoing connections and port-0 binds (ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768   # Linux's default


# free_port's own generator: the session's background starters (tests/conftest.py Background) pick ports while
# hypothesis tests run, and hypothesis warns (HypothesisDeprecationWarning) when the global ``random`` module's
# state changes during a test's data generation
_PORTS = random.Random()


def free_port(span: tuple[int, ...] = (0,)) -> int:
    """A port P such that P+d is free for every d in ``span`` (a broker binds P-2, P and P+1).

    Below the ephemeral range: a JVM binds its ports seconds after the check, and a port inside the range can
    be taken meanwhile by any outgoing connection's local port or a port-0 server (seen: the session's
    4.9.8 broker failed with BindException while other tests ran)."""
    high = max(min(_ephemeral_low(), 61000) - 1 - max(span), 12000)
    for _ in range(500):
        p = _PORTS.randint(10000 - min(span), high)
        if all(_port_free(p + d) for d in span):
            return p
    raise PeerError("no free port found")


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


@dataclass
class Server:
    name: str
    proc: subprocess.Popen
    log: Path
    port: int
    log_dir: Path | None = None     # where the JVM's own log files go (RocketMQ's logback)
    started_s: float = 0.0

    def rocketmq_log(self, name: str) -> Path:
        """One of the JVM's log files (``broker.log``, ``namesrv.log``, ...): under ``log_dir`` with the shared
        dists' logback files, under ``log_dir/rocketmqlogs`` with an upstream release's (``${user.home}``)."""
        if self.log_dir is None:
            raise PeerError(f"{self.name}: no log dir known")
        for path in (self.log_dir / name, self.log_dir / "rocketmqlogs" / name):
            if path.is_file():
                return path
        return self.log_dir / name

    def wait_ready(self, marker: str = "boot success", timeout: float = 90.0) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if marker in self.log.read_text(errors="replace"):
                self.started_s = time.monotonic() - t0
                return self.started_s
            if self.proc.poll() is not None:
                raise PeerError(f"{self.name} exited with {self.proc.returncode} before '{marker}':\n{_tail(self.log)}")
            time.sleep(0.05)
        self.kill()
        raise PeerError(f"{self.name} not ready after {timeout:.0f} s:\n{_tail(self.log)}")

    def stop(self, timeout: float = 60.0) -> int:
        """Clean stop: SIGTERM and wait for the JVM's shutdown hooks (exit status 143)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise PeerError(f"{self.name} did not exit {timeout:.0f} s after SIGTERM:\n{_tail(self.log)}") from None
        _forget(self.proc)
        return self.proc.returncode

    def kill(self) -> None:
        """Crash: SIGKILL (a broker leaves store/abort behind)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        _forget(self.proc)


def _forget(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ValueError):
        _LIVE.remove(proc)


# --- the JVM command lines (what the shared dists' bin/ scripts run) ----------------------------------
# Broker defaults of bin/broker (both dists), before the caller's configuration; the resolved values
# (name, ports, name servers, store, file sizes, advertised address) are written after it, so they win.
BROKER_DEFAULTS = {
    "brokerId": "0", "brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH", "deleteWhen": "04",
    "fileReservedTime": "48", "autoCreateSubscriptionGroup": "true", "autoCreateTopicEnable": "true",
    "fetchNamesrvAddrByAddressServer": "false", "maxHashSlotNum": "100000", "maxIndexNum": "400000",
    # fixture robustness on small, busy machines (upstream 200 / 1000 ms)
    "waitTimeMillsInSendQueue": "3000", "osPageCacheBusyTimeOutMills": "5000",
}


def _jvm_flags(dist: Path, data_dir: Path, bind: str) -> list[str]:
    """``RMQ_JVM_FLAGS`` of the dists' ``bin/_common.sh``."""
    flags = ["--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED"]
    if _is5(dist):
        # 5.x: the HA listener's bind address is the shared dist's own patch (an upstream build ignores it)
        flags += ["--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
                  f"-Drocketmq.home.dir={dist}", f"-Drocketmq.ha.bindAddress={bind}"]
    else:
        # 4.9.x binds the wildcard address; the shared dist's RemotingUtil patch reads this property
        flags += ["--add-exports=java.base/sun.nio.ch=ALL-UNNAMED", f"-Drocketmq.home.dir={dist}",
                  f"-Drocketmq.remoting.bindAddress={bind}"]
    # plain TCP (upstream's default tls.server.mode "permissive" would make a self-signed certificate)
    return [*flags, "-Dtls.server.mode=disabled", "-Dtls.enable=false", "-Djava.net.preferIPv4Stack=true",
            f"-Djna.tmpdir={data_dir}/jna-tmp", "-Dfile.encoding=UTF-8"]


def _classpath(dist: Path) -> str:
    # 4.x scripts put conf/ first (logback and tools.yml lookups); 5.x point at their logback files by name
    return f"{dist}/lib/*" if _is5(dist) else f"{dist}/conf:{dist}/lib/*"


def _logging(dist: Path, role: str, instance: Path, log_dir: Path) -> list[str]:
    """Where a JVM logs: ``rmq.log.dir`` (the shared dists' logback files), and ``user.home`` = the instance
    dir, where an upstream release's logback files (``${user.home}/logs/rocketmqlogs``) and 5.x's other
    ``user.home`` defaults put their files: nothing goes under the contributor's home."""
    opts = [f"-Duser.home={instance}", f"-Drmq.log.dir={log_dir}"]
    conf = dist / "conf" / f"rmq.{role}.logback.xml"      # 5.x: bin/_common.sh names the role's file
    if _is5(dist) and conf.is_file():
        opts.append(f"-Dlogback.configurationFile={conf}")
    return opts


def server_env(dist: Path) -> dict[str, str]:
    """The environment of a JVM started here: ours without ``RMQ_*`` (the old scripts' settings), with
    ``ROCKETMQ_HOME`` (4.9.x and 5.x read it when ``rocketmq.home.dir`` is not given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RMQ_")}
    env["ROCKETMQ_HOME"] = str(dist)
    return env


def namesrv_command(nsdir: Path, port: int, *, bind: str = BIND, heap: str = "128m",
                    jvm_opts: list[str] | None = None, dist: Path | None = None) -> list[str]:
    """``bin/namesrv``: writes ``nsdir/namesrv.properties`` and returns the NamesrvStartup command line
    (``jvm_opts`` last, as ``RMQ_JAVA_OPTS``)."""
    dist = dist or find_dist()
    java, _ = find_java()
    nsdir = nsdir.resolve()
    log_dir = nsdir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    props = {"listenPort": str(port), "kvConfigPath": f"{nsdir}/kvConfig.json"}
    if _is5(dist):
        props.update(bindAddress=bind, configStorePath=f"{nsdir}/namesrv.stored.properties")
    conf = nsdir / "namesrv.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return [str(java), "-server", "-Xms64m", f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:-OmitStackTraceInFastThrow",
            *_jvm_flags(dist, nsdir.parent, bind), *_logging(dist, "namesrv", nsdir, log_dir), *(jvm_opts or []),
            "-cp", _classpath(dist), "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(conf)]


def broker_command(bhome: Path, port: int, namesrv_addr: str, *, name: str = "broker-a",
                   cluster: str = "DefaultCluster", store: Path | None = None,
                   extra_conf: dict[str, str] | str | None = None, commitlog_file_size: int = COMMITLOG_FILE_SIZE,
                   cq_file_size: int = CQ_FILE_SIZE, heap: str = "384m", bind: str = BIND,
                   jvm_opts: list[str] | None = None, dist: Path | None = None) -> list[str]:
    """``bin/broker``: writes ``bhome/broker.effective.conf`` (fixture defaults < ``extra_conf`` < the
    resolved values given here) and returns the BrokerStartup command line (``jvm_opts`` last)."""
    dist = dist or find_dist()
    java, _ = find_java()
    bhome = bhome.resolve()
    store = (store or bhome / "store").resolve()
    log_dir = bhome / "logs"
    for d in (bhome, store, log_dir):
        d.mkdir(parents=True, exist_ok=True)
    extra = extra_conf if isinstance(extra_conf, str) else "".join(f"{k}={v}\n" for k, v in (extra_conf or {}).items())
    # bin/broker rewrites the legacy spelling, which 4.9.x and 5.x ignore (MessageStoreConfig's names)
    extra = re.sub(r"(?m)^(\s*)mapedFileSize", r"\1mappedFileSize", extra)
    resolved = {"brokerClusterName": cluster, "brokerName": name, "listenPort": str(port),
                "namesrvAddr": namesrv_addr, "storePathRootDir": str(store),
                "mappedFileSizeCommitLog": str(commitlog_file_size), "mappedFileSizeConsumeQueue": str(cq_file_size),
                "brokerIP1": bind, "brokerIP2": bind}
    if _is5(dist):
        resolved["bindAddress"] = bind
    conf = bhome / "broker.effective.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in BROKER_DEFAULTS.items()) + "# ---- caller's\n" + extra
                    + "\n# ---- resolved\n" + "".join(f"{k}={v}\n" for k, v in resolved.items()))
    return [str(java), "-server", "-Xms128m", f"-Xmx{heap}", "-XX:MaxDirectMemorySize=512m", "-XX:+UseSerialGC",
            "-XX:-OmitStackTraceInFastThrow", *_jvm_flags(dist, bhome.parent, bind),
            *_logging(dist, "broker", bhome, log_dir), "-Drocketmq.broker.diskSpaceWarningLevelRatio=0.99",
            *(jvm_opts or []), "-cp", _classpath(dist), "org.apache.rocketmq.broker.BrokerStartup", "-c", str(conf)]


MQADMIN_LAUNCHER = JAVA_DIR / "MqadminThenExit.java"
_LAUNCHER_CLASSES: list[Path] = []


def _mqadmin_launcher() -> Path:
    """tests/java/MqadminThenExit.java compiled once per process (it uses no RocketMQ class: no classpath)."""
    if not _LAUNCHER_CLASSES:
        import tempfile

        where = Path(tempfile.mkdtemp(prefix="rocketstream-mqadmin-"))
        atexit.register(shutil.rmtree, where, True)
        _LAUNCHER_CLASSES.append(_javac(where, (MQADMIN_LAUNCHER,), None))
    return _LAUNCHER_CLASSES[0]


def mqadmin_command(home: Path, *args: str, jvm_opts: list[str] | None = None,
                    dist: Path | None = None) -> list[str]:
    """``bin/mqadmin ARGS``: the MQAdminStartup command line, its logs under ``home``. mqadmin signs with
    the AK/SK of ``<rocketmq.home.dir>/conf/tools.yml`` when that file exists (``-Drocketmq.home.dir=`` in
    ``jvm_opts`` points it at another). MQAdminStartup runs under tests/java/MqadminThenExit.java, which ends
    the JVM when mqadmin's main returns instead of waiting out its Netty threads' 2 s graceful shutdown."""
    dist = dist or find_dist()
    java, _ = find_java()
    log_dir = home.resolve() / "mqadmin-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    logging = [f"-Duser.home={log_dir}", f"-Drmq.log.dir={log_dir}", f"-Drocketmq.client.logRoot={log_dir}"]
    if _is5(dist):
        logging.append(f"-Drocketmq.log.root={log_dir}")
        if (dist / "conf" / "rmq.tools.logback.xml").is_file():
            logging.append(f"-Dlogback.configurationFile={dist}/conf/rmq.tools.logback.xml")
    return [str(java), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            *_jvm_flags(dist, log_dir, BIND), *logging, *(jvm_opts or []),
            "-cp", f"{_mqadmin_launcher()}:{_classpath(dist)}", MQADMIN_LAUNCHER.stem, *args]


def mqadmin(home: Path, *args: str, jvm_opts: list[str] | None = None, dist: Path | None = None,
            timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    """Run mqadmin to the end (text output; the caller checks ``returncode``: mqadmin exits 0 even after
    many failures, so callers look at what it printed)."""
    dist = dist or find_dist()
    return subprocess.run(mqadmin_command(home, *args, jvm_opts=jvm_opts, dist=dist), env=server_env(dist),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def smoke_command(home: Path, *args: str, jvm_opts: list[str] | None = None, dist: Path | None = None) -> list[str]:
    """``bin/smoke ARGS``: the shared dist's Java smoke program (``smoke/rmq-smoke.jar``, which an Apache
    binary release does not have: JavaUnavailable then); ``jvm_opts`` last, as ``RMQ_JAVA_OPTS``."""
    dist = dist or find_dist()
    jar = dist / "smoke" / "rmq-smoke.jar"
    if not jar.is_file():
        raise JavaUnavailable(f"{jar} is missing: the smoke program comes with the shared dist only, not with an "
                              f"Apache binary release ({README_HINT})")
    java, _ = find_java()
    log_dir = home.resolve() / "smoke-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    logging = [f"-Drocketmq.client.logRoot={log_dir}"]
    if (dist / "conf" / "logback_smoke.xml").is_file():
        logging.append(f"-Dlogback.configurationFile={dist}/conf/logback_smoke.xml")
    return [str(java), "-Xmx256m", "-XX:+UseSerialGC", *_jvm_flags(dist, log_dir, BIND), *logging,
            *(jvm_opts or []), "-cp", f"{jar}:{_classpath(dist)}", "rmqsmoke.RmqSmoke", *args]


def start_namesrv(home: Path, jvm_opts: list[str] | None = None, *, dist: Path | None = None) -> Server:
    """A name server on a free port; ``jvm_opts`` (``-Dtls.server.mode=...``) go last on the JVM's line;
    ``dist`` another distribution than :func:`find_dist`'s (e.g. :func:`find_dist5`)."""
    dist = dist or find_dist()
    port = free_port()
    argv = namesrv_command(home / f"namesrv-{port}", port, jvm_opts=jvm_opts, dist=dist)
    log = home / f"namesrv-{port}.out"
    return Server("namesrv", _spawn(argv, server_env(dist), log), log, port, home / f"namesrv-{port}" / "logs")


def start_broker(home: Path, namesrv: int | str, store: Path | None = None,
                 extra_conf: dict[str, str] | None = None, name: str = "broker-a",
                 cluster: str = "DefaultCluster", jvm_opts: list[str] | None = None, *,
                 dist: Path | None = None) -> Server:
    """A master broker registering with ``namesrv`` (a port on 127.0.0.1, or ``namesrvAddr`` itself,
    e.g. "a;b"); its storePathRootDir is ``store`` (default: under its home; created when missing);
    ``jvm_opts`` go last on the JVM's command line; ``dist`` as for :func:`start_namesrv`."""
    dist = dist or find_dist()
    port = free_port((-2, 0, 1))
    bhome = home / f"broker-{name}-{port}"
    addr = f"{BIND}:{namesrv}" if isinstance(namesrv, int) else namesrv
    argv = broker_command(bhome, port, addr, name=name, cluster=cluster, store=store, extra_conf=extra_conf,
                          jvm_opts=jvm_opts, dist=dist)
    log = bhome / "broker.out"
    return Server(f"broker {name}@{port}", _spawn(argv, server_env(dist), log), log, port, bhome / "logs")


@dataclass
class Cluster:
    """One name server + one broker on a store directory. Use as a context manager: the servers are
    stopped on exit (SIGTERM and wait when ``clean_stop``, else SIGKILL), even on error."""
    home: Path
    store: Path
    extra_conf: dict[str, str] | None = None
    clean_stop: bool = False
    namesrv: Server | None = None
    broker: Server | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def start(self) -> Cluster:
        t0 = time.monotonic()
        self.namesrv = start_namesrv(self.home)
        self.namesrv.wait_ready("boot success")
        self.broker = start_broker(self.home, self.namesrv.port, self.store, self.extra_conf)
        self.broker.wait_ready("boot success")
        self.timings["start_s"] = time.monotonic() - t0
        return self

    @property
    def namesrv_addr(self) -> str:
        return f"{BIND}:{self.namesrv.port}"

    def stop(self, clean: bool | None = None) -> None:
        clean = self.clean_stop if clean is None else clean
        t0 = time.monotonic()
        try:
            if self.broker is not None:
                if clean:
                    self.broker.stop()
                else:
                    self.broker.kill()
        finally:
            if self.namesrv is not None:
                self.namesrv.kill()   # nothing of the name server's is kept
        self.timings["stop_s"] = time.monotonic() - t0

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self.stop(clean=False)
            raise

    def __exit__(self, exc_type, *exc) -> None:
        self.stop(clean=self.clean_stop if exc_type is None else False)


# --- the Java peer program ----------------------------------------------------------------------
def peer_command(classes: Path, home: Path, *args: str) -> list[str]:
    java, _ = find_java()
    dist = find_dist()
    # ClientLogger writes under ${user.home}/logs/rocketmqlogs unless rocketmq.client.logRoot is set
    return [str(java), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dfile.encoding=UTF-8",
            f"-Duser.home={home}", f"-Drocketmq.client.logRoot={home}/client-logs",
            "-cp", f"{classes}:{dist}/lib/*", "RealStorePeer", *args]


def start_peer(classes: Path, log: Path, *args: str, home: Path) -> subprocess.Popen:
    return _spawn(peer_command(classes, home, *args), dict(os.environ), log)


def wait_peer(proc: subprocess.Popen, log: Path, timeout: float, what: str) -> str:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        _forget(proc)
        raise PeerError(f"{what}: no exit after {timeout:.0f} s:\n{_tail(log)}") from None
    _forget(proc)
    if proc.returncode != 0:
        raise PeerError(f"{what}: exit status {proc.returncode}:\n{_tail(log)}")
    return log.read_text(errors="replace")


def read_oracle(classes: Path, namesrv_addr: str, topics: list[str], out: Path, home: Path,
                timeout: float = 120.0) -> Path:
    """Run ``RealStorePeer read``: every message of ``topics`` as the Java client reads it, to ``out``."""
    log = out.with_suffix(".log")
    proc = start_peer(classes, log, "read", "--namesrv", namesrv_addr, "--topics", ",".join(topics),
                      "--out", str(out), home=home)
    wait_peer(proc, log, timeout, "RealStorePeer read")
    return out


if __name__ == "__main__":   # pragma: no cover - manual check of the runtime
    print(find_dist(), find_java(), file=sys.stderr)
