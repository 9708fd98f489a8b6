"""Interop between our Python client and the shipped Java 4.9.8 client, against our broker AND the real
4.9.8 broker (``mq_broker`` is parametrized over both; each is started once per session).

* our Producer -> Java DefaultMQPushConsumer: every message arrives once, at the queue/offset our SendResult
  named, with body (bodies over 4 KiB compressed by our producer, decompressed by Java), tags, keys and user
  properties intact, and Java's msgId = our SendResult.msg_id (UNIQ_KEY);
* Java DefaultMQProducer -> our LitePullConsumer and our PushConsumer: the same checks the other way, and the
  offsets committed to the broker afterwards are the queues' ends;
* a mixed group: our PushConsumer and a Java DefaultMQPushConsumer in one consumer group on an 8-queue topic.
  Both compute AllocateMessageQueueAveragely over the broker's consumer-id list; the Java side's ProcessQueue
  table and the queues each side consumed from equal that split (computed here with
  rocketstream.client.allocate), no queue is consumed by both, every message is consumed exactly once.

Java side: tests/java/ClientInterop.java, compiled per session into a temporary directory.

    pytest tests/client/test_interop.py            # both brokers
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from rocketstream.client.allocate import MessageQueue as AMQ
from rocketstream.client.allocate import allocate_all
from tests.client.interop_peers import JavaPeer, client_api, consumer_ids, create_topic, query_offset

N = 30
BIG_EVERY = 5
_seq = itertools.count()


def _name(prefix: str, kind: str) -> str:
    return f"{prefix}_{kind}_{next(_seq)}_{int(time.time() * 1000) % 100000}"


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def big_body(i: int) -> bytes:
    """Same as ClientInterop.bigBody: 6,000 compressible bytes (over the 4 KiB compression threshold)."""
    text = ""
    while len(text) < 6000:
        text += f"big body {i} compressible text; "
    return text[:6000].encode()


def py_body(i: int) -> bytes:
    return big_body(i) if i % BIG_EVERY == 0 else f"python body {i} ü".encode()


# --- the client under test: the public API of the plan --------------------------------------------------------
def start_push(api, group: str, ns: str, topic: str, listener, **kw):
    c = api.PushConsumer(group, namesrv=ns, **kw)
    c.subscribe(topic, "*")
    c.register_message_listener_concurrently(listener)
    c.start()
    return c


def from_first(api) -> dict:
    return {"consume_from_where": api.CONSUME_FROM_FIRST_OFFSET}


def success(api):
    return api.ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def ext(m) -> dict:
    """A received MessageExt as the fields the Java side prints."""
    props = dict(m.properties or {})
    return {"topic": m.topic, "queueId": m.queue_id, "queueOffset": m.queue_offset, "msgId": m.msg_id,
            "keys": m.keys, "tags": m.tags, "props": props, "bodyLen": len(m.body), "bodySha": _sha(m.body),
            "sysFlag": getattr(m, "sys_flag", None)}


def check_java_sent_received(sent: list[dict], got: list[dict], where: str) -> None:
    """Every SEND_OK of the Java producer received once, intact, at the acknowledged position."""
    ok = [s for s in sent if s.get("status") == "SEND_OK"]
    bad = [s for s in sent if s.get("status") != "SEND_OK"]
    assert len(ok) == N, f"Java producer: {len(ok)} of {N} SEND_OK: {bad}"
    counts = Counter(g["msgId"] for g in got)
    assert not [k for k, n in counts.items() if n > 1], f"{where}: duplicates {counts.most_common(3)}"
    by_id = {g["msgId"]: g for g in got}
    missing = [s["sent"] for s in ok if s["msgId"] not in by_id]
    assert not missing, f"{where}: never received seq {missing}"
    for s in ok:
        g = by_id[s["msgId"]]
        i = s["sent"]
        assert (g["queueId"], g["queueOffset"]) == (s["queueId"], s["queueOffset"]), (i, g, s)
        assert g["bodySha"] == s["bodySha"] and g["bodyLen"] == s["bodyLen"], f"{where}: body of {i} differs"
        assert g["tags"] == s["tags"] == f"Tag{i % 3}", (i, g["tags"])
        assert g["keys"] == s["keys"] == f"IK-{i} IKB-{i}", (i, g["keys"])
        assert g["props"].get("seq") == str(i) and g["props"].get("uprop") == f"välue-{i}", (i, g["props"])
        assert g["props"].get("UNIQ_KEY") == s["msgId"], (i, g["props"])
        if i % BIG_EVERY == 0 and g.get("sysFlag") is not None:
            assert g["sysFlag"] & 1, f"{where}: the Java producer compresses bodies over 4 KiB; seq {i} sysFlag {g}"


# --- our producer -> Java push consumer --------------------------------------------------------------------
def test_python_producer_to_java_push_consumer(mq_broker, interop_classes) -> None:
    api = client_api("producer")
    t = mq_broker
    topic, group = _name("PyToJ", t.kind), _name("PyToJG", t.kind)
    create_topic(t, topic, 4)
    p = api.Producer(_name("PyProd", t.kind), namesrv=t.namesrv_addr)
    p.start()
    sent = []
    try:
        for i in range(N):
            r = p.send(topic, py_body(i), tags=f"Tag{i % 3}", keys=f"PK-{i}",
                       properties={"seq": str(i), "uprop": f"välue-{i}"})
            assert r.status.name == "SEND_OK", r
            sent.append((i, r))
    finally:
        p.shutdown()
    assert {r.queue.queue_id for _, r in sent} == {0, 1, 2, 3}, "sends are spread over every queue"
    java = JavaPeer.start(interop_classes, t, "consume", topic, group, "--count", str(N), "--timeout-s", "60",
                          name=f"{group}-java")
    res = java.wait(90)
    got = java.messages()
    assert res["received"] == N and len(got) == N, f"Java received {res}:\n{java.tail()}"
    by_id = {g["msgId"]: g for g in got}
    assert len(by_id) == N, "each message delivered once"
    for i, r in sent:
        g = by_id.get(r.msg_id)
        assert g is not None, f"seq {i} (msgId {r.msg_id}) never reached the Java consumer"
        body = py_body(i)
        assert (g["queueId"], g["queueOffset"]) == (r.queue.queue_id, r.queue_offset), (i, g, r)
        assert g["bodySha"] == _sha(body) and g["bodyLen"] == len(body), f"body of {i} differs"
        assert g["tags"] == f"Tag{i % 3}" and g["keys"] == f"PK-{i}", g
        assert g["props"]["seq"] == str(i) and g["props"]["uprop"] == f"välue-{i}", g["props"]
        assert g["props"]["UNIQ_KEY"] == r.msg_id
        assert g["offsetMsgId"] == r.offset_msg_id, (g["offsetMsgId"], r.offset_msg_id)
        # the producer compressed the big bodies (MessageSysFlag.COMPRESSED_FLAG on the stored record)
        assert bool(g["sysFlag"] & 1) == (len(body) > 4096), (i, g["sysFlag"])
        assert g["reconsumeTimes"] == 0


# --- Java producer -> our consumers ---------------------------------------------------------------------------
def _java_produce(classes: Path, t, topic: str, name: str) -> list[dict]:
    prod = JavaPeer.start(classes, t, "produce", topic, "--count", str(N), "--big-every", str(BIG_EVERY), name=name)
    res = prod.wait(90)
    assert res.get("errors") == 0, prod.tail()
    return [x for x in prod.lines() if "sent" in x and "result" not in x]


def test_java_producer_to_python_lite_pull(mq_broker, interop_classes) -> None:
    api = client_api("lite")
    t = mq_broker
    topic, group = _name("JToLite", t.kind), _name("JToLiteG", t.kind)
    create_topic(t, topic, 4)
    sent = _java_produce(interop_classes, t, topic, f"{topic}-prod")
    c = api.LitePullConsumer(group, namesrv=t.namesrv_addr, **from_first(api))
    c.subscribe(topic, "*")
    c.start()
    got: list[dict] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            got += [ext(m) for m in c.poll(1.0)]
        c.commit()
        time.sleep(0.5)
        check_java_sent_received(sent, got, f"LitePullConsumer on {t.kind}")
        ends = Counter(s["queueId"] for s in sent)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            committed = {q: query_offset(t.broker_addr, group, topic, q) for q in ends}
            if committed == dict(ends):
                break
            time.sleep(0.3)
        assert committed == dict(ends), f"committed offsets {committed}, queue ends {dict(ends)}"
    finally:
        c.shutdown()


def test_java_producer_to_python_push_consumer(mq_broker, interop_classes) -> None:
    api = client_api("push")
    t = mq_broker
    topic, group = _name("JToPush", t.kind), _name("JToPushG", t.kind)
    create_topic(t, topic, 4)
    sent = _java_produce(interop_classes, t, topic, f"{topic}-prod")
    got: list[dict] = []
    lock = threading.Lock()

    def listener(msgs, context=None):
        with lock:
            got.extend(ext(m) for m in msgs)
        return success(api)

    kw = from_first(api)
    c = start_push(api, group, t.namesrv_addr, topic, listener, **kw)
    try:
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)   # a duplicate would show up now
        with lock:
            snapshot = list(got)
        check_java_sent_received(sent, snapshot, f"PushConsumer on {t.kind}")
    finally:
        c.shutdown()
    # shutdown persists the offsets (DefaultMQPushConsumerImpl.shutdown -> persistConsumerOffset)
    ends = Counter(s["queueId"] for s in sent)
    committed = {q: query_offset(t.broker_addr, group, topic, q) for q in ends}
    assert committed == dict(ends), f"committed offsets after shutdown {committed}, queue ends {dict(ends)}"


# --- a mixed consumer group -------------------------------------------------------------------------------------
class _PyMember:
    """Our PushConsumer as a group member; deliveries as (time, queueId, msgId)."""

    def __init__(self, api, t, topic: str, group: str) -> None:
        self.got: list[tuple[float, int, str]] = []
        self.lock = threading.Lock()

        def listener(msgs, context=None):
            now = time.time()
            with self.lock:
                self.got.extend((now, m.queue_id, m.msg_id) for m in msgs)
            time.sleep(0.002)
            return success(api)

        self.consumer = start_push(api, group, t.namesrv_addr, topic, listener, **from_first(api))
        self.cid: str | None = None

    def deliveries(self) -> list[tuple[int, str]]:
        with self.lock:
            return [(q, mid) for _, q, mid in self.got]

    def stop(self) -> None:
        self.consumer.shutdown()


class _JavaMember:
    def __init__(self, classes: Path, t, topic: str, group: str, name: str, stop: Path) -> None:
        self.stop_file = stop
        self.peer = JavaPeer.start(classes, t, "consume", topic, group, "--instance", name, "--stop", str(stop),
                                   "--timeout-s", "150", "--work-ms", "2", name=f"{group}-{name}")
        started = self.peer.wait_for(lambda ls: any(x.get("event") == "started" for x in ls), 60, "start")
        self.cid = next(x["clientId"] for x in started if x.get("event") == "started")

    def alloc(self) -> list[int] | None:
        allocs = [x for x in self.peer.lines() if "alloc" in x]
        return allocs[-1]["alloc"] if allocs else None

    def alloc_changes_since(self, t_ms: float) -> list[list[int]]:
        return [x["alloc"] for x in self.peer.lines() if "alloc" in x and x["t"] >= t_ms]

    def deliveries(self) -> list[tuple[int, str]]:
        return [(m["queueId"], m["msgId"]) for m in self.peer.messages()]

    def stop(self) -> None:
        self.stop_file.touch()
        try:
            self.peer.wait(60)
        finally:
            self.peer.stop()


def mixed_group(t, classes: Path, tmp_path: Path, kinds: tuple[str, str], queues: int = 8, count: int = 400,
                java_sorts_first: bool = False) -> str:
    """Two members of one group (``py`` = our PushConsumer, ``java`` = DefaultMQPushConsumer) on one topic: each
    consumes exactly the queues AllocateMessageQueueAveragely gives it over the broker's consumer-id list, no queue
    is consumed by both, every message is consumed once. Java members' instance names sort after our client id
    ("ip@pid#nanos") or, with ``java_sorts_first``, before it ("00..."). Returns the report line."""
    api = client_api("push") if "py" in kinds else None
    topic, group = _name("Mixed", t.kind), _name("MixedG", t.kind)
    create_topic(t, topic, queues)
    members: list = []
    try:
        for i, kind in enumerate(kinds):
            members.append(_PyMember(api, t, topic, group) if kind == "py" else
                           _JavaMember(classes, t, topic, group, f"{'00' if java_sorts_first else ''}mixedJava{i}",
                                       tmp_path / f"stop-{i}"))
        javas = [m for m in members if isinstance(m, _JavaMember)]
        deadline = time.monotonic() + 60
        expected: dict[str, list[int]] = {}
        while time.monotonic() < deadline:
            cids = consumer_ids(t.broker_addr, group)
            if len(cids) == len(members) and all(j.cid in cids for j in javas):
                mqs = [AMQ(topic, t.broker_name, q) for q in range(queues)]
                expected = {cid: sorted(mq.queue_id for mq in v) for cid, v in allocate_all("AVG", mqs, cids).items()}
                if all(j.alloc() == expected[j.cid] for j in javas):
                    break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the group never settled: ids {consumer_ids(t.broker_addr, group)}, expected "
                                 f"{expected}, java allocations {[j.alloc() for j in javas]}")
        for m in members:
            if isinstance(m, _PyMember):
                m.cid = next(cid for cid in expected if cid not in {j.cid for j in javas})
        time.sleep(1.0)   # our side's rebalance too (it runs on the same notification)
        t_sent_ms = time.time() * 1000
        prod = JavaPeer.start(classes, t, "produce", topic, "--count", str(count), "--big-every", "0",
                              "--queues", str(queues), name=f"{group}-prod")
        assert prod.wait(120).get("errors") == 0, prod.tail()
        sent = {x["msgId"] for x in prod.lines() if "sent" in x and "result" not in x}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(len(m.deliveries()) for m in members) < count:
            time.sleep(0.2)
        time.sleep(1.0)   # a duplicate would show up now
        changes = {j.cid: j.alloc_changes_since(t_sent_ms) for j in javas}
    finally:
        for m in members:
            m.stop()
    got = {m.cid: m.deliveries() for m in members}
    ids = [mid for d in got.values() for _, mid in d]
    dup = [k for k, n in Counter(ids).items() if n > 1]
    missing = sent - set(ids)
    consumed_queues = {cid: sorted({q for q, _ in d}) for cid, d in got.items()}
    report = (f"{t.kind} {kinds}: expected split {expected}; consumed {consumed_queues} "
              f"({ {cid: len(d) for cid, d in got.items()} } messages); Java allocation changes after the sends "
              f"{changes}")
    print(report)
    assert not missing, f"never consumed: {len(missing)} — {report}"
    assert not dup, f"consumed twice: {dup[:5]} — {report}"
    qs = list(consumed_queues.values())
    assert not set(qs[0]) & set(qs[1]), f"queues consumed by both — {report}"
    for cid, q in consumed_queues.items():
        assert q == expected[cid], f"{cid} consumed {q}, its AVG share is {expected[cid]} — {report}"
    assert not any(changes.values()), f"a Java member's allocation changed while the messages flowed — {report}"
    return report


# the default run takes one ordering; the other and the all-Java control are in the slow run
@pytest.mark.parametrize("java_sorts_first", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["py-first", "java-first"])
def test_mixed_group_python_and_java_push_consumers(mq_broker, interop_classes, tmp_path, java_sorts_first) -> None:
    mixed_group(mq_broker, interop_classes, tmp_path, ("py", "java"), java_sorts_first=java_sorts_first)


@pytest.mark.slow
def test_mixed_group_control_two_java_members(mq_broker, interop_classes, tmp_path) -> None:
    """The same checks with two Java members: the harness and the broker's group bookkeeping, without our client
    (when this passes and the mixed test fails, the difference is our PushConsumer)."""
    mixed_group(mq_broker, interop_classes, tmp_path, ("java", "java"))
