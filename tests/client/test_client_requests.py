"""Broker -> client requests answered by our client (client/client_remoting.py), driven by the real mqadmin
(rocketmq-tools 4.9.8) through both brokers (``mq_broker``): ``consumerStatus`` (GET_CONSUMER_RUNNING_INFO
307), ``queryMsgById -g -d`` (CONSUME_MESSAGE_DIRECTLY 309) and ``resetOffsetByTime`` (the broker's
INVOKE_BROKER_TO_RESET_OFFSET 222 pushing RESET_CONSUMER_CLIENT_OFFSET 220 to our running PushConsumer)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any

from rocketstream.client import client_remoting
from rocketstream.client.allocate import MessageQueue
from rocketstream.client.consume_service import ConsumeConcurrentlyStatus
from rocketstream.client.offset_store import RemoteBrokerOffsetStore
from rocketstream.client.producer import Producer
from rocketstream.client.push_consumer import PushConsumer
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode, json_body
from tests.broker.test_java_mqadmin import mqadmin
from tests.client.scenario_util import unique, wait_for

FAST = dict(rebalance_interval_s=1.0, pull_delay_on_exception_s=0.5, await_termination_s=5.0)


def test_mqadmin_consumer_status_consume_directly_and_reset_offset(mq_broker) -> None:
    ns = mq_broker.namesrv_addr
    topic, group = unique("ClientReq"), unique("client_req")
    before_ms = int(time.time() * 1000) - 1000
    with Producer(unique("pg"), namesrv=ns) as p:
        sent = [p.send(topic, f"m{i}".encode(), tags="TagA") for i in range(8)]
    seen: Counter[bytes] = Counter()
    lock = threading.Lock()

    def listener(msgs: list[Any], ctx: Any) -> Any:
        with lock:
            seen.update(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", **FAST)
    c.subscribe(topic, "TagA || TagB")
    c.register_message_listener_concurrently(listener)
    c.reset_offset_wait_s = 1.0    # type: ignore[attr-defined]  # RocketMQ waits 10 s
    c.start()
    try:
        wait_for(lambda: sum(seen.values()) >= 8, 60, "the 8 messages")
        assert c.instance is not None
        cid = c.instance.client_id
        wait_for(lambda: len(c.rebalance.process_queue_table) >= 4, 10, "the topic's queues")
        c.persist_offsets_sync()   # every queue has a committed offset (222 needs one for each)

        # consumerStatus -i: our ConsumerRunningInfo as ConsumerRunningInfo.formatString prints it
        out = mqadmin(mq_broker, "consumerStatus", "-g", group, "-i", cid)
        assert "#Consumer Properties#" in out and "PROP_CONSUME_TYPE" in out and "CONSUME_PASSIVELY" in out
        subs = out.split("#Consumer Subscription#")[1].split("#Consumer Offset#")[0]
        assert f"Topic: {topic}" in subs and "SubExpression: TagA || TagB" in subs
        assert f"Topic: %RETRY%{group}" in subs
        offsets = out.split("#Consumer Offset#")[1].split("#Consumer MQ Detail#")[0]
        per_queue = Counter(r.queue.queue_id for r in sent)
        rows = {int(line.split()[2]): int(line.split()[3]) for line in offsets.splitlines()
                if line.startswith(topic + " ")}
        assert rows == {q: per_queue.get(q, 0) for q in rows} and len(rows) >= 4, offsets
        assert "#Consumer RT&TPS#" in out

        # INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223, what mqadmin getConsumerStatus sends): the broker asks
        # every client with GET_CONSUMER_STATUS_FROM_CLIENT (221); ours answers its in-memory offsets
        ask = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
                                      {"topic": topic, "group": group, "clientAddr": cid})
        resp = c.instance.run(c.instance.api.invoke(mq_broker.broker_addr, ask, 10.0), 15.0)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        status = json_body.loads(resp.body)["consumerTable"][cid]   # type: ignore[index]
        assert {mq["queueId"]: off for mq, off in status.items()} == {q: per_queue.get(q, 0) for q in rows}

        # queryMsgById -g -d: the message is handed to our listener directly (it is consumed once more)
        first = sent[0]
        out = mqadmin(mq_broker, "queryMsgById", "-i", first.offset_msg_id, "-g", group, "-d", cid)
        assert "consumeResult=CR_SUCCESS" in out and "order=false" in out, out
        wait_for(lambda: seen[b"m0"] == 2, 10, "the directly consumed message")

        # resetOffsetByTime -f true: the running consumer consumes everything again
        with lock:
            seen.clear()
        out = mqadmin(mq_broker, "resetOffsetByTime", "-g", group, "-t", topic, "-s", str(before_ms), "-f", "true")
        assert f"rollback consumer offset by specified group[{group}], topic[{topic}], force[true]" in out, out
        table = [line.split() for line in out.splitlines() if line.startswith(mq_broker.broker_name + " ")]
        assert len(table) >= 4 and all(row[2] == "0" for row in table), out
        try:
            wait_for(lambda: sum(seen.values()) >= 8, 60, "the re-consumed messages")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; seen {dict(seen)}, process queues "
                                 f"{c.rebalance.process_queue_table}") from None
        time.sleep(1.0)
        assert sorted(seen) == sorted(f"m{i}".encode() for i in range(8))
    finally:
        c.shutdown()


# --- the bodies, without a broker --------------------------------------------------------------------------
class _Store(RemoteBrokerOffsetStore):
    def __init__(self) -> None:
        super().__init__("g", broker=None)   # type: ignore[arg-type]  # only the memory table is read


def _fake_instance(consumer: Any) -> Any:
    spawned: list[Any] = []
    inst = SimpleNamespace(client_id="10.0.0.1@1", namesrv="127.0.0.1:9876", consumers={"g": consumer},
                           consumer_start_ms={"g": 1700000000000}, route_refresh_interval=30.0,
                           heartbeat_interval=30.0, persist_interval=5.0, spawned=spawned,
                           spawn=spawned.append, rebalance_now=lambda: None)
    return inst


def test_get_consumer_status_and_unknown_group_answers() -> None:
    store = _Store()
    mq = MessageQueue("T", "broker-a", 1)
    store.update_offset(mq, 42, False)
    store.update_offset(MessageQueue("U", "broker-a", 0), 7, False)
    consumer = SimpleNamespace(consume_service=object(), offset_store=store)
    inst = _fake_instance(consumer)
    req = RemotingCommand.request(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": "T", "group": "g"})
    resp = client_remoting.handle_request(inst, req)
    assert resp.code == ResponseCode.SUCCESS
    assert resp.body == (b'{"consumerTable":{},'
                         b'"messageQueueTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:42}}')
    for code in (RequestCode.GET_CONSUMER_RUNNING_INFO, RequestCode.CONSUME_MESSAGE_DIRECTLY):
        req = RemotingCommand.request(code, {"consumerGroup": "nope", "clientId": "x"})
        resp = asyncio.run(client_remoting.handle_request(inst, req))
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark == "The Consumer Group <nope> not exist in this consumer"


def test_reset_offset_body_is_read_and_a_bad_body_is_refused() -> None:
    inst = _fake_instance(SimpleNamespace())
    body = json_body.dumps({"offsetTable": {client_remoting.MessageQueueKey(MessageQueue("T", "b", 2)): 5}})
    req = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, {"topic": "T", "group": "g",
                                                                              "timestamp": 1}, body)
    assert client_remoting.handle_request(inst, req) is None
    assert len(inst.spawned) == 1
    inst.spawned[0].close()
    bad = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, {"topic": "T", "group": "g"},
                                  b'{"offsetTable":{"x":"y"}}')
    try:
        client_remoting.handle_request(inst, bad)
    except Exception as exc:   # BodyError names the entry
        assert "offsetTable" in str(exc)
    else:
        raise AssertionError("a bad ResetOffsetBody was accepted")
