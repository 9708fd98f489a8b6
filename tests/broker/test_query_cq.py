"""QUERY_CONSUME_QUEUE (321; rocketstream/broker/query_cq.py, MQClientAPI.query_consume_queue) against the
real 4.9.8 broker.

* ``test_answers_equal_4_9_8``: the same 130 messages in queue 0 of the session's Java broker (consume-queue
  files of 100 units, tests/realbroker/peers.py) and of our processor over a store with the same file size;
  every edge request (file end, min / max, counts 0, negative and wrapping in Java's int, unknown topic and
  queue, a group online and offline) answered alike — code, remark and body, commit-log offsets and sizes
  aside (checked against the records instead: ``test_client_sizes_are_the_stored_records``).
* ``test_client_sizes_are_the_stored_records``: on both session brokers, the client's columns are the
  records a pull returns; the typed errors.
* ``test_mqadmin_query_cq``: the real ``mqadmin queryCq`` prints our broker's answer like 4.9.8's.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from rocketstream.broker import admin
from rocketstream.broker.query_cq import java_int_units
from rocketstream.client.api import PULL_SYS_FLAG_LITE_PULL, PULL_SYS_FLAG_SUBSCRIPTION, MQClientAPI, decode_messages
from rocketstream.client.consume_queue_query import MAX_QUERY_COUNT, parse_query_consume_queue
from rocketstream.client.producer import Producer
from rocketstream.errors import BodyError, BrokerResponseError
from rocketstream.remoting import RemotingCommand, RequestCode
from rocketstream.store import Message, MessageStore, StoreConfig
from tests.broker.admin_fakes import ClientChannelInfo, ConsumerGroupInfo, Controller, SubscriptionData
from tests.client.scenario_util import unique
from tests.realbroker import peers

TAGS = ["a", "b", None]
N = 130
GROUP = "qcqOnlineG"
SUB_VERSION = 1700000000000
QUEUE0 = lambda mqs, msg, arg: sorted(mqs)[0]  # noqa: E731 - every message to queue 0

EDGES: list[tuple[str, dict[str, object]]] = [
    ("first three", {"index": 0, "count": 3}),
    ("to the end of the first file", {"index": 95, "count": 20}),
    ("the next file", {"index": 100, "count": 20}),
    ("to the max", {"index": 125, "count": 20}),
    ("at max", {"index": N, "count": 5}),
    ("past max", {"index": N + 1, "count": 5}),
    ("below min", {"index": -1, "count": 5}),
    ("count 0", {"index": 5, "count": 0}),
    ("count -1", {"index": 5, "count": -1}),
    ("largest count", {"index": 5, "count": MAX_QUERY_COUNT}),
    ("count wraps to negative", {"index": 5, "count": MAX_QUERY_COUNT + 1}),
    ("count wraps to 4 bytes", {"index": 5, "count": 214748365}),
    ("count 2^31-1", {"index": 5, "count": (1 << 31) - 1}),
    ("no count", {"index": 0}),
    ("unknown queue", {"queueId": 99, "index": 0, "count": 2}),
    ("unknown topic", {"topic": "QcqNoSuchTopic", "index": 0, "count": 2}),
    ("group offline", {"index": 0, "count": 2, "consumerGroup": "qcqOfflineG"}),
    ("group online", {"index": 1, "count": 2, "consumerGroup": GROUP}),
    ("group online, past max", {"index": 200, "count": 2, "consumerGroup": GROUP}),
]


def _request(topic: str, fields: dict[str, object]) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.QUERY_CONSUME_QUEUE, {"topic": topic, "queueId": 0, **fields})


def _normal(resp: RemotingCommand) -> tuple:
    """(code, remark, body) with each unit's physicOffset / physicSize left out (the stores differ there)."""
    body = json.loads(resp.body) if resp.body else None
    if body is not None:
        for unit in body["queueData"]:
            assert unit.pop("physicOffset") >= 0 and unit.pop("physicSize") > 0
    return resp.code, resp.remark, body


@pytest.fixture(scope="module")
def java_answers(java_broker):
    topic = unique("QcqT")
    send_to_queue0(java_broker.namesrv_addr, topic, [f"body-{i}".encode() for i in range(N)])
    return topic, asyncio.run(_ask_java(java_broker, topic))


def send_to_queue0(namesrv: str, topic: str, bodies: list[bytes]) -> None:
    with Producer(unique("pg"), namesrv=namesrv) as p:
        for i, body in enumerate(bodies):
            p.send(topic, body, tags=TAGS[i % 3], selector=QUEUE0)


async def _ask_java(target, topic: str) -> dict[str, RemotingCommand]:
    api = MQClientAPI(target.namesrv_addr)
    try:
        await api.heartbeat(target.broker_addr, _heartbeat(topic))
        return {name: await api.invoke(target.broker_addr, _request(topic, fields), 10) for name, fields in EDGES}
    finally:
        await api.close()


def _heartbeat(topic: str) -> dict:
    return {"clientID": "127.0.0.1@qcq", "producerDataSet": [], "consumerDataSet": [{
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "consumeType": "CONSUME_ACTIVELY", "groupName": GROUP,
        "messageModel": "CLUSTERING", "unitMode": False, "subscriptionDataSet": [{
            "classFilterMode": False, "codeSet": [97], "expressionType": "TAG", "subString": "a",
            "subVersion": SUB_VERSION, "tagsSet": ["a"], "topic": topic}]}]}


def _ours(tmp_path: Path, topic: str) -> Controller:
    c = Controller(tmp_path / "unused")
    c.store.close()
    root = tmp_path / "store"
    c.store = MessageStore.open(root, config=StoreConfig(root, mapped_file_size_commit_log=1 << 20,
                                                         mapped_file_size_consume_queue=peers.CQ_FILE_SIZE))
    for i in range(N):
        assert c.store.put_message(Message(topic, f"body-{i}".encode(), tags=TAGS[i % 3]), 0).status.name == "PUT_OK"
    c.consumers.groups[GROUP] = ConsumerGroupInfo(
        channels={"127.0.0.1@qcq": ClientChannelInfo(object(), "127.0.0.1@qcq")},
        subscriptions={topic: SubscriptionData(topic, "a", {"a"}, {97}, SUB_VERSION, "TAG")})
    return c


def test_answers_equal_4_9_8(java_answers, tmp_path):
    # the session's Java broker: topic created by the first sends, then queue 0 only
    topic, _ = java_answers
    c = _ours(tmp_path, topic)
    try:
        handler = admin.register(c).handlers[RequestCode.QUERY_CONSUME_QUEUE]
        units = c.store.read_cq_units(topic, 0, 0, N)
        for name, fields in EDGES:
            ours = handler(None, _request(topic, fields))
            java = java_answers[1][name]
            assert _normal(ours) == _normal(java), name
            if ours.body:   # our offsets and sizes are our store's units
                got = parse_query_consume_queue(ours.body, topic, 0, int(fields["index"]))   # type: ignore[arg-type]
                at = got.from_index
                assert np.array_equal(got.sizes, units["size"][at:at + len(got.sizes)])
                assert np.array_equal(got.physic_offsets, units["offset"][at:at + len(got.sizes)])
        # and the byte form: fastjson's property order, no whitespace
        one = handler(None, _request(topic, {"index": 0, "count": 1, "consumerGroup": GROUP}))
        u = units[0]
        assert one.body == (
            '{"filterData":"null","maxQueueIndex":130,"minQueueIndex":0,"queueData":[{"eval":false,"physicOffset":'
            f'{u["offset"]},"physicSize":{u["size"]},"tagsCode":97}}],"subscriptionData":{{"classFilterMode":false,'
            f'"codeSet":[97],"expressionType":"TAG","subString":"a","subVersion":{SUB_VERSION},"tagsSet":["a"],'
            f'"topic":"{topic}"}}}}').encode()
    finally:
        c.store.close()


def test_java_int_count_model():
    # for (i = 0; i < size && i < count * 20; i += 20) with count * 20 in a Java int
    assert [java_int_units(c) for c in (0, -1, 1, 7, MAX_QUERY_COUNT)] == [0, 0, 1, 7, MAX_QUERY_COUNT]
    assert [java_int_units(c) for c in (MAX_QUERY_COUNT + 1, 214748365, (1 << 31) - 1)] == [0, 1, 0]


def _record_columns(api: MQClientAPI, target, topic: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    async def pull() -> list:
        out: list = []
        while len(out) < n:
            r = await api.pull(target.broker_addr, group="qcqPull", topic=topic, queue_id=0, offset=len(out),
                               max_nums=32, sys_flag=PULL_SYS_FLAG_LITE_PULL | PULL_SYS_FLAG_SUBSCRIPTION,
                               subscription="*")
            assert r.body, r
            out += decode_messages(r.body)
        return out

    msgs = asyncio.run(pull())
    assert [m.queue_offset for m in msgs] == list(range(n))
    return (np.array([m.store_size for m in msgs], dtype=np.int64),
            np.array([m.commit_log_offset for m in msgs], dtype=np.int64))


def test_client_sizes_are_the_stored_records(mq_broker):
    topic = unique("QcqC")
    send_to_queue0(mq_broker.namesrv_addr, topic, [b"y" * (1 + i * 11 % 90) for i in range(40)])
    api = MQClientAPI(mq_broker.namesrv_addr)
    addr = mq_broker.broker_addr
    n = asyncio.run(api.max_offset(addr, topic, 0))
    sizes, offsets = _record_columns(api, mq_broker, topic, n)

    async def ask(index: int, count: int, queue_id: int = 0):
        return await api.query_consume_queue(addr, topic, queue_id, index, count)

    got = asyncio.run(ask(0, 1000))
    assert got.found and (got.min_index, got.max_index) == (0, n)
    assert np.array_equal(got.sizes, sizes) and np.array_equal(got.physic_offsets, offsets)
    assert got.sizes.dtype == np.int64 and len(got.tags_codes) == n
    tail = asyncio.run(ask(n - 3, 10))
    assert np.array_equal(tail.sizes, sizes[-3:])
    past = asyncio.run(ask(n, 10))   # the broker answers SUCCESS without a body
    assert not past.found and len(past.sizes) == 0 and past.remark == f"Index {n} of 0@{topic} is not exist!"
    with pytest.raises(BrokerResponseError) as err:
        asyncio.run(ask(0, 5, queue_id=77))
    assert err.value.code == 1 and addr in str(err.value) and f"{topic}:77" in str(err.value)
    asyncio.run(api.close())


def test_client_refuses_malformed_bodies():
    for body in (b"[1]", b'{"queueData":[{"physicSize":1}]}', b'{"maxQueueIndex":"x"}', b'{"queueData":{}}',
                 b'{"queueData":[{"physicOffset":1,"physicSize":1.5,"tagsCode":0}]}'):
        with pytest.raises(BodyError, match="T:3 from index 9") as err:
            parse_query_consume_queue(body, "T", 3, 9, addr="127.0.0.1:1")
        assert "127.0.0.1:1" in str(err.value)


def _mqadmin(target, *args: str) -> subprocess.Popen:
    argv = peers.mqadmin_command(target.home / "mqadmin", *args, "-n", target.namesrv_addr)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=peers.server_env(peers.find_dist()))


def _expected_query_cq(target, topic: str) -> tuple[list[str], str]:
    """mqadmin's arguments and what it must print for the last two units of queue 0 (from our client)."""
    send_to_queue0(target.namesrv_addr, topic, [b"z" * (i + 1) for i in range(6)])
    api = MQClientAPI(target.namesrv_addr)
    try:
        got = asyncio.run(api.query_consume_queue(target.broker_addr, topic, 0, 4, 5))
    finally:
        asyncio.run(api.close())
    want = [f"Filter data: \nqcqNobody@{topic} is not online!\n======================================\n",
            "Queue data: \nmax: 6, min: 0\n======================================\n"]
    for k in range(2):
        want.append(f"idx: {4 + k}\nConsumeQueueData{{physicOffset={got.physic_offsets[k]}, physicSize="
                    f"{got.sizes[k]}, tagsCode={got.tags_codes[k]}, extendDataJson='null', bitMap='null', "
                    f"eval=false, msg='null'}}\n======================================\n")
    args = ["queryCq", "-t", topic, "-q", "0", "-i", "4", "-c", "5", "-g", "qcqNobody", "-b", target.broker_addr]
    return args, "".join(want)


def test_mqadmin_query_cq(ours_broker, java_broker):
    """``mqadmin queryCq`` (4.9.8's QueryConsumeQueueCommand) decodes our broker's answer as it does 4.9.8's:
    on each broker it prints the units our client reads, in the same form (both JVMs run at once)."""
    topic = unique("QcqA")
    expected = {b.kind: _expected_query_cq(b, topic) for b in (ours_broker, java_broker)}
    procs = {b.kind: _mqadmin(b, *expected[b.kind][0]) for b in (ours_broker, java_broker)}
    outs = {}
    for kind, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "Exception" not in err + out, f"{kind}: {out}\n{err}"
        outs[kind] = out[out.index("Filter data"):]
        assert outs[kind] == expected[kind][1], kind
    # the same lines but for the commit-log offsets and sizes of each store
    def shape(text: str) -> str:
        return re.sub(r"physicOffset=\d+, physicSize=\d+", "physicOffset=_, physicSize=_", text)
    assert shape(outs["ours"]) == shape(outs["java"])
