"""mqadmin (rocketmq-tools 4.9.8, ../shared/rocketmq-4.9.8/bin/mqadmin) against the name server + broker under
test: topicList (-c), topicStatus, topicRoute, consumerProgress (with and without -g), clusterList,
queryMsgByKey. The data: 40 messages (keys SEED-i) on a 4-queue topic, all consumed by one group whose offsets
were committed (BrokerScenarios seed). The expected output is what mqadmin prints against the real 4.9.8
broker (``ROCKETSTREAM_BROKER_TARGETS=java``, see tests/broker/java_fixtures.py).
"""

from __future__ import annotations

import re

import pytest

from rocketstream.remoting.json_body import loads
from tests.broker.java_fixtures import assert_pass, broker_target, run_scenario, scenario_classes  # noqa: F401
from tests.realbroker import peers


@pytest.fixture(scope="module")
def seeded(broker_target, scenario_classes):  # noqa: F811
    topic, group = f"MqadminTopic_{broker_target.kind}", f"MqadminGroup_{broker_target.kind}"
    r = assert_pass(run_scenario(scenario_classes, broker_target, "seed", topic, group, "--count", "40"),
                    broker_target)
    assert sum(r["per_queue"].values()) == 40
    return topic, group, r


def mqadmin(target, *args: str, timeout: float = 120) -> str:
    """Run mqadmin SUBCOMMAND ... -n NAMESRV (tests/realbroker/peers.py); its stdout (it must exit 0)."""
    res = peers.mqadmin(target.home / "mqadmin", *args, "-n", target.namesrv_addr, timeout=timeout)
    assert res.returncode == 0, f"mqadmin {' '.join(args)}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res.stdout


def rows(out: str, first: str) -> list[list[str]]:
    """Whitespace-split table rows whose first column is ``first``."""
    return [line.split() for line in out.splitlines() if line.split()[:1] == [first]]


def test_topic_list(broker_target, seeded):  # noqa: F811
    topic, group, _ = seeded
    names = set(mqadmin(broker_target, "topicList").split())
    assert {topic, f"%RETRY%{group}", "TBW102"} <= names, names


def test_topic_list_with_clusters(broker_target, seeded):  # noqa: F811
    topic, group, _ = seeded
    out = mqadmin(broker_target, "topicList", "-c")
    assert out.splitlines()[0].split() == ["#Cluster", "Name", "#Topic", "#Consumer", "Group"]
    # one row per topic (retry/DLQ topics skipped) with every group that consumes it (QUERY_TOPIC_CONSUME_BY_WHO)
    assert [broker_target.cluster, topic, group] in rows(out, broker_target.cluster)
    assert not any(r[1].startswith("%RETRY%") for r in rows(out, broker_target.cluster))


def test_topic_status(broker_target, seeded):  # noqa: F811
    topic, _, r = seeded
    out = mqadmin(broker_target, "topicStatus", "-t", topic)
    assert out.splitlines()[0].split() == ["#Broker", "Name", "#QID", "#Min", "Offset", "#Max", "Offset",
                                           "#Last", "Updated"]
    got = {int(row[1]): (int(row[2]), int(row[3])) for row in rows(out, broker_target.broker_name)}
    assert got == {int(q): (0, n) for q, n in r["per_queue"].items()} | {
        q: (0, 0) for q in range(4) if str(q) not in r["per_queue"]}
    # the last column is the newest message's store time, "yyyy-MM-dd HH:mm:ss,SSS"
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", " ".join(row[4:6]))
               for row in rows(out, broker_target.broker_name))


def test_topic_route(broker_target, seeded):  # noqa: F811
    topic, _, _ = seeded
    route = loads(mqadmin(broker_target, "topicRoute", "-t", topic))
    assert route["brokerDatas"] == [{"brokerAddrs": {0: broker_target.broker_addr},
                                     "brokerName": broker_target.broker_name, "cluster": broker_target.cluster}]
    assert route["queueDatas"] == [{"brokerName": broker_target.broker_name, "perm": 6, "readQueueNums": 4,
                                    "topicSysFlag": 0, "writeQueueNums": 4}]
    assert route["filterServerTable"] == {}


def test_consumer_progress_of_a_group(broker_target, seeded):  # noqa: F811
    topic, group, r = seeded
    out = mqadmin(broker_target, "consumerProgress", "-g", group)
    lines = out.splitlines()
    assert lines[0].split() == ["#Topic", "#Broker", "Name", "#QID", "#Broker", "Offset", "#Consumer", "Offset",
                                "#Diff", "#LastTime"]
    per_queue = {int(row[2]): (int(row[3]), int(row[4]), int(row[5])) for row in rows(out, topic)}
    assert per_queue == {int(q): (n, n, 0) for q, n in r["per_queue"].items()}
    # the group's retry queue is listed too (committed offset 0 by the push consumer's rebalance)
    assert [row[:6] for row in rows(out, f"%RETRY%{group}")] == [
        [f"%RETRY%{group}", broker_target.broker_name, "0", "0", "0", "0"]]
    assert "Diff Total: 0" in lines
    assert any(line.startswith("Consume TPS:") for line in lines)


def test_consumer_progress_all_groups(broker_target, seeded):  # noqa: F811
    _, group, _ = seeded
    out = mqadmin(broker_target, "consumerProgress")
    assert out.splitlines()[0].split() == ["#Group", "#Count", "#Version", "#Type", "#Model", "#TPS",
                                           "#Diff", "Total"]
    # the seed consumer has shut down: no connections, so no version/type/model; nothing left to consume.
    # TPS is the broker's pull rate of the group over the last minute (BrokerStatsManager), 0 or 1 here.
    [row] = rows(out, group)
    assert row[:3] == [group, "0", "OFFLINE"] and row[3].isdigit() and row[4] == "0", row


def test_cluster_list(broker_target, seeded):  # noqa: F811
    out = mqadmin(broker_target, "clusterList")
    assert out.splitlines()[0].split()[:6] == ["#Cluster", "Name", "#Broker", "Name", "#BID", "#Addr"]
    [row] = rows(out, broker_target.cluster)
    assert row[1:4] == [broker_target.broker_name, "0", broker_target.broker_addr]
    assert re.fullmatch(r"V\d+_\d+_\d+(_\w+)?", row[4]), row    # brokerVersionDesc from GET_BROKER_RUNTIME_INFO


def test_query_msg_by_key(broker_target, seeded):  # noqa: F811
    topic, _, r = seeded
    out = mqadmin(broker_target, "queryMsgByKey", "-t", topic, "-k", "SEED-7")
    assert out.splitlines()[0].split() == ["#Message", "ID", "#QID", "#Offset"]
    found = [line.split() for line in out.splitlines()[1:] if line.strip()]
    assert len(found) == 1
    msg_id, qid, offset = found[0]
    assert msg_id == r["msg_ids"]["SEED-7"]                  # the UNIQ_KEY msgId the producer got
    assert 0 <= int(offset) < r["per_queue"][qid]
