"""Consume timeout (``cleanExpireMsg``) of the push consumer and the lite-pull consumer's
TopicMessageQueueChangeListener."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from rocketstream.client.allocate import MessageQueue
from rocketstream.client.consume_service import ConsumeConcurrentlyStatus
from rocketstream.client.lite_pull import LitePullConsumer
from rocketstream.client.process_queue import ProcessQueue
from rocketstream.client.push_consumer import PushConsumer
from rocketstream.errors import OptionError
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode
from tests.client.scenario_util import produce, unique, wait_for


@dataclass
class _Msg:
    queue_offset: int
    body: bytes = b"x"
    properties: dict[str, str] = field(default_factory=dict)


def test_clean_expired_msg_sends_back_the_oldest_expired_messages_only() -> None:
    pq = ProcessQueue()
    now_ms = int(time.time() * 1000)
    msgs = [_Msg(i) for i in range(5)]
    for m, age_s in zip(msgs, (100, 50, 1, None, 100), strict=True):   # offset 4 is old but behind a young one
        if age_s is not None:
            m.properties["CONSUME_START_TIME"] = str(now_ms - age_s * 1000)
    pq.put_messages(msgs)
    sent: list[int] = []
    assert pq.clean_expired_msg(10.0, lambda m: sent.append(m.queue_offset) or True) == 2
    assert sent == [0, 1] and pq.first_offset() == 2 and pq.msg_count == 3
    assert pq.clean_expired_msg(10.0, lambda m: True) == 0          # offset 2 started 1 s ago
    # a failed send-back leaves the message where it is (RocketMQ: the exception stops this run)
    pq2 = ProcessQueue()
    old = _Msg(7, properties={"CONSUME_START_TIME": str(now_ms - 60_000)})
    pq2.put_messages([old])
    assert pq2.clean_expired_msg(1.0, lambda m: False) == 0 and pq2.msg_count == 1


def test_consume_timeout_option_is_checked() -> None:
    for bad in (0, -1, "15", True):
        with pytest.raises(OptionError, match="consume_timeout_minutes"):
            PushConsumer("g", namesrv="127.0.0.1:1", consume_timeout_minutes=bad)


def test_a_listener_blocked_past_the_consume_timeout_gets_its_message_sent_back(mq_broker) -> None:
    if mq_broker.kind != "ours":
        pytest.skip("one broker is enough: the send-back path is covered against both in test_push_consumer")
    ns = mq_broker.namesrv_addr
    topic, group = unique("Expire"), unique("expire_g")
    produce(ns, topic, [b"slow"])
    release = threading.Event()
    deliveries: list[tuple[int, float]] = []
    lock = threading.Lock()

    def listener(msgs: list[Any], ctx: Any) -> Any:
        m = msgs[0]
        with lock:
            deliveries.append((m.reconsume_times, time.monotonic()))
        if m.reconsume_times == 0:
            release.wait(20)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    # 0.02 min = 1.2 s: cleanExpireMsg runs every 1.2 s and sends back what started more than 1.2 s ago
    c = PushConsumer(group, namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", consume_timeout_minutes=0.02,
                     rebalance_interval_s=1.0, await_termination_s=1.0)
    c.subscribe(topic, "*")
    c.register_message_listener_concurrently(listener)
    c.start()
    try:
        wait_for(lambda: len(deliveries) == 1, 30, "the first delivery")
        pqs = [pq for mq, pq in c.rebalance.process_queue_table.items() if mq.topic == topic]
        # sent back (delay level 3 = 3 s here) and dropped from its process queue while the listener still runs
        wait_for(lambda: sum(pq.msg_count for pq in pqs) == 0, 10, "the expired message to leave its queue")
        assert not release.is_set()
        wait_for(lambda: len(deliveries) == 2, 20, "the redelivery from the retry topic")
        assert deliveries[1][0] == 1                      # reconsume times 1: it came back through %RETRY%
        assert deliveries[1][1] - deliveries[0][1] >= 1.2
    finally:
        release.set()
        c.shutdown()


# --- LitePullConsumer: TopicMessageQueueChangeListener and subscribe()'s MessageQueueListener -----------------
def _update_topic(inst: Any, addr: str, topic: str, queues: int) -> None:
    """UPDATE_AND_CREATE_TOPIC (17) as mqadmin updateTopic sends it."""
    req = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False})
    resp = inst.run(inst.api.invoke(addr, req, 5.0), 10.0)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def test_lite_pull_queue_change_listeners_see_added_queues(mq_broker) -> None:
    if mq_broker.kind != "ours":
        pytest.skip("queues are added with updateTopic on our broker (the issue's scenario)")
    ns = mq_broker.namesrv_addr
    topic = unique("QChange")
    produce(ns, topic, [b"x"])
    changes: list[tuple[str, set[MessageQueue]]] = []
    divided: list[tuple[int, int]] = []
    c = LitePullConsumer(unique("qchange_g"), namesrv=ns, topic_metadata_check_interval_s=0.3)
    c.first_topic_metadata_check_s = 0.1
    c.subscribe(topic, "*", message_queue_listener=lambda t, mq_all, mine: divided.append((len(mq_all), len(mine))))
    c.register_topic_message_queue_change_listener(topic, lambda t, mqs: changes.append((t, mqs)))
    with pytest.raises(OptionError, match="listener"):
        c.register_topic_message_queue_change_listener(topic, "not callable")   # type: ignore[arg-type]
    c.start()
    try:
        wait_for(lambda: (4, 4) in divided, 10, "the first assignment")
        time.sleep(0.5)
        assert changes == []                     # the set seen at start is the baseline: no change yet
        inst = c.instance
        assert inst is not None
        _update_topic(inst, mq_broker.broker_addr, topic, 8)
        wait_for(lambda: bool(changes), 10, "the change listener")
        assert changes[0][0] == topic and {mq.queue_id for mq in changes[0][1]} == set(range(8))
        time.sleep(0.8)
        assert len(changes) == 1                 # called once per change
        # the rebalance sees the new queues at the next route refresh (every 30 s; done now here)
        inst.run(inst.update_route(topic), 10.0)
        inst.rebalance_now()
        wait_for(lambda: (8, 8) in divided, 10, "the rebalance onto 8 queues")
        assert len(c.assignment()) == 8
    finally:
        c.shutdown()
