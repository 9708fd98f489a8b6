"""Producer against our broker and the real 4.9.8 broker (``mq_broker``): sends, compression, auto-created
topics, selectors and sharding keys, batches; interop (the Java client reads back what we sent, field by
field); retries on another broker; bad input (names, sizes, an unreachable name server)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rocketstream.client.api import MQClientAPI, build_pull_sys_flag, process_pull_result, properties_string
from rocketstream.client.common import Message, MessageQueue, SendStatus, check_group, check_topic
from rocketstream.client.producer import Producer, select_by_hash
from rocketstream.client.route import TopicPublishInfo
from rocketstream.codec import decode_batch_body, decode_properties, encode_batch_body, java_hash
from rocketstream.errors import (
    BrokerResponseError,
    MQClientError,
    OptionError,
    RemotingConnectError,
    RemotingTimeoutError,
    SendFailedError,
)
from rocketstream.remoting import RequestCode
from tests.client.test_api import uniq
from tests.realbroker import peers

JAVA_SRC = Path(__file__).with_name("java") / "ProducedReader.java"


@pytest.fixture(scope="module")
def producer(mq_broker):
    p = Producer(uniq("capi_pg"), namesrv=mq_broker.namesrv_addr, instance_name=uniq("prod"))
    with p:
        yield p


def pull_all(mq_broker, topic: str, queues: int = 8, expect: int = 0) -> list:
    """Every message of ``topic``; ``expect``: read again (up to 5 s) until that many are there (a real
    broker acknowledges a send once it is in the commit log; ReputMessageService adds it to the consume
    queue a moment later)."""
    for _ in range(50):
        out = _pull_all_once(mq_broker, topic)
        if len(out) >= expect:
            break
        time.sleep(0.1)
    return out


def _pull_all_once(mq_broker, topic: str) -> list:
    async def go():
        api = MQClientAPI(mq_broker.namesrv_addr)
        try:
            route = await api.get_route(topic)
            for _ in range(50):   # the broker registers an auto-created topic with the name server right after
                if route is not None:
                    break
                await asyncio.sleep(0.1)
                route = await api.get_route(topic)
            out = []
            for bd in route.broker_datas:
                for qd in route.queue_datas:
                    if qd.broker_name != bd.broker_name:
                        continue
                    for q in range(qd.read_queue_nums):
                        r = await api.pull(bd.master_addr(), group="capi_check", topic=topic, queue_id=q, offset=0,
                                           max_nums=64, sys_flag=build_pull_sys_flag(False, False, True),
                                           subscription="*", timeout=5)
                        out += process_pull_result(r, bd.broker_name)
            return out
        finally:
            await api.close()
    return asyncio.run(go())


# ------------------------------------------------------------------------------- sends
def test_send_new_topic_round_robin_and_read_back(producer, mq_broker):
    topic = uniq("CapiProd")
    results = [producer.send(topic, b"m%d" % i, tags="TagA", keys=["a", f"k{i}"], properties={"p": "v"})
               for i in range(8)]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    used = {r.queue.queue_id for r in results}
    assert len(used) == 4, "round robin over the 4 default queues of an auto-created topic"
    got = {m.msg_id: m for m in pull_all(mq_broker, topic, expect=len(results))}
    assert set(got) == {r.msg_id for r in results}
    for i, r in enumerate(results):
        m = got[r.msg_id]
        assert m.body == b"m%d" % i and m.tags == "TagA" and m.keys == f"a k{i}" and m.properties["p"] == "v"
        assert m.offset_msg_id == r.offset_msg_id and m.queue_offset == r.queue_offset
        assert m.queue_id == r.queue.queue_id


def test_sync_sends_from_threads_use_connections_of_their_own_closed_on_shutdown(mq_broker):
    """Sends from user threads go over the blocking pool (remoting/blocking.py), the broker's answers read by
    the sending thread; the heartbeat connection stays the loop's; shutdown closes every connection."""
    import threading

    p = Producer(uniq("capi_pool"), namesrv=mq_broker.namesrv_addr, instance_name=uniq("pool"))
    topic = uniq("CapiPool")
    results: list = []
    with p:
        results.append((p.send(topic, b"first"), b"first"))   # no route yet: sent by the loop
        pool = p.instance.api.blocking
        assert pool is not None and pool.open_count() == 0

        def worker(k: int) -> None:
            for i in range(5):
                results.append((p.send(topic, b"t%d-%d" % (k, i)), b"t%d-%d" % (k, i)))
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert 1 <= pool.open_count() <= 3
        assert p.instance.api.open_channel(p.instance.broker_addr(results[0][0].queue.broker_name)) is not None
    assert pool.closed and pool.open_count() == 0
    assert len(results) == 16 and all(r.status is SendStatus.SEND_OK for r, _ in results)
    got = {m.msg_id: m.body for m in pull_all(mq_broker, topic, expect=16)}
    assert got == {r.msg_id: body for r, body in results}


def test_tls_producers_keep_the_loops_connection():
    assert MQClientAPI("127.0.0.1:9876", tls=True).blocking is None
    assert MQClientAPI("127.0.0.1:9876", blocking_sends=False).blocking is None
    assert MQClientAPI("127.0.0.1:9876").blocking is not None


def test_big_body_compressed_like_java(producer, mq_broker):
    topic = uniq("CapiZip")
    body = (b"0123456789abcdef" * 300)   # 4800 bytes >= 4096
    small = b"y" * 4095
    r1 = producer.send(topic, body)
    r2 = producer.send(topic, small)
    got = {m.msg_id: m for m in pull_all(mq_broker, topic, expect=2)}
    assert got[r1.msg_id].body == body and got[r1.msg_id].sys_flag & 0x701 == 0x301
    assert got[r2.msg_id].body == small and got[r2.msg_id].sys_flag & 0x1 == 0
    assert got[r1.msg_id].store_size < 1000


def test_plain_sends_write_the_general_paths_frames(mq_broker, monkeypatch):
    """A send of topic + bytes (+ tags / keys strings) takes the producer's plain lane (the per-topic template
    filled in, no RemotingCommand): its frames are, byte for byte, those encode_frame makes of the request the
    general path builds (send_request with the same UNIQ_KEY, queue, sysFlag and bornTimestamp), in a
    namespace and compressed too; what it sends is read back as sent."""
    from rocketstream.codec import compress_body
    from rocketstream.remoting.command import decode_frame, encode_frame

    sent: list[tuple[int, bytes]] = []
    real = MQClientAPI.invoke_frame_from_thread

    def spy(self, addr, opaque, code, frame, timeout, call_soon):
        sent.append((code, frame))
        return real(self, addr, opaque, code, frame, timeout, call_soon)
    monkeypatch.setattr(MQClientAPI, "invoke_frame_from_thread", spy)
    p = Producer(uniq("capi_plain"), namesrv=mq_broker.namesrv_addr, instance_name=uniq("plain"), namespace="nsP")
    topic = uniq("CapiPlain")
    big = b"0123456789abcdef" * 300   # compressed (>= 4096)
    cases = [(b"first", None, None), (b"p1", "TagP", None), (b"p2", "TagP", "k1 k2"), (b"p3", None, "k3"),
             (big, "TagZ", None), (b"p4", "", "")]
    with p:
        results = [p.send(topic, body, tags=tags, keys=keys) for body, tags, keys in cases]
        api = p.instance.api
    assert all(r.status is SendStatus.SEND_OK and r.queue.topic == topic for r in results)
    assert len(sent) == len(cases) - 1   # the first went by the loop (no route yet)
    assert p._plain and all(wire == "nsP%" + topic for wire, _ in p._plain.values())
    for (body, tags, keys), r, (code, frame) in zip(cases[1:], results[1:], sent, strict=True):
        assert code == RequestCode.SEND_MESSAGE_V2
        cmd = decode_frame(frame[4:])
        wire_body, sys_flag = compress_body(body, p.compress_level) if len(body) >= 4096 else (body, 0)
        msg = Message("nsP%" + topic, body, tags=tags, keys=keys)
        props = msg.wire_properties()
        props["UNIQ_KEY"] = r.msg_id
        want, _ = api.send_request(msg, r.queue.queue_id, producer_group=p.group, body=wire_body, sys_flag=sys_flag,
                                   properties=props)
        want.ext_fields["g"] = cmd.ext_fields["g"]   # (the clock's)
        want.opaque = cmd.opaque
        assert frame == encode_frame(want)
    got = {m.msg_id: m for m in pull_all(mq_broker, "nsP%" + topic, expect=len(cases))}
    for (body, tags, keys), r in zip(cases, results, strict=True):
        m = got[r.msg_id]
        assert m.body == body and m.tags == (tags or None) and m.keys == (keys or None)


def test_selector_sharding_key_and_queue(producer, mq_broker):
    topic = uniq("CapiOrder")
    producer.send(topic, b"create")
    by_key = [producer.send(topic, b"o%d" % i, sharding_key="order-42") for i in range(5)]
    assert len({r.queue for r in by_key}) == 1
    assert [r.queue_offset for r in by_key] == sorted(r.queue_offset for r in by_key)
    seen = []

    def pick_last(mqs, msg, arg):
        seen.append((len(mqs), msg.body, arg))
        return mqs[-1]
    r = producer.send(topic, b"sel", selector=pick_last, arg=7)
    assert seen == [(4, b"sel", 7)] and r.queue.queue_id == 3
    target = MessageQueue(topic, r.queue.broker_name, 2)
    assert producer.send(topic, b"q", queue=target).queue == target
    mqs = [MessageQueue(topic, "b", i) for i in range(4)]
    assert select_by_hash(mqs, Message(topic, b"x"), "order-42") == mqs[abs(java_hash("order-42")) % 4]
    with pytest.raises(OptionError, match="queue"):
        producer.send(topic, b"q", queue=MessageQueue("Other", "b", 0))
    with pytest.raises(OptionError):
        producer.send(topic, b"q", queue=target, sharding_key="x")


def test_send_batch_and_message_objects(producer, mq_broker):
    topic = uniq("CapiProdBatch")
    res = producer.send_batch(topic, [b"a", Message(topic, b"b", tags="T", keys="kb"), b"c"], tags="Tx")
    assert res.status is SendStatus.SEND_OK and len(res.msg_id.split(",")) == 3
    got = sorted(pull_all(mq_broker, topic, expect=3), key=lambda m: m.queue_offset)
    assert [m.body for m in got] == [b"a", b"b", b"c"]
    assert [m.tags for m in got] == ["Tx", "T", "Tx"] and got[1].keys == "kb"
    assert [m.msg_id for m in got] == res.msg_id.split(",")
    r = producer.send(Message(topic, b"obj", tags="O", flag=5))
    (m,) = [m for m in pull_all(mq_broker, topic, expect=4) if m.msg_id == r.msg_id]
    assert m.flag == 5 and m.tags == "O"


def test_delay_level_is_sent(producer, mq_broker):
    topic = uniq("CapiDelay")
    producer.send(topic, b"now")
    r = producer.send(topic, b"later", delay_level=1)   # 1 s in the fixtures' broker.conf
    assert r.status is SendStatus.SEND_OK
    end = time.monotonic() + 15
    while time.monotonic() < end:
        got = [m for m in pull_all(mq_broker, topic) if m.body == b"later"]
        if got:
            break
        time.sleep(0.3)
    assert got and got[0].properties.get("DELAY") == "1" and got[0].msg_id == r.msg_id


# ------------------------------------------------------------------------------- interop with the Java client
def _compile_reader(out: Path) -> Path:
    java, javac = peers.find_java()
    res = subprocess.run([str(javac), "-nowarn", "-encoding", "UTF-8", "-d", str(out), "-cp",
                          f"{peers.find_dist()}/lib/*", str(JAVA_SRC)], capture_output=True, text=True)
    if res.returncode != 0:
        raise peers.PeerError(f"javac ProducedReader.java failed:\n{res.stdout}\n{res.stderr}")
    return out


@pytest.fixture(scope="module")
def reader_classes(tmp_path_factory) -> Path:
    try:
        peers.find_java()
        peers.find_dist()
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))
    return _compile_reader(tmp_path_factory.mktemp("capi-reader"))


def test_java_client_reads_what_we_sent(producer, mq_broker, reader_classes, tmp_path):
    topic = uniq("CapiInterop")
    sent = []
    for i in range(12):
        body = os.urandom(64) if i % 3 else (b"z%d" % i) * 1500   # every third one compressed
        props = {"uprop": f"v{i}", "uni": "wert-ä €"} if i % 2 else {}
        r = producer.send(topic, body, tags=f"T{i % 2}", keys=[f"key{i}", "shared"], properties=props)
        sent.append((r, body, props))
    r_batch = producer.send_batch(topic, [b"batch-1", b"batch-2"], tags="B")
    java, _ = peers.find_java()
    home = tmp_path / "javaclient"
    res = subprocess.run([str(java), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                          "-Dfile.encoding=UTF-8", f"-Duser.home={home}", f"-Drocketmq.client.logRoot={home}/logs",
                          "-cp", f"{reader_classes}:{peers.find_dist()}/lib/*", "ProducedReader",
                          mq_broker.namesrv_addr, topic, "14", "40"], capture_output=True, text=True, timeout=90)
    lines = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    assert res.returncode == 0, f"{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    seen = {o["msgId"]: o for o in lines if "msgId" in o}
    for r, body, props in sent:
        o = seen[r.msg_id]
        assert o["offsetMsgId"] == r.offset_msg_id
        assert o["queueId"] == r.queue.queue_id and o["queueOffset"] == r.queue_offset
        assert o["bodySha256"] == hashlib.sha256(body).hexdigest() and o["bodyLen"] == len(body)
        assert o["keys"] == f"key{sent.index((r, body, props))} shared"
        assert o["reconsumeTimes"] == 0 and o["flag"] == 0
        for k, v in props.items():
            assert o["properties"][k] == v
        assert o["properties"]["UNIQ_KEY"] == r.msg_id
        assert (o["sysFlag"] & 0x1) == (1 if len(body) >= 4096 else 0)
    for i, (r, _, _) in enumerate(sent):
        assert seen[r.msg_id]["tags"] == f"T{i % 2}"
    for uid in r_batch.msg_id.split(","):
        assert seen[uid]["tags"] == "B"


# ------------------------------------------------------------------------------- retries
class _FakeProducerBrokers:
    """Two brokers in the producer's publish info; the API's send replaced by a scripted one."""

    def __init__(self, producer: Producer, topic: str, script: list) -> None:
        self.calls: list[str] = []
        self.script = script
        inst = producer.instance
        self.saved = (inst.api.send, dict(inst.broker_addrs))
        inst.broker_addrs.update({"fake-a": {0: "127.0.0.1:1"}, "fake-b": {0: "127.0.0.1:2"}})
        producer._publish[topic] = TopicPublishInfo(topic, [MessageQueue(topic, b, q) for b in ("fake-a", "fake-b")
                                                            for q in range(2)])
        outer = self

        async def send(addr, broker_name, msg, queue_id, **kw):
            outer.calls.append(broker_name)
            step = outer.script.pop(0)
            if isinstance(step, Exception):
                raise step
            from rocketstream.client.common import SendResult
            return SendResult(SendStatus.SEND_OK, kw["properties"]["UNIQ_KEY"], "X",
                              MessageQueue(msg.topic, broker_name, queue_id), 0)
        inst.api.send = send

    def restore(self, producer: Producer) -> None:
        inst = producer.instance
        inst.api.send = self.saved[0]
        inst.broker_addrs.clear()
        inst.broker_addrs.update(self.saved[1])


@pytest.mark.parametrize("mq_broker", ["ours"], indirect=True)
def test_retries_on_another_broker(producer):
    topic = uniq("CapiRetry")
    fake = _FakeProducerBrokers(producer, topic, [BrokerResponseError(14, "busy", addr="x"),
                                                  RemotingConnectError("refused", addr="y"), "ok"])
    try:
        r = producer.send(topic, b"x")
        assert r.status is SendStatus.SEND_OK
        assert len(fake.calls) == 3 and fake.calls[0] != fake.calls[1] and fake.calls[1] != fake.calls[2]
        fake.calls.clear()
        fake.script[:] = [BrokerResponseError(13, "illegal", addr="x")]
        with pytest.raises(BrokerResponseError) as ei:
            producer.send(topic, b"x")
        assert ei.value.code == 13 and len(fake.calls) == 1   # not a retry code: thrown at once
        fake.calls.clear()
        fake.script[:] = [BrokerResponseError(1, "e", addr="x")] * 3
        with pytest.raises(SendFailedError) as ei2:
            producer.send(topic, b"x")
        assert ei2.value.attempts == 3 and len(fake.calls) == 3 and topic in str(ei2.value)
        fake.calls.clear()
        fake.script[:] = [BrokerResponseError(1, "e", addr="x")]
        with pytest.raises(BrokerResponseError):   # a chosen queue is tried once
            producer.send(topic, b"x", queue=MessageQueue(topic, "fake-a", 0))
        assert fake.calls == ["fake-a"]
    finally:
        fake.restore(producer)


@pytest.mark.parametrize("mq_broker", ["ours"], indirect=True)
def test_plain_send_failed_from_the_thread_is_retried_on_the_loop(producer, monkeypatch):
    """A plain send whose first attempt (from the caller's thread) fails with a retry code is retried on the
    loop on another broker, with the same UNIQ_KEY, properties text and body."""
    from rocketstream.client.common import SendResult

    topic = uniq("CapiPlainRetry")
    fake = _FakeProducerBrokers(producer, topic, [])
    api = producer.instance.api
    first: list[tuple[str, str]] = []
    on_loop: list[tuple] = []

    def from_thread(addr, broker_name, topic_, opaque, code, frame, uniq_, timeout, call_soon):
        first.append((broker_name, uniq_))
        raise BrokerResponseError(14, "busy", addr=addr)

    async def send(addr, broker_name, msg, queue_id, **kw):
        on_loop.append((broker_name, kw["uniq"], kw["properties_text"], msg.body, kw["body"]))
        return SendResult(SendStatus.SEND_OK, kw["uniq"], "X", MessageQueue(msg.topic, broker_name, queue_id), 0)
    monkeypatch.setattr(api, "connected", lambda addr: True)
    monkeypatch.setattr(api, "send_frame_from_thread", from_thread)
    api.send = send
    try:
        r = producer.send(topic, b"y", tags="T1")
    finally:
        fake.restore(producer)
    assert r.status is SendStatus.SEND_OK and len(first) == 1 and len(on_loop) == 1
    (broker1, uniq1), (broker2, uniq2, text, msg_body, wire_body) = first[0], on_loop[0]
    assert broker1 != broker2 and r.msg_id == uniq1 == uniq2
    assert text == properties_string({"TAGS": "T1", "WAIT": "true", "UNIQ_KEY": r.msg_id})
    assert msg_body == wire_body == b"y"


def test_plain_lane_per_topic_entries():
    """What the plain lane keeps per topic: the name on the broker and the template; None kept for a topic
    whose sends take the general path (credentials: signed in full; a retry topic), nothing kept for a topic
    send refuses (it raises there)."""
    import types

    from rocketstream.client.credentials import Credentials

    def producer_over(api: MQClientAPI, **kw) -> Producer:
        p = Producer("plain_pg", namesrv="127.0.0.1:1", **kw)
        p._instance = types.SimpleNamespace(api=api)   # (only its api is asked)
        return p
    p = producer_over(MQClientAPI("127.0.0.1:1"), namespace="nsQ")
    wire, template = p._plain_topic("T1")
    assert wire == "nsQ%T1" and p._plain == {"T1": (wire, template)}
    assert p._plain_topic("bad topic") is None and "bad topic" not in p._plain
    assert p._plain_topic("SCHEDULE_TOPIC_XXXX") is None and "SCHEDULE_TOPIC_XXXX" not in p._plain
    p = producer_over(MQClientAPI("127.0.0.1:1"))
    assert p._plain_topic("%RETRY%g1") is None and p._plain == {"%RETRY%g1": None}
    signed = producer_over(MQClientAPI("127.0.0.1:1", credentials=Credentials("ak", "sk12345678")))
    assert signed._plain_topic("T1") is None and signed._plain == {"T1": None}
    assert signed._send_plain("T1", b"x", None, None, None) is None   # the general path sends it


# ------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("topic", ["", "  ", "a b", "topic/x", "t" * 128, "中文"])
def test_invalid_topics_rejected(topic):
    with pytest.raises(OptionError) as ei:
        check_topic(topic)
    assert ei.value.option == "topic"


@pytest.mark.parametrize("group", ["", "g g", "g" * 256, "g$"])
def test_invalid_groups_rejected(group):
    with pytest.raises(OptionError) as ei:
        Producer(group, namesrv="127.0.0.1:9876")
    assert ei.value.option == "group"


def test_default_producer_group_and_bad_settings_rejected():
    with pytest.raises(OptionError, match="DEFAULT_PRODUCER"):
        Producer("DEFAULT_PRODUCER", namesrv="127.0.0.1:9876")
    with pytest.raises(OptionError, match="namesrv"):
        Producer("g", namesrv="")
    with pytest.raises(OptionError, match="send_msg_timeout"):
        Producer("g", namesrv="127.0.0.1:9876", send_msg_timeout=0)
    with pytest.raises(MQClientError, match="not started"):
        Producer("g", namesrv="127.0.0.1:9876").send("T", b"x")


@pytest.mark.parametrize("mq_broker", ["ours"], indirect=True)
def test_bad_messages_rejected_before_sending(producer):
    for kwargs, option in [({"body": b""}, "body"), ({"body": b"x" * (4 * 1024 * 1024 + 1)}, "body"),
                           ({"body": "text"}, "body"), ({"body": b"x", "delay_level": -1}, "delay_level"),
                           ({"body": b"x", "properties": {"k": ""}}, "properties")]:
        with pytest.raises(OptionError) as ei:
            producer.send("CapiBad", **kwargs)
        assert ei.value.option == option, kwargs
    with pytest.raises(OptionError, match="forbidden"):
        producer.send("SCHEDULE_TOPIC_XXXX", b"x")
    with pytest.raises(OptionError, match="topic"):
        producer.send("bad topic", b"x")
    with pytest.raises(OptionError, match="same"):
        producer.send_batch("CapiBad", [Message("Other", b"x")])
    with pytest.raises(OptionError, match="delay"):
        producer.send_batch("CapiBad", [Message("CapiBad", b"x", delay_level=2)])
    small = Producer(uniq("capi_small"), namesrv=producer.namesrv, max_message_size=10)
    with pytest.raises(OptionError, match="over the max"):
        small.start().send("CapiBad", b"x" * 11)
    small.shutdown()


def test_unreachable_name_server_send_fails_fast_naming_it():
    addr = f"127.0.0.1:{peers.free_port()}"
    with Producer(uniq("capi_unreach"), namesrv=addr, instance_name=uniq("unreach"), send_msg_timeout=2.0) as p:
        t0 = time.monotonic()
        with pytest.raises((RemotingConnectError, RemotingTimeoutError)) as ei:
            p.send("CapiNowhere", b"x")
        assert time.monotonic() - t0 < 3.5
        assert addr in str(ei.value)


# ------------------------------------------------------------------------------- encoders
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64),
                          st.dictionaries(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FF,
                                                                blacklist_characters="\x01\x02"), min_size=1,
                                                  max_size=8),
                                          st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FF,
                                                                blacklist_characters="\x01\x02"), min_size=1,
                                                  max_size=12), max_size=4)), min_size=1, max_size=6))
def test_batch_body_and_properties_string_round_trip(items):
    body = encode_batch_body([(f, b, properties_string(p).encode()) for f, b, p in items])
    back = decode_batch_body(body)
    assert [(e.flag, e.body, e.properties) for e in back] == list(items)
    for _, _, p in items:
        assert decode_properties(properties_string(p).encode()) == p


def test_check_group_accepts_valid_names():
    assert check_group("CID_ok-1|%x") == "CID_ok-1|%x"


_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FF, blacklist_characters="\x01\x02"), min_size=1,
                max_size=8)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(min_size=1, max_size=64),
                          st.one_of(st.sampled_from([None, "", "TagA", "TägB"]), _TEXT),
                          st.one_of(st.sampled_from([None, "", "k1", "k1 k2", ("k1", "k2")]), _TEXT,
                                    st.lists(_TEXT, max_size=3)),
                          st.one_of(st.just({}), st.dictionaries(_TEXT, _TEXT, max_size=3)), st.booleans(),
                          st.booleans()),
                min_size=1, max_size=12))
@example([(0, b"a", "TagA", "k1", {}, True, False), (7, b"b", "TagA", "k1", {}, False, False),
          (0, b"c", "TagA", "k1", {"A": "1"}, True, False), (0, b"d", "TagA", "k1", {}, True, True),
          (-1, b"e", None, ("k1", "k2"), {}, True, False), (0, b"f", "TagA", None, {}, True, False)])
def test_one_pass_batch_encoding_is_the_full_encoders(items):
    """Producer.send_batch's one-pass body (a cached properties head per (tags, keys, WAIT)) is byte for byte
    what encode_batch_body gives for each message's wire properties plus its UNIQ_KEY, with the same msgId and
    size; a UNIQ_KEY the user set is kept."""
    from rocketstream.client.producer import _encode_batch
    msgs, keys = [], []
    for i, (flag, body, tags, keys_, props, wait, own_uniq) in enumerate(items):
        props = dict(props)
        if own_uniq:
            props["UNIQ_KEY"] = f"USER{i}"
        msgs.append(Message("T", body, tags=tags, keys=keys_, properties=props, flag=flag, wait_store_msg_ok=wait))
        keys.append(f"7F0000010000000000000000000{i:05d}")
    body, uniq_text, size = _encode_batch(msgs, keys)
    want_props = []
    for m, k in zip(msgs, keys, strict=True):
        p = m.wire_properties()
        p.setdefault("UNIQ_KEY", k)
        want_props.append(p)
    texts = [properties_string(p) for p in want_props]
    assert body == encode_batch_body([(m.flag, m.body, t.encode()) for m, t in zip(msgs, texts, strict=True)])
    assert uniq_text == ",".join(p["UNIQ_KEY"] for p in want_props)
    assert size == sum(20 + len(m.body) + 2 + len(t) + 1 for m, t in zip(msgs, texts, strict=True))
    assert [e.properties for e in decode_batch_body(body)] == want_props


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=1, max_size=64),
                          st.one_of(st.sampled_from([None, "", "TagA", "TägB"]), _TEXT),
                          st.one_of(st.sampled_from([None, "", "k1", "k1 k2", ("k1", "k2")]), _TEXT),
                          st.sampled_from([0, 0, 3, True]), st.booleans(),
                          st.sampled_from(["T", "%RETRY%g"]), st.sampled_from([{}, {}, {"A": "1"}])),
                min_size=1, max_size=10))
@example([(b"a", "TagA", "k1", 0, True, "T", {}), (b"b", "TagA", "k1", 0, False, "T", {}),
          (b"c", "TagA", "k1", 1, True, "T", {}), (b"d", "TagA", "k1", True, True, "T", {}),
          (b"x" * 5000, None, None, 0, True, "T", {})])
def test_send_properties_text_is_the_wire_maps(items):
    """Producer._wire_text (a send's properties text, its head cached per tags/keys/WAIT/delay) gives what
    properties_string makes of _wire's map with the same UNIQ_KEY, and the same body and sysFlag (compressed
    from 4 KiB); messages it does not take (user properties, a retry topic, odd types) are left to _wire."""
    p = Producer("G_text", namesrv="127.0.0.1:1")
    for body, tags, keys, delay, wait, topic, props in items:
        msg = Message(topic, body, tags=tags, keys=keys, delay_level=delay, wait_store_msg_ok=wait,
                      properties=dict(props))
        got = p._wire_text(msg)
        if props or topic.startswith("%RETRY%") or type(delay) is not int or not (keys is None or type(keys) is str):
            assert got is None
            continue
        assert got is not None
        wire_body, sys_flag, text, uniq_key = got
        want_body, want_flag, want_props = p._wire(msg, compress=True, uniq_key=uniq_key)
        assert (wire_body, sys_flag, text) == (want_body, want_flag, properties_string(want_props))
        assert want_props["UNIQ_KEY"] == uniq_key
