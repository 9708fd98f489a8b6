"""``topicPattern`` (issue 22): a regular expression matched against whole topic names — the name server's topic
list in network mode (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, less the cluster and broker names of
GET_SYSTEM_TOPIC_LIST_FROM_NS), the stores' topics in local mode — retry, dead-letter and system topics only
when the pattern is their very name; a running stream picks up new matching topics at its route refresh, from
their earliest offset; rows carry their topic and the offsets key by it.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from rocketstream.errors import OptionError
from rocketstream.remoting import RequestCode
from rocketstream.spark.brokers import query_topics
from rocketstream.spark.options import parse_options, topics_matching
from rocketstream.spark.schema import projection_for
from rocketstream.spark.stream import RocketMQStreamReader
from spark_stores import fill
from test_follow import ends_of, expected, spark_json, trigger
from test_network_multi import _call, create_topic, wait_route
from tests.client.scenario_util import produce, unique


def test_pattern_matches_whole_names_and_leaves_system_topics_out():
    names = ["Orders", "Orders-eu", "myOrders", "%RETRY%g", "%DLQ%g", "TBW102", "SCHEDULE_TOPIC_XXXX",
             "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_wheel_timer", "OFFSET_MOVED_EVENT", "BenchmarkTest",
             "SELF_TEST_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "DefaultCluster", "broker-a"]
    system = ["DefaultCluster", "broker-a"]
    assert topics_matching(re.compile("Orders.*"), names, system) == ("Orders", "Orders-eu")
    assert topics_matching(re.compile(".*"), names, system) == ("Orders", "Orders-eu", "myOrders")
    assert topics_matching(re.compile("%RETRY%g"), names, system) == ("%RETRY%g",)   # named literally
    assert topics_matching(re.compile("TBW102"), names, system) == ("TBW102",)
    assert topics_matching(re.compile("broker-a"), names, system) == ("broker-a",)
    assert topics_matching(re.compile("%RETRY%.*"), names, system) == ()
    assert topics_matching(re.compile("Order"), names, system) == ()   # full match, not search


def test_pattern_options():
    o = parse_options({"path": "/s", "topicPattern": "A.*"}, streaming=True)
    assert o.topics == () and o.topic_pattern is not None and o.topic_pattern.pattern == "A.*"
    with pytest.raises(OptionError, match="not both") as err:
        parse_options({"path": "/s", "topic": "A", "topicPattern": "A.*"}, streaming=True)
    assert err.value.option == "topicPattern"
    with pytest.raises(OptionError, match="regular expression") as err:
        parse_options({"path": "/s", "topicPattern": "A(["}, streaming=False)
    assert err.value.option == "topicPattern"
    with pytest.raises(OptionError) as err:
        parse_options({"path": "/s", "topicPattern": " "}, streaming=False)
    assert err.value.option == "topicPattern"
    with pytest.raises(OptionError, match="topicPattern") as err:   # neither: the message names both
        parse_options({"path": "/s"}, streaming=False)
    assert err.value.option == "topic"


def local_reader(root, **extra: str) -> RocketMQStreamReader:
    options = {"path": str(root), "topicPattern": "Ord.*", "startingOffsets": "earliest",
               "routeRefreshIntervalMs": "1", **extra}
    return RocketMQStreamReader(parse_options(options, streaming=True), projection_for(None))


def test_local_stream_picks_up_a_new_matching_topic(tmp_path):
    root = tmp_path / "broker-a"
    fill(root, 8, topic="Orders", queues=2)
    fill(root, 3, topic="Other", queues=1)
    fill(root, 2, topic="%RETRY%g", queues=1)
    r = local_reader(root)
    start = spark_json(r.initialOffset())
    assert list(start) == ["Orders"]
    end, ranges = trigger(r, start)
    assert ranges == [("broker-a", "Orders", 0, 0, 4), ("broker-a", "Orders", 1, 0, 4)]
    fill(root, 4, topic="Ord2", queues=2)
    end2, ranges = trigger(r, end)
    assert list(end2) == ["Ord2", "Orders"]   # Java string order, as the checkpoint keeps it
    assert ranges == [("broker-a", "Ord2", 0, 0, 2), ("broker-a", "Ord2", 1, 0, 2)]   # from earliest
    with pytest.raises(OptionError, match=r"matches no topic of the stores.*topics: Ord2, Orders, Other") as err:
        local_reader(root, topicPattern="Nothing.*")
    assert err.value.option == "topicPattern"


def test_local_batch_rows_carry_their_topic(spark, tmp_path):
    root = tmp_path / "broker-a"
    fill(root, 6, topic="Orders", queues=2)
    fill(root, 4, topic="Ord2", queues=1)
    fill(root, 5, topic="Other", queues=1)
    df = spark.read.format("rocketmq").option("topicPattern", "Ord.*").load(str(root))
    got = sorted((r.topic, r.queueId, r.queueOffset) for r in df.select("topic", "queueId", "queueOffset").collect())
    assert got == sorted([("Orders", q, o) for q in range(2) for o in range(3)] + [("Ord2", 0, o) for o in range(4)])


def test_network_stream_picks_up_a_new_matching_topic(mq_broker):
    ns, addr, broker = mq_broker.namesrv_addr, mq_broker.broker_addr, mq_broker.broker_name
    prefix = unique("Pat")
    first, later = f"{prefix}_1", f"{prefix}_2"
    create_topic(addr, first, 2)
    create_topic(addr, f"{prefix}x", 1)   # not matched: the pattern wants "_" then digits
    wait_route(ns, first, {broker: 6})
    sent = ends_of(produce(ns, first, [b"a%d" % i for i in range(4)]))
    group = unique("PatG")
    r = RocketMQStreamReader(parse_options({"nameServer": ns, "topicPattern": rf"{prefix}_\d+",
                                            "consumerGroup": group, "startingOffsets": "earliest",
                                            "routeRefreshIntervalMs": "1"}, streaming=True), projection_for(None))
    start = spark_json(r.initialOffset())
    assert list(start) == [first]
    end, ranges = trigger(r, start)
    assert ranges == expected(first, {}, sent)
    create_topic(addr, later, 2)
    wait_route(ns, later, {broker: 6})
    sent2 = ends_of(produce(ns, later, [b"b%d" % i for i in range(4)]))
    end2, ranges = trigger(r, end)
    assert list(end2) == [first, later]
    assert ranges == expected(later, {}, sent2)   # the new topic from earliest
    # the group's heartbeat subscribes to the new topic too (mqadmin consumerConnection lists both); it was
    # fixed to the topics of the query's start, none for a pattern
    r.commit(end2)
    try:
        resp = _call(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
        assert resp.code == 0, (resp.code, resp.remark)
        assert set(json.loads(resp.body)["subscriptionTable"]) == {first, later}
    finally:
        r.stop()


def test_name_server_topic_lists_on_both_name_servers(mq_broker):
    """Our name server and the real 4.9.8 one list the cluster and broker names as topics; neither is read
    by a pattern, nor are the 4.9.8 broker's system topics (RMQ_SYS_*, TBW102, SCHEDULE_TOPIC_XXXX, ...)."""
    ns = mq_broker.namesrv_addr
    topic = unique("PatBoth")
    produce(ns, topic, [b"x"])
    deadline = time.monotonic() + 30
    options = parse_options({"nameServer": ns, "topicPattern": ".*"}, streaming=False)
    while topic not in (found := query_topics(options)):
        assert time.monotonic() < deadline, f"{topic} never listed: {found}"
        time.sleep(0.1)
    for name in found:
        assert not name.startswith(("%RETRY%", "%DLQ%", "RMQ_SYS_", "rmq_sys_")), found
        assert name not in ("TBW102", "SCHEDULE_TOPIC_XXXX", mq_broker.cluster, mq_broker.broker_name), found
    literal = parse_options({"nameServer": ns, "topicPattern": mq_broker.broker_name}, streaming=False)
    assert query_topics(literal) == (mq_broker.broker_name,)


def test_pattern_in_a_namespace_matches_its_topics_by_their_user_names(mq_broker):
    """With ``namespace`` the pattern sees that namespace's topics only, unwrapped (``nsA%T`` is ``T``), as a Java
    client in the namespace names them; before, it matched raw names, so ``.*`` read every namespace's topics."""
    ns, addr, broker = mq_broker.namesrv_addr, mq_broker.broker_addr, mq_broker.broker_name
    base = unique("PatNs")
    mine, other, plain = f"nsA%{base}_1", f"nsB%{base}_2", f"{base}_3"
    for t in (mine, other, plain):
        create_topic(addr, t, 1)
    for t in (mine, other, plain):
        wait_route(ns, t, {broker: 6})
    sent = ends_of(produce(ns, mine, [b"n%d" % i for i in range(3)]))

    def topics(pattern: str, **extra: str) -> tuple[str, ...]:
        return query_topics(parse_options({"nameServer": ns, "topicPattern": pattern, **extra}, streaming=False))

    assert topics(rf"{base}_\d", namespace="nsA") == (f"{base}_1",)
    assert topics(rf"{base}_\d") == (plain,)            # no namespace: raw names, full match
    everything = topics(".*", namespace="nsA")
    assert f"{base}_1" in everything and not {f"{base}_2", f"{base}_3", other, plain} & set(everything)
    assert not any("%" in t for t in everything)
    with pytest.raises(OptionError, match="namespace nsA") as err:
        topics(rf"{base}_[23]", namespace="nsA")
    assert err.value.option == "topicPattern"
    # a stream over it reads the wrapped topic and keys its offsets by the user's name
    r = RocketMQStreamReader(parse_options({"nameServer": ns, "topicPattern": rf"{base}_\d", "namespace": "nsA",
                                            "consumerGroup": unique("PatNsG"), "startingOffsets": "earliest",
                                            "routeRefreshIntervalMs": "1"},
                                           streaming=True), projection_for(None))
    try:
        start = spark_json(r.initialOffset())
        assert list(start) == [f"{base}_1"]
        _end, ranges = trigger(r, start)
        assert ranges == expected(f"{base}_1", {}, sent)
    finally:
        r.stop()   # its group heartbeats end with it
