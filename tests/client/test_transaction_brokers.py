"""Transactional messages end to end on OUR broker and on the real 4.9.8 broker, the same scenario on both
(every state asserted is the same literal for both, so the two brokers are compared):

* our ``TransactionProducer`` and the Java ``TransactionMQProducer`` (tests/java/TxScenario.java) at once,
  each with one transaction committed, one rolled back, one UNKNOW committed at check-back and one UNKNOW
  for ever (checked exactly ``transactionCheckMax`` times, then moved to TRANS_CHECK_MAX_TIME_TOPIC); ours
  also has one whose executor raises (UNKNOW, rolled back at check-back). Consumers (a Java push consumer,
  our pulls) see exactly the committed messages, with sysFlag 8 and REAL_TOPIC / REAL_QID / TRAN_MSG / PGROUP;
* then the store is handed to the OTHER broker: it passes our ``check``, and a transaction left pending in it
  (half message, op records and CID_RMQ_SYS_TRANS offsets written by one broker) is checked back and
  committed by the other - a store written by 4.9.8 is served by ours, ours by 4.9.8. (4.9.8 is killed, not
  stopped: its clean stop takes seconds while its check service still runs; the next broker recovers it.)

Both brokers run with short transaction settings (check every 1 s, timeout 1 s, 2 checks) so this stays fast.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from rocketstream.client import LocalTransactionState, Message, TransactionListener, TransactionProducer
from rocketstream.client.api import MQClientAPI, build_pull_sys_flag, process_pull_result
from rocketstream.client.common import MessageExt, SendStatus
from rocketstream.errors import BrokerResponseError
from rocketstream.store import MessageStore
from tests.broker.conftest import start_serve, stop_serve
from tests.client.interop_peers import compile_java, require_java
from tests.realbroker import peers

JAVA_SRC = Path(__file__).resolve().parents[1] / "java" / "TxScenario.java"
CHECK_MAX = 2
# a send retried after a timeout stores a second half message, which the check-back then resolves (at least
# once, in both clients): a long timeout keeps a loaded test machine from retrying
SEND_TIMEOUT_S = 15.0
CONF = {"transactionCheckInterval": "1000", "transactionTimeOut": "1000", "transactionCheckMax": str(CHECK_MAX),
        "autoCreateTopicEnable": "true", "autoCreateSubscriptionGroup": "true", "flushDiskType": "ASYNC_FLUSH",
        "flushConsumerOffsetInterval": "100",
        # the file sizes tests/realbroker/peers.py gives the 4.9.8 broker, so that either broker opens either store
        "mappedFileSizeCommitLog": str(peers.COMMITLOG_FILE_SIZE),
        "mappedFileSizeConsumeQueue": str(peers.CQ_FILE_SIZE)}
PY_TOPIC, PY_GROUP = "PyTx", "py_tx_pg"
JAVA_TOPIC, JAVA_GROUP = "JavaTx", "java_tx_pg"
KEPT = {"REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP"}   # the committed message keeps these (4.9.8)


class Broker:
    """A name server + broker of either kind on ``store``."""

    def __init__(self, kind: str, home: Path, store: Path, conf: dict[str, str]) -> None:
        self.kind = kind
        home.mkdir(parents=True, exist_ok=True)
        if kind == "ours":
            self.served = start_serve(home, conf=conf, store=store)
            self.namesrv_addr, self.broker_addr = self.served.namesrv_addr, self.served.broker_addr
        else:
            self.cluster = peers.Cluster(home, store, dict(conf)).start()
            assert self.cluster.broker is not None
            self.namesrv_addr = self.cluster.namesrv_addr
            self.broker_addr = f"{peers.BIND}:{self.cluster.broker.port}"

    def stop(self) -> None:
        """Ours: SIGTERM (a clean stop). 4.9.8: SIGKILL (its clean stop takes seconds while its check service
        may still run); its store is recovered by the next broker."""
        if self.kind == "ours":
            assert stop_serve(self.served) == 0
        else:
            self.cluster.stop(clean=False)


class Listener(TransactionListener):
    """execute: by key; check: by key, recorded."""

    def __init__(self, at_check: dict[str, LocalTransactionState]) -> None:
        self.at_check = at_check
        self.checks: list[tuple[str, str | None, str, int]] = []
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        if arg == "raise":
            raise RuntimeError("the local transaction failed")
        assert isinstance(arg, LocalTransactionState)
        return arg

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self.lock:
            self.checks.append((msg.keys or "", msg.get_property("TRANSACTION_CHECK_TIMES"), msg.topic, msg.queue_id))
        return self.at_check.get(msg.keys or "", LocalTransactionState.UNKNOW)

    def checked(self, key: str) -> list[str | None]:
        with self.lock:
            return [times for k, times, _, _ in self.checks if k == key]


def wait_until(cond, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def pull_topic(broker_addr: str, namesrv: str, topic: str, queues: int) -> list[MessageExt]:
    """Every message of ``topic``'s first ``queues`` queues on the broker (a plain pull from offset 0)."""
    async def go() -> list[MessageExt]:
        api = MQClientAPI(namesrv)
        try:
            out: list[MessageExt] = []
            for q in range(queues):
                r = await api.pull(broker_addr, group="tx_check_reader", topic=topic, queue_id=q, offset=0,
                                   max_nums=64, sys_flag=build_pull_sys_flag(False, False, True), subscription="*",
                                   timeout=5)
                out += process_pull_result(r, "broker-a")
            return out
        finally:
            await api.close()
    return asyncio.run(go())


def moved_count(broker: Broker) -> int:
    """Messages in TRANS_CHECK_MAX_TIME_TOPIC (0 while the topic does not exist)."""
    try:
        return len(pull_topic(broker.broker_addr, broker.namesrv_addr, "TRANS_CHECK_MAX_TIME_TOPIC", 1))
    except BrokerResponseError:
        return 0


def keys_of(msgs: list[MessageExt]) -> list[str]:
    return sorted(m.keys or "" for m in msgs)


@pytest.fixture(scope="module")
def tx_classes(tmp_path_factory) -> Path:
    require_java()
    return compile_java(tmp_path_factory.mktemp("tx-classes"), JAVA_SRC)


def start_java_scenario(classes: Path, home: Path, namesrv: str) -> tuple[subprocess.Popen, Path]:
    java, _ = peers.find_java()
    out = home / "tx-scenario.jsonl"
    argv = [str(java), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dfile.encoding=UTF-8",
            f"-Duser.home={home}", f"-Drocketmq.client.logRoot={home}/client-logs",
            "-Drocketmq.client.rebalance.waitInterval=1000",
            "-cp", f"{classes}:{peers.find_dist()}/lib/*", "TxScenario", namesrv, JAVA_TOPIC, JAVA_GROUP,
            str(CHECK_MAX), "120"]
    with open(out, "wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                preexec_fn=peers._die_with_parent)
    peers._LIVE.append(proc)
    return proc, out


def java_lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text(errors="replace").splitlines() if line.startswith("{")]


OTHER = {"ours": "java", "java": "ours"}


@pytest.mark.parametrize("kind", ["ours", "java"])
def test_transactions_then_the_other_broker_serves_the_store(kind, tmp_path, tx_classes):
    store = tmp_path / "store"
    broker = Broker(kind, tmp_path / kind, store, CONF)
    stopped = False
    try:
        java_proc, java_out = start_java_scenario(tx_classes, tmp_path, broker.namesrv_addr)
        S = LocalTransactionState
        listener = Listener({"later": S.COMMIT_MESSAGE, "boom": S.ROLLBACK_MESSAGE})
        producer = TransactionProducer(PY_GROUP, namesrv=broker.namesrv_addr, transaction_listener=listener,
                                       instance_name=f"tx-{kind}", send_msg_timeout=SEND_TIMEOUT_S)
        with producer:
            results = {key: producer.send_message_in_transaction(Message(PY_TOPIC, f"body-{key}".encode(),
                                                                         tags="tg", keys=key), arg)
                       for key, arg in [("c", S.COMMIT_MESSAGE), ("r", S.ROLLBACK_MESSAGE), ("u", S.UNKNOW),
                                        ("later", S.UNKNOW), ("boom", "raise")]}
            assert {k: (r.send_status, r.local_transaction_state) for k, r in results.items()} == {
                "c": (SendStatus.SEND_OK, S.COMMIT_MESSAGE), "r": (SendStatus.SEND_OK, S.ROLLBACK_MESSAGE),
                "u": (SendStatus.SEND_OK, S.UNKNOW), "later": (SendStatus.SEND_OK, S.UNKNOW),
                "boom": (SendStatus.SEND_OK, S.UNKNOW)}
            for r in results.values():
                assert r.transaction_id == r.msg_id and r.message_queue.topic == PY_TOPIC and r.offset_msg_id
            # UNKNOW for ever: checked exactly transactionCheckMax times, then moved aside
            wait_until(lambda: moved_count(broker) == 2, "both undecided transactions in TRANS_CHECK_MAX_TIME_TOPIC")
            assert listener.checked("u") == [str(n) for n in range(1, CHECK_MAX + 1)]
            assert listener.checked("later") == ["1"] and listener.checked("boom") == ["1"]
            assert listener.checked("c") == listener.checked("r") == []   # decided in the executor: never checked
            assert all(topic == PY_TOPIC for _, _, topic, _ in listener.checks)
            for key, _, _, queue_id in listener.checks:
                assert queue_id == results[key].message_queue.queue_id
            committed = pull_topic(broker.broker_addr, broker.namesrv_addr, PY_TOPIC, 4)
            assert keys_of(committed) == ["c", "later"]
            for m in committed:
                assert m.sys_flag == 8 and KEPT <= set(m.properties) and m.properties["PGROUP"] == PY_GROUP
                assert m.properties["REAL_TOPIC"] == PY_TOPIC and m.body == f"body-{m.keys}".encode()
            moved = pull_topic(broker.broker_addr, broker.namesrv_addr, "TRANS_CHECK_MAX_TIME_TOPIC", 1)
            assert keys_of(moved) == ["u", "u"]
            assert {m.properties["TRANSACTION_CHECK_TIMES"] for m in moved} == {str(CHECK_MAX)}
            # the Java producer's transactions ended the same way (its consumer saw exactly the committed two)
            assert java_proc.wait(120) == 0, java_out.read_text(errors="replace")[-3000:]
            lines = java_lines(java_out)
            assert {d["sent"]: (d["status"], d["state"]) for d in lines if "sent" in d} == {
                "c": ("SEND_OK", "COMMIT_MESSAGE"), "r": ("SEND_OK", "ROLLBACK_MESSAGE"),
                "u": ("SEND_OK", "UNKNOW"), "later": ("SEND_OK", "UNKNOW")}
            recv = [d for d in lines if "recv" in d]
            assert sorted(d["recv"] for d in recv) == ["c", "later"], lines
            assert all(d["sysFlag"] == 8 and KEPT <= set(d["props"]) for d in recv)
            checks = [(d["check"], d["times"]) for d in lines if "check" in d]
            assert [t for k, t in checks if k == "u"] == [str(n) for n in range(1, CHECK_MAX + 1)]
            assert [k for k, _ in checks if k not in ("u",)] == ["later"]
            assert keys_of(pull_topic(broker.broker_addr, broker.namesrv_addr, JAVA_TOPIC, 4)) == ["c", "later"]
            # one transaction left pending when the broker goes away: stopped at once, before its check-backs
            # could use up transactionCheckMax (2 here), the producer after
            producer.send_message_in_transaction(Message(PY_TOPIC, b"body-pending", tags="tg", keys="pending"),
                                                 S.UNKNOW)
            broker.stop()
            stopped = True
    finally:
        if not stopped:
            broker.stop()

    # the store passes our check (4.9.8's: records of the half, op and TRANS_CHECK_MAX_TIME topics included)
    with MessageStore.open(store, read_only=True) as st:
        report = st.check()
        assert report.ok, report.problems
        assert st.max_offset("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0) >= 4

    # the other broker serves it: the pending transaction is checked back there and committed
    other = Broker(OTHER[kind], tmp_path / f"then-{OTHER[kind]}", store, dict(CONF, transactionCheckMax="15"))
    try:
        listener2 = Listener({"pending": LocalTransactionState.COMMIT_MESSAGE})
        producer2 = TransactionProducer(PY_GROUP, namesrv=other.namesrv_addr, transaction_listener=listener2,
                                        instance_name=f"tx-then-{kind}", send_msg_timeout=SEND_TIMEOUT_S)
        with producer2:
            wait_until(lambda: "pending" in keys_of(pull_topic(other.broker_addr, other.namesrv_addr, PY_TOPIC, 4)),
                       f"the pending transaction committed by {OTHER[kind]}")
            # answered once, by this producer; passes made before it was connected count too (4.9.8 counts a
            # check that found no producer channel), so the count may be past 1
            (times,) = listener2.checked("pending")
            assert 1 <= int(times or 0) < 15
        assert keys_of(pull_topic(other.broker_addr, other.namesrv_addr, PY_TOPIC, 4)) == ["c", "later", "pending"]
    finally:
        other.stop()
