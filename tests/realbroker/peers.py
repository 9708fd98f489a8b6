"""Start and stop Apache RocketMQ 4.9.8 name servers and brokers (the runnable distribution in
``../shared/rocketmq-4.9.8``, see its README) as child processes on 127.0.0.1, and run our Java
peer program (``tests/java/RealStorePeer.java``) against them.

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
def find_dist() -> Path:
    env = os.environ.get("ROCKETSTREAM_RMQ_DIST")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "rocketmq-4.9.8", Path("/work/shared/rocketmq-4.9.8")]
    for c in candidates:
        if (c / "bin" / "broker").is_file() and (c / "lib").is_dir():
            return c.resolve()
    raise JavaUnavailable(f"RocketMQ 4.9.8 distribution not found (looked in {[str(c) for c in candidates]}; "
                          "set ROCKETSTREAM_RMQ_DIST)")


def find_java() -> tuple[Path, Path]:
    """(java, javac) of a Java 11+ JDK; the distribution was only tested with 17 (its README)."""
    homes = [os.environ["JAVA_HOME"]] if os.environ.get("JAVA_HOME") else []
    homes.append("/usr/lib/jvm/java-17-openjdk-amd64")
    for home in homes:
        java, javac = Path(home) / "bin" / "java", Path(home) / "bin" / "javac"
        if java.is_file() and javac.is_file():
            break
    else:
        j, jc = shutil.which("java"), shutil.which("javac")
        if not (j and jc):
            raise JavaUnavailable("no java/javac found (install a Java 17 JDK or set JAVA_HOME)")
        java, javac = Path(j), Path(jc)
    out = subprocess.run([str(java), "-version"], capture_output=True, text=True).stderr
    try:
        major = int(out.split('"')[1].split(".")[0])
    except (IndexError, ValueError):
        raise JavaUnavailable(f"cannot tell the Java version from: {out.strip()!r}") from None
    if major < 11:
        raise JavaUnavailable(f"Java {major} found; the RocketMQ 4.9.8 distribution needs Java 11+ (tested: 17)")
    return java, javac


def compile_peer(outdir: Path) -> Path:
    """Compile tests/java/RealStorePeer.java against the distribution's lib/ into ``outdir``."""
    dist = find_dist()
    _, javac = find_java()
    outdir.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([str(javac), "-nowarn", "-encoding", "UTF-8", "-d", str(outdir),
                          "-cp", f"{dist}/lib/*", str(JAVA_SRC)], capture_output=True, text=True)
    if res.returncode != 0:
        raise PeerError(f"javac failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return outdir


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


def free_port(span: tuple[int, ...] = (0,)) -> int:
    """A port P such that P+d is free for every d in ``span`` (a broker binds P-2, P and P+1)."""
    for _ in range(500):
        p = random.randint(20000, 60000)
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
    started_s: float = 0.0

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


def _base_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RMQ_")}
    env.update(RMQ_DATA_DIR=str(home), RMQ_BIND_ADDRESS=BIND)
    return env


def start_namesrv(home: Path, jvm_opts: list[str] | None = None) -> Server:
    """A name server on a free port; ``jvm_opts`` (``-Dtls.server.mode=...``) go last on the JVM's line."""
    dist = find_dist()
    port = free_port()
    env = _base_env(home)
    if jvm_opts:
        env["RMQ_JAVA_OPTS"] = " ".join(jvm_opts)
    env.update(RMQ_NAMESRV_PORT=str(port), RMQ_NAMESRV_DIR=str(home / f"namesrv-{port}"),
               RMQ_NAMESRV_HEAP="128m")
    log = home / f"namesrv-{port}.out"
    return Server("namesrv", _spawn([str(dist / "bin" / "namesrv")], env, log), log, port)


def start_broker(home: Path, namesrv: int | str, store: Path | None = None,
                 extra_conf: dict[str, str] | None = None, name: str = "broker-a",
                 cluster: str = "DefaultCluster", jvm_opts: list[str] | None = None) -> Server:
    """A master broker registering with ``namesrv`` (a port on 127.0.0.1, or ``namesrvAddr`` itself,
    e.g. "a;b"); its storePathRootDir is ``store`` (default: under its home; created when missing);
    ``jvm_opts`` go last on the JVM's command line."""
    dist = find_dist()
    port = free_port((-2, 0, 1))
    bhome = home / f"broker-{name}-{port}"
    bhome.mkdir(parents=True, exist_ok=True)
    env = _base_env(home)
    addr = f"{BIND}:{namesrv}" if isinstance(namesrv, int) else namesrv
    env.update(RMQ_BROKER_PORT=str(port), RMQ_NAMESRV_ADDR=addr, RMQ_BROKER_NAME=name, RMQ_CLUSTER_NAME=cluster,
               RMQ_BROKER_HOME=str(bhome), RMQ_STORE_DIR=str(store or bhome / "store"),
               RMQ_COMMITLOG_FILE_SIZE=str(COMMITLOG_FILE_SIZE), RMQ_CQ_FILE_SIZE=str(CQ_FILE_SIZE),
               RMQ_BROKER_HEAP="384m")
    if jvm_opts:
        env["RMQ_JAVA_OPTS"] = " ".join(jvm_opts)
    argv = [str(dist / "bin" / "broker")]
    if extra_conf:
        conf = bhome / "extra.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in extra_conf.items()))
        argv.append(str(conf))
    log = bhome / "broker.out"
    return Server(f"broker {name}@{port}", _spawn(argv, env, log), log, port)


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
