"""Namespaces against the Java 4.9.8 client, on both brokers (``mq_broker``: ours and the real 4.9.8).

* the rules: client/namespace.py answers what the 4.9.8 ``NamespaceUtil`` answers (wrapNamespace,
  withoutNamespace(resource, namespace)) for a table of edge cases and a few hundred generated names;
* a Java producer with ``setNamespace("ns1")`` -> our PushConsumer with ``namespace="ns1"``: every message
  arrives showing the plain topic, RECONSUME_LATER sends it through ``%RETRY%ns1%<group>`` and it comes back
  (reconsume times 1, the plain topic again); the offsets land under ``ns1%<group>`` on ``ns1%<topic>`` and
  ``%RETRY%ns1%<group>`` (QUERY_CONSUMER_OFFSET). Messages our producer sent to the same topic name in
  ``ns2`` are not seen;
* our Producer with ``namespace="ns1"`` -> a Java DefaultMQPushConsumer with ``setNamespace("ns1")``: the same,
  the other way (the Java listener sees the plain topic; the retried copy's RETRY_TOPIC is ``ns1%<topic>``),
  and our LitePullConsumer in ``ns2`` reads only ``ns2``'s messages, with plain topics and queues, and commits
  under ``ns2%<group>``.

Java side: tests/java/NamespaceInterop.java, compiled once per session.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rocketstream.client import LocalTransactionState, Message, TransactionProducer
from rocketstream.client.admin import consumer_progress
from rocketstream.client.allocate import MessageQueue
from rocketstream.client.consume_service import ConsumeConcurrentlyStatus
from rocketstream.client.instance import MQClientInstance
from rocketstream.client.lite_pull import LitePullConsumer
from rocketstream.client.namespace import unwrap, wrap
from rocketstream.client.producer import Producer
from rocketstream.client.push_consumer import PushConsumer
from tests.client.interop_peers import compile_java, create_topic, query_offset, require_java
from tests.client.scenario_util import unique, wait_for
from tests.client.test_namespace import CASES
from tests.realbroker import peers

SRC = Path(__file__).resolve().parents[1] / "java" / "NamespaceInterop.java"
N = 6          # messages per scenario
FAST = dict(rebalance_interval_s=1.0, pull_delay_on_exception_s=0.5, await_termination_s=5.0)


@pytest.fixture(scope="module")
def ns_classes(tmp_path_factory) -> Path:
    return compile_java(tmp_path_factory.mktemp("namespace-classes"), SRC)


def _argv(classes: Path, *args: str) -> list[str]:
    java, _ = peers.find_java()
    return [str(java), "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dfile.encoding=UTF-8",
            "-cp", f"{classes}:{peers.find_dist()}/lib/*", "NamespaceInterop", *args]


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _java(classes: Path, *args: str, stdin: str | None = None, timeout: float = 120) -> list[dict]:
    res = subprocess.run(_argv(classes, *args), input=stdin, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"NamespaceInterop {args[0]} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    return _lines(res.stdout)


class _Background:
    """``NamespaceInterop`` running while the test does something else; ``finish`` waits for its lines."""

    def __init__(self, classes: Path, out: Path, *args: str) -> None:
        self.out, self.what = out, " ".join(args[:2])
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "wb") as fh:
            self.proc = subprocess.Popen(_argv(classes, *args), stdout=fh, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=peers._die_with_parent)
        peers._LIVE.append(self.proc)

    def finish(self, timeout: float) -> list[dict]:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        peers._forget(self.proc)
        text = self.out.read_text(errors="replace")
        assert code == 0, f"NamespaceInterop {self.what} exited {code}:\n{text[-4000:]}"
        return _lines(text)


def test_rules_equal_java_namespace_util(ns_classes: Path) -> None:
    rnd = random.Random(22)
    alphabet = "aAbB01_-|%"
    pairs = [(ns, r) for ns, r, _, _ in CASES if ns and r]   # Java's StringUtils.isEmpty cases are ours too
    parts = ["ns1", "%RETRY%", "%DLQ%", "rmq_sys_", "CID_RMQ_SYS_", "TBW102", "SCHEDULE_TOPIC_XXXX", "%", "x"]
    for _ in range(400):
        ns = "".join(rnd.choice(alphabet.replace("%", "")) for _ in range(rnd.randint(1, 4)))
        ns = rnd.choice([ns, "ns1", "rmq_sys_a", "CID_RMQ_SYS_"])
        r = "".join(rnd.choice(parts + [ns + "%", rnd.choice(alphabet)]) for _ in range(rnd.randint(1, 4)))
        pairs.append((ns, r))
    out = _java(ns_classes, "rules", stdin="".join(f"{ns}\t{r}\n" for ns, r in pairs))
    assert len(out) == len(pairs)
    differ = [(ns, r, j, (wrap(ns, r), unwrap(ns, r))) for (ns, r), j in zip(pairs, out, strict=True)
              if (wrap(ns, r), unwrap(ns, r)) != (j["wrap"], j["unwrap"])]
    assert not differ, differ[:10]


def _send(namesrv: str, namespace: str, topic: str, bodies: list[bytes]) -> list[Any]:
    with Producer(unique("ns_pg"), namesrv=namesrv, namespace=namespace) as p:
        return [p.send(topic, body, keys=f"PK-{i}") for i, body in enumerate(bodies)]


def _ends(results: list[tuple[int, int]]) -> dict[int, int]:
    """queue id -> next offset, from (queue id, queue offset) of the sends."""
    ends: dict[int, int] = {}
    for qid, off in results:
        ends[qid] = max(ends.get(qid, 0), off + 1)
    return ends


def test_java_producer_to_our_push_consumer_with_retry(mq_broker, ns_classes: Path) -> None:
    namesrv = mq_broker.namesrv_addr
    topic, group = unique("NsJ2P"), unique("ns_push")
    create_topic(mq_broker, f"ns1%{topic}", 2)
    create_topic(mq_broker, f"ns2%{topic}", 2)
    other = _send(namesrv, "ns2", topic, [b"ns2 body 0", b"ns2 body 1"])
    assert {r.queue.topic for r in other} == {topic}
    sent = _java(ns_classes, "produce", namesrv, topic, "ns1", "--count", str(N))
    sends = [x for x in sent if "status" in x]
    assert sent[-1]["errors"] == 0 and len(sends) == N
    assert {x["topic"] for x in sends} == {topic}   # the Java producer unwraps its SendResult's queue too

    got: list[tuple[str, str, int, str]] = []   # body, topic, reconsume times, queue topic of the context
    seen: set[str] = set()
    lock = threading.Lock()

    def listener(msgs: list[Any], ctx: Any) -> Any:
        m = msgs[0]
        with lock:
            got.append((m.body.decode(), m.topic, m.reconsume_times, ctx.message_queue.topic))
            first = m.msg_id not in seen
            seen.add(m.msg_id)
        if first:
            ctx.delay_level_when_next_consume = 1   # 1 s
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv=namesrv, namespace="ns1", consume_from_where="CONSUME_FROM_FIRST_OFFSET", **FAST)
    c.subscribe(topic, "*")
    c.register_message_listener_concurrently(listener)
    c.start()
    try:
        wait_for(lambda: sum(1 for g in got if g[2] == 1) >= N, 60, "every message back from the retry topic")
    finally:
        c.shutdown()
    bodies = {f"java ns body {i}" for i in range(N)}
    assert {b for b, _, t, _ in got if t == 0} == bodies and {b for b, _, t, _ in got if t == 1} == bodies
    assert {t for _, t, _, _ in got} == {topic}   # the plain topic, retried ones too
    # the context's queue is the broker's, as Java's ConsumeConcurrentlyContext
    assert {q for _, _, _, q in got} == {f"ns1%{topic}", f"%RETRY%ns1%{group}"}
    broker = mq_broker.broker_addr
    for qid, end in _ends([(x["queueId"], x["queueOffset"]) for x in sends]).items():
        assert query_offset(broker, f"ns1%{group}", f"ns1%{topic}", qid) == end
    assert query_offset(broker, f"ns1%{group}", f"%RETRY%ns1%{group}", 0) == N


def test_our_producer_to_java_push_consumer_and_namespaces_apart(mq_broker, ns_classes: Path) -> None:
    namesrv = mq_broker.namesrv_addr
    topic, jgroup, lgroup = unique("NsP2J"), unique("ns_java"), unique("ns_lite")
    create_topic(mq_broker, f"ns1%{topic}", 2)
    create_topic(mq_broker, f"ns2%{topic}", 2)
    ours = _send(namesrv, "ns1", topic, [f"py ns1 body {i}".encode() for i in range(N)])
    theirs = _send(namesrv, "ns2", topic, [f"py ns2 body {i}".encode() for i in range(N)])
    assert {r.queue.topic for r in ours + theirs} == {topic}
    assert len({r.msg_id for r in ours + theirs}) == 2 * N

    peer = _Background(ns_classes, mq_broker.home / f"{unique('ns-consume')}.jsonl", "consume", namesrv, topic,
                       jgroup, "ns1", "--count", str(N), "--retry-first", "1", "--timeout-s", "90")
    # meanwhile: our lite-pull consumer in ns2 reads the same topic name
    lite = LitePullConsumer(lgroup, namesrv=namesrv, namespace="ns2", consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                            auto_commit=False)
    lite.start()
    try:
        queues = lite.fetch_message_queues(topic)
        assert {q.topic for q in queues} == {topic} and len(queues) == 2
        lite.assign(queues)
        assert lite.assignment() == queues
        polled: list[Any] = []
        end = time.monotonic() + 30
        while len(polled) < N and time.monotonic() < end:
            polled += lite.poll(0.5)
        assert sorted(m.body.decode() for m in polled) == sorted(f"py ns2 body {i}" for i in range(N))
        assert {m.topic for m in polled} == {topic}
        lite.commit()
        ends = _ends([(r.queue.queue_id, r.queue_offset) for r in theirs])
        for q in queues:
            assert lite.committed(q) == ends.get(q.queue_id, 0)
    finally:
        lite.shutdown()
    for qid, end_offset in ends.items():
        assert query_offset(mq_broker.broker_addr, f"ns2%{lgroup}", f"ns2%{topic}", qid) == end_offset

    lines = peer.finish(120)
    assert lines[-1] == {"result": "DONE", "ok": N}
    msgs = [x for x in lines if "msg" in x]
    assert {m["body"] for m in msgs} == {f"py ns1 body {i}" for i in range(N)}   # nothing of ns2
    assert {m["topic"] for m in msgs} == {topic}
    first = [m for m in msgs if m["reconsumeTimes"] == 0]
    again = [m for m in msgs if m["reconsumeTimes"] == 1]
    assert sorted(m["msgId"] for m in first) == sorted(r.msg_id for r in ours)
    assert sorted(m["msgId"] for m in again) == sorted(r.msg_id for r in ours)
    assert {m["retryTopic"] for m in again} == {f"ns1%{topic}"}
    assert {(m["queueId"], m["queueOffset"]) for m in first} == {(r.queue.queue_id, r.queue_offset) for r in ours}
    broker = mq_broker.broker_addr
    for qid, end_offset in _ends([(r.queue.queue_id, r.queue_offset) for r in ours]).items():
        wait_for(lambda q=qid, e=end_offset: query_offset(broker, f"ns1%{jgroup}", f"ns1%{topic}", q) == e,
                 10, f"the Java consumer's offset of queue {qid}")


@pytest.mark.slow   # a broker of its own each (the check-back's unwrap is unit-tested in test_namespace.py)
@pytest.mark.parametrize("kind", ["ours", "java"])
def test_transaction_check_back_in_a_namespace(kind: str, tmp_path: Path) -> None:
    """A transactional producer in ``ns1``: the half message goes to ``ns1%<topic>`` with PGROUP
    ``ns1%<group>``; the broker's check-back (sent to the producer of that group) reaches our producer, whose
    listener sees the plain topic; the committed message lands in ``ns1%<topic>``. (Brokers of their own:
    the shared ones check transactions only every 60 s.)"""
    from tests.client.test_transaction_brokers import CONF, SEND_TIMEOUT_S, Broker, Listener, pull_topic

    if kind == "java":
        require_java()
    S = LocalTransactionState
    broker = Broker(kind, tmp_path / kind, tmp_path / "store", CONF)
    try:
        listener = Listener({"later": S.COMMIT_MESSAGE})
        with TransactionProducer("ns_tx_pg", namesrv=broker.namesrv_addr, transaction_listener=listener,
                                 namespace="ns1", send_msg_timeout=SEND_TIMEOUT_S) as producer:
            assert producer.group == "ns1%ns_tx_pg"
            result = producer.send_message_in_transaction(Message("NsTx", b"body-later", keys="later"), S.UNKNOW)
            assert result.local_transaction_state is S.UNKNOW and result.message_queue.topic == "NsTx"
            wait_for(lambda: bool(listener.checked("later")), 60, "the check-back")
        assert {(topic, queue_id) for _, _, topic, queue_id in listener.checks} == \
            {("NsTx", result.message_queue.queue_id)}
        committed = pull_topic(broker.broker_addr, broker.namesrv_addr, "ns1%NsTx", 4)
        assert [m.keys for m in committed] == ["later"]
        assert committed[0].properties["PGROUP"] == "ns1%ns_tx_pg"
        assert committed[0].properties["REAL_TOPIC"] == "ns1%NsTx"
    finally:
        broker.stop()


def test_readme_namespace_example_as_written(ours_broker) -> None:
    """README's "Namespaces" example, run against our broker: the topic comes back plain, the consumer's
    offset is stored under the wrapped group and topic."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    match = re.search(r"```python\n(.*?)```", readme[readme.index("#### Namespaces"):], re.S)
    assert match, "README's Namespaces section has no python example"
    listener = "lambda msgs, ctx: print([m.topic for m in msgs])"
    code = match.group(1)
    assert listener in code and "127.0.0.1:9876" in code
    code = code.replace("127.0.0.1:9876", ours_broker.namesrv_addr).replace(
        listener, "lambda msgs, ctx: seen.extend(m.topic for m in msgs) or print([m.topic for m in msgs])")
    seen: list[str] = []
    scope: dict[str, Any] = {"seen": seen}
    exec(compile(code, "README.md#namespaces", "exec"), scope)
    try:
        wait_for(lambda: bool(seen), 30, "the example's consumer to receive the message")
    finally:
        scope["consumer"].shutdown()
    result = scope["result"]
    assert seen == ["Invoices"] and result.queue.topic == "Invoices"
    assert scope["consumer"].group == "staging%billing"
    assert query_offset(ours_broker.broker_addr, "staging%billing", "staging%Invoices",
                        result.queue.queue_id) == result.queue_offset + 1


def test_batch_selector_queue_sends_and_progress_in_a_namespace(mq_broker) -> None:
    """Every way of sending in ``ns1`` lands in ``ns1%<topic>`` and answers with the plain topic; a selector
    sees plain queues and the plain message; a lite-pull subscriber in ``ns1`` reads them all, and
    ``consumer_progress(..., namespace="ns1")`` shows its committed offsets under plain topics."""
    namesrv = mq_broker.namesrv_addr
    topic, group = unique("NsSend"), unique("ns_sub")
    create_topic(mq_broker, f"ns1%{topic}", 2)
    offered: list[set[str]] = []

    def selector(mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        offered.append({q.topic for q in mqs} | {msg.topic})
        return mqs[arg]

    with Producer(unique("ns_pg"), namesrv=namesrv, namespace="ns1") as p:
        user_msg = Message(topic, b"selected")
        results = [p.send_batch(topic, [b"batch 0", b"batch 1"]),
                   p.send(user_msg, selector=selector, arg=1),
                   p.send(topic, b"plain"),
                   p.send(topic, b"to queue 0", queue=MessageQueue(topic, mq_broker.broker_name, 0)),
                   p.send(topic, b"sharded", sharding_key="k")]
    assert user_msg.topic == topic   # the caller's message is not changed
    assert offered == [{topic}]
    assert {r.queue.topic for r in results} == {topic}
    assert results[1].queue.queue_id == 1 and results[3].queue.queue_id == 0
    c = LitePullConsumer(group, namesrv=namesrv, namespace="ns1", consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                         auto_commit=False)
    c.subscribe(topic)
    c.start()
    try:
        got: list[Any] = []
        end = time.monotonic() + 30
        while len(got) < 6 and time.monotonic() < end:
            got += c.poll(0.5)
        assert sorted(m.body for m in got) == sorted([b"batch 0", b"batch 1", b"selected", b"to queue 0", b"plain",
                                                      b"sharded"])
        assert {m.topic for m in got} == {topic}
        assert {q.topic for q in c.assignment()} == {topic}
        c.commit()
    finally:
        c.shutdown()
    inst = MQClientInstance.get(namesrv, unique("ns_progress"))
    inst.start()
    try:
        rows = inst.run(consumer_progress(inst, group, namespace="ns1"), 20.0)
        assert {r.queue.topic for r in rows} == {topic}
        assert sum(r.consumer_offset for r in rows) == 6 and sum(r.diff for r in rows) == 0
        plain = inst.run(consumer_progress(inst, f"ns1%{group}", f"ns1%{topic}"), 20.0)
        assert {r.queue.topic for r in plain} == {f"ns1%{topic}"}
    finally:
        inst.shutdown(force=True)
