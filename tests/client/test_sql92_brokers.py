"""SQL92 subscriptions against both brokers (``mq_broker``: ours and the real 4.9.8, both with
``enablePropertyFilter=true``): the broker's filtering agrees with rocketstream.codec.sql92 message by
message, CHECK_CLIENT_CONFIG accepts and refuses what our parser accepts and refuses, and the push and
lite-pull consumers receive exactly the matching messages. Our broker with the property filter off is
checked in-process."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rocketstream.client.api import build_pull_sys_flag
from rocketstream.client.common import PullStatus
from rocketstream.client.consume_service import ConsumeConcurrentlyStatus
from rocketstream.client.instance import MQClientInstance
from rocketstream.client.lite_pull import LitePullConsumer
from rocketstream.client.producer import Producer
from rocketstream.client.pull_decode import decode_pull_body
from rocketstream.client.push_consumer import PushConsumer
from rocketstream.client.route import subscribe_queues
from rocketstream.codec.sql92 import compile_sql92
from rocketstream.errors import FilterExpressionError, OptionError
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode, json_body
from tests.client.scenario_util import unique, wait_for

FAST = dict(rebalance_interval_s=1.0, pull_delay_on_exception_s=0.5, await_termination_s=5.0)

# user properties of the produced messages: message i gets PROPS[i % len(PROPS)]
PROPS: list[dict[str, str]] = [
    {"a": "1", "b": "x"}, {"a": "5", "b": "y"}, {"a": "10"}, {"a": "5.5", "b": "x"}, {"b": "z"},
    {"a": "abc", "b": "x"}, {"a": "-3", "b": "y"}, {"a": "true"}, {}, {"a": "7", "b": "it's"},
]
TAGS = ["TagA", "TagB", None]
EXPRESSIONS = [
    "a > 3",                                # "5.5" and "abc" make Integer.valueOf fail: not matched
    "a > 3.0 OR b = 'x'",
    "b IN ('x', 'y') AND a IS NOT NULL",
    "a BETWEEN -5 AND 5",
    "a IS NULL OR TAGS = 'TagB'",
    "NOT (b = 'x')",
    "a = TRUE OR b = 'it''s'",
    "TAGS IN ('TagA') AND NOT a = 1",       # (NOT a) = 1: never TRUE
]
CHECKED = [   # CHECK_CLIENT_CONFIG: accepted / refused exactly as compile_sql92 decides
    "a = 1", "a = 1 b = 2", "a = 1 #", "a > 0.0", "a > 0.5", "a = NULL", "a IS NULL", "TRUE = 1", "1 = TRUE",
    "a BETWEEN 5 AND 1", "a NOT BETWEEN 5 AND 1", "a CONTAINS 'x'", "'x' IN ('a')", "a IN ('x')", "a ! 1",
    "a = 'open", "a > 9223372036854775807", "a > 9223372036854775808", "NULL", "-a", "a = --1\n",
]


def _produce(ns: str, topic: str, n: int) -> None:
    """The first half round-robin over the queues, the second half to one queue (one sharding key): there
    its records lie back to back in the commit log, which a store that merges adjacent records into one
    segment must still filter record by record."""
    with Producer(unique("pg"), namesrv=ns) as p:
        for i in range(n):
            key = "one-queue" if i >= n // 2 else None
            p.send(topic, f"m{i}".encode(), tags=TAGS[i % len(TAGS)], properties=PROPS[i % len(PROPS)],
                   sharding_key=key)


def _expected(messages: dict[int, Any], expression: str) -> set[bytes]:
    f = compile_sql92(expression)
    return {m.body for m in messages.values() if f.matches(m.properties)}


async def _pull_all(inst: MQClientInstance, topic: str, group: str, expression: str, expression_type: str) -> \
        dict[tuple[int, int], Any]:
    """Every message the broker returns for one subscription (SUBSCRIPTION flag, no client-side filter),
    by (queue id, offset)."""
    route = await inst.api.get_route(topic)
    assert route is not None
    out: dict[tuple[int, int], Any] = {}
    for mq in sorted(subscribe_queues(topic, route)):
        addr = route.broker_datas[0].master_addr()
        assert addr is not None
        offset = 0
        for _ in range(50):
            res = await inst.api.pull(addr, group=group, topic=topic, queue_id=mq.queue_id, offset=offset, max_nums=4,
                                      sys_flag=build_pull_sys_flag(False, False, True), subscription=expression,
                                      expression_type=expression_type, timeout=10.0)
            if res.status is PullStatus.FOUND:
                assert res.body is not None
                for m in decode_pull_body(res.body):
                    out[(m.queue_id, m.queue_offset)] = m
            elif res.status is not PullStatus.NO_MATCHED_MSG:
                break
            offset = res.next_begin_offset
    return out


def test_broker_filters_as_our_evaluator_does(mq_broker) -> None:
    ns = mq_broker.namesrv_addr
    topic, group = unique("Sql92T"), unique("sql92_g")
    _produce(ns, topic, 30)
    inst = MQClientInstance.get(ns, unique("sql92_oracle"))
    inst.start()
    try:
        everything = inst.run(_pull_all(inst, topic, group, "*", "TAG"), 60)
        assert len(everything) == 30
        mismatches = {}
        for expression in EXPRESSIONS:
            got = inst.run(_pull_all(inst, topic, group, expression, "SQL92"), 60)
            got_bodies = {m.body for m in got.values()}
            want = _expected(everything, expression)
            assert want != {m.body for m in everything.values()}, expression   # the filter filters
            if got_bodies != want:
                mismatches[expression] = (sorted(got_bodies - want), sorted(want - got_bodies))
        assert not mismatches, mismatches
        # a pull carrying an expression that does not compile: 4.9.8 builds no filter data for it and
        # (asserts being off) pulls without a filter - every message passes; our broker does the same
        assert len(inst.run(_pull_all(inst, topic, group, "a = NULL", "SQL92"), 60)) == 30
    finally:
        inst.shutdown(force=True)


def test_check_client_config_accepts_what_the_parser_accepts(mq_broker) -> None:
    ns = mq_broker.namesrv_addr
    inst = MQClientInstance.get(ns, unique("sql92_check"))
    inst.start()

    async def check(expression: str) -> RemotingCommand:
        sub = {"classFilterMode": False, "codeSet": [], "expressionType": "SQL92", "subString": expression,
               "subVersion": 1, "tagsSet": [], "topic": "T"}
        body = {"clientId": inst.client_id, "group": "g", "subscriptionData": sub}
        req = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None, json_body.dumps(body))
        return await inst.api.invoke(mq_broker.broker_addr, req, 5.0)

    try:
        disagreements = {}
        for expression in CHECKED:
            resp = inst.run(check(expression), 10)
            try:
                compile_sql92(expression)
                ours = ResponseCode.SUCCESS
            except FilterExpressionError:
                ours = ResponseCode.SUBSCRIPTION_PARSE_FAILED
            if resp.code != ours:
                disagreements[expression] = (resp.code, resp.remark)
        assert not disagreements, disagreements
    finally:
        inst.shutdown(force=True)


def test_push_and_lite_pull_consumers_receive_exactly_the_matching_messages(mq_broker) -> None:
    ns = mq_broker.namesrv_addr
    topic = unique("Sql92C")
    expression = "a > 3.0 OR b = 'x'"
    n = 20
    _produce(ns, topic, n)
    f = compile_sql92(expression)
    want = {f"m{i}".encode() for i in range(n) if f.matches(dict(PROPS[i % len(PROPS)]))}
    assert 0 < len(want) < n
    got: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list[Any], ctx: Any) -> Any:
        with lock:
            got.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    push = PushConsumer(unique("sql92_push"), namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET", **FAST)
    push.subscribe(topic, expression, expression_type="SQL92")
    push.register_message_listener_concurrently(listener)
    lite = LitePullConsumer(unique("sql92_lite"), namesrv=ns, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    lite.subscribe(topic, expression, expression_type="SQL92")
    push.start()
    lite.start()
    try:
        polled: list[bytes] = []
        end = time.monotonic() + 30
        while len(polled) < len(want) and time.monotonic() < end:
            polled += [m.body for m in lite.poll(0.5)]
        wait_for(lambda: len(got) >= len(want), 30, "the push consumer's matching messages")
        time.sleep(1.0)   # nothing else arrives
        polled += [m.body for m in lite.poll(0.2)]
        assert sorted(got) == sorted(want)
        assert sorted(polled) == sorted(want)
    finally:
        push.shutdown()
        lite.shutdown()


def test_a_bad_expression_fails_at_subscribe_naming_the_position() -> None:
    c = PushConsumer(unique("sql92_bad"), namesrv="127.0.0.1:1")
    with pytest.raises(FilterExpressionError) as info:
        c.subscribe("T", "a > 'x'", expression_type="SQL92")
    assert info.value.position == 2 and info.value.expression == "a > 'x'"
    lite = LitePullConsumer(unique("sql92_bad"), namesrv="127.0.0.1:1")
    with pytest.raises(FilterExpressionError, match="position 4"):
        lite.subscribe("T", "a = 'open", expression_type="SQL92")
    with pytest.raises(OptionError, match="must not be empty"):
        lite.subscribe("T", "  ", expression_type="SQL92")


# --- our broker with enablePropertyFilter off / a registered subscription that does not compile -------------
def test_our_broker_without_the_property_filter_refuses_sql92(tmp_path: Path) -> None:
    from tests.broker import brokerutil

    async def scenario() -> None:
        async with brokerutil.broker(tmp_path / "off") as ctl:
            ch = await brokerutil.client(ctl)
            try:
                await ch.invoke(brokerutil.send_v2("SqlOff", b"x", queue_id=0), 5.0)
                body = {"clientId": "c", "group": "g", "subscriptionData": {
                    "expressionType": "SQL92", "subString": "a = 1", "topic": "SqlOff"}}
                resp = await ch.invoke(RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None,
                                                               json_body.dumps(body)), 5.0)
                assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR,
                                                    "The broker does not support consumer to filter message by SQL92")
                req = brokerutil.pull("g", "SqlOff", 0, 0, sys_flag=brokerutil.SUBSCRIPTION, subscription="a = 1")
                req.ext_fields["expressionType"] = "SQL92"
                resp = await ch.invoke(req, 5.0)
                assert resp.code == ResponseCode.SYSTEM_ERROR and "filter message by SQL92" in (resp.remark or "")
            finally:
                ch.close()
        async with brokerutil.broker(tmp_path / "on", enable_property_filter=True) as ctl:
            ch = await brokerutil.client(ctl)
            try:
                await ch.invoke(brokerutil.send_v2("SqlOn", b"x", queue_id=0), 5.0)
                hb = {"clientID": "c1", "producerDataSet": [], "consumerDataSet": [{
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "consumeType": "CONSUME_PASSIVELY",
                    "groupName": "g", "messageModel": "CLUSTERING", "unitMode": False, "subscriptionDataSet": [
                        {"classFilterMode": False, "codeSet": [], "expressionType": "SQL92", "subString": "a = NULL",
                         "subVersion": 1, "tagsSet": [], "topic": "SqlOn"}]}]}
                resp = await ch.invoke(RemotingCommand.request(RequestCode.HEART_BEAT, None, json_body.dumps(hb)), 5.0)
                assert resp.code == ResponseCode.SUCCESS
                req = brokerutil.pull("g", "SqlOn", 0, 0, sys_flag=0, subscription="a = NULL", sub_version=1)
                req.ext_fields["expressionType"] = "SQL92"
                resp = await ch.invoke(req, 5.0)
                assert resp.code == ResponseCode.FILTER_DATA_NOT_EXIST
            finally:
                ch.close()

    asyncio.run(scenario())
