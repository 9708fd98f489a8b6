"""The admin processor (rocketstream/broker/admin.py) against the real 4.9.8 broker's answers.

* ``test_matches_recorded_java_answers``: the scenario of tests/broker/admin_scenario.py played on our
  processor (fake controller over a real MessageStore, served by our RemotingServer) and compared with
  the answers a real broker gave to the same requests (tests/broker/data/admin_oracle.json).
* ``test_live_against_real_broker``: the same comparison with a real broker started now (needs Java).
* The rest pins behaviour the scenario does not reach (exact timestamps, relaying 307, config updates,
  subscription groups, stats).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest

from rocketstream.broker import admin
from rocketstream.broker.stats import BrokerStats, RateCounter
from rocketstream.remoting import RemotingCommand, RemotingServer, RequestCode, ResponseCode, connect
from rocketstream.remoting.json_body import loads
from tests.broker import admin_scenario as sc
from tests.broker.admin_fakes import ClientChannelInfo, ConsumerGroupInfo, Controller, SubscriptionData

DATA = Path(__file__).parent / "data" / "admin_oracle.json"


class _Chan:
    def __init__(self, addr: str = "127.0.0.1:40000") -> None:
        self.addr = addr


@pytest.fixture
def ctl(tmp_path):
    c = Controller(tmp_path / "store")
    proc = admin.register(c)
    c.proc = proc
    yield c
    c.store.close()


def call(c: Controller, code: int, fields: dict | None = None, body: bytes | None = None) -> RemotingCommand:
    resp = c.server.processors[code](_Chan(), RemotingCommand.request(code, fields, body))
    if asyncio.iscoroutine(resp):
        resp = asyncio.run(resp)
    return resp


def setup_ours(c: Controller) -> None:
    """admin_scenario's scenario on our side: the topic through our 17, messages straight into the store,
    offsets/heartbeat into the stand-in managers (core's processors do that in the real broker)."""
    resp = call(c, RequestCode.UPDATE_AND_CREATE_TOPIC, sc.CREATE)
    assert resp.code == 0, resp
    for qid, n in enumerate(sc.PER_QUEUE):
        c.put(sc.TOPIC, qid, n, tags="TagA")
    for qid, off in sc.COMMITS.items():
        c.offsets.commit_offset("127.0.0.1", sc.GROUP, sc.TOPIC, qid, off)
    info = ClientChannelInfo(_Chan("127.0.0.1:39360"), sc.CLIENT_ID, "PYTHON", 409)
    c.consumers.groups[sc.GROUP] = ConsumerGroupInfo(
        channels={sc.CLIENT_ID: info},
        subscriptions={sc.TOPIC: SubscriptionData(sc.TOPIC, "TagA", {"TagA"}, {sc.TAG_HASH}, sc.SUB_VERSION, "TAG")})
    c.producers.table[sc.PGROUP] = {sc.CLIENT_ID: info}
    c.subscription_groups.find_or_create(sc.GROUP, True)   # the Java broker auto-creates it on the heartbeat


async def ask_ours(c: Controller) -> dict[str, dict]:
    server = RemotingServer("127.0.0.1", 0, name="admin-test")
    server.processors.update(c.server.processors)
    await server.start()
    try:
        return await sc.ask_all(server.address)
    finally:
        await server.stop()


# answers whose remark is a Java exception text where ours names the header field
REMARK_DIFFERS = {"create_missing_perm"}


def compare(name: str, java: dict, ours: dict) -> None:
    assert ours["code"] == java["code"], (name, ours, java)
    if name not in REMARK_DIFFERS:
        assert ours["remark"] == java["remark"], name
    else:
        assert "perm" in ours["remark"]
    assert set(ours["ext"] or {}) == set(java["ext"] or {}), name
    assert (ours["ext"] is None) == (java["ext"] is None), name   # "extFields":{} vs none at all
    if name == "broker_config":
        java_names = {line.split("=", 1)[0] for line in java["body"].splitlines()}
        ours_names = {line.split("=", 1)[0] for line in ours["body"].splitlines()}
        shared = {"brokerName", "brokerClusterName", "brokerId", "brokerIP1", "listenPort", "namesrvAddr",
                  "autoCreateTopicEnable", "autoCreateSubscriptionGroup", "longPollingEnable",
                  "shortPollingTimeMills", "defaultTopicQueueNums", "brokerPermission", "storePathRootDir",
                  "mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "flushDiskType", "maxMessageSize",
                  "messageDelayLevel", "checkCRCOnRecover"}
        assert shared - {"namesrvAddr"} <= ours_names, (shared - ours_names)
        assert shared <= java_names
        assert json.loads(ours["ext"]["version"]).keys() == json.loads(java["ext"]["version"]).keys()
        return
    jb, ob = sc.body_doc(java), sc.body_doc(ours)
    if name == "runtime_info":
        ours_keys = {k.split("_/")[0] for k in ob["table"]}
        assert ours_keys <= set(jb["table"]), ours_keys - set(jb["table"])
        # what mqadmin clusterList / brokerStatus read
        assert {"brokerVersionDesc", "brokerVersion", "msgPutTotalTodayNow", "msgGetTotalTodayNow",
                "msgPutTotalTodayMorning", "msgGetTotalTodayMorning", "msgPutTotalYesterdayMorning",
                "msgGetTotalYesterdayMorning", "putTps", "getTransferedTps", "sendThreadPoolQueueSize",
                "pullThreadPoolQueueSize", "sendThreadPoolQueueHeadWaitTimeMills",
                "pullThreadPoolQueueHeadWaitTimeMills", "pageCacheLockTimeMills", "earliestMessageTimeStamp",
                "commitLogDiskRatio", "commitLogMaxOffset", "commitLogMinOffset", "bootTimestamp",
                "runtime"} <= ours_keys
        assert ob["table"]["brokerVersionDesc"] == "V4_9_8" and ob["table"]["brokerVersion"] == "409"
        assert re.fullmatch(r"[0-9.]+ [0-9.]+ [0-9.]+", ob["table"]["putTps"])
        return
    if name in ("all_topic_config", "all_subscription_group"):
        key = "topicConfigTable" if name == "all_topic_config" else "subscriptionGroupTable"
        assert ob.keys() == jb.keys()
        assert ob["dataVersion"].keys() == jb["dataVersion"].keys()
        for entry, value in jb[key].items():
            assert ob[key][entry] == value, (name, entry)
        return
    assert sc.normalize(ob) == sc.normalize(jb), name


def test_matches_recorded_java_answers(ctl):
    recorded = json.loads(DATA.read_text())["records"]
    assert set(recorded) == {name for name, _, _ in sc.REQUESTS}
    setup_ours(ctl)
    ours = asyncio.run(ask_ours(ctl))
    for name, _, _ in sc.REQUESTS:
        compare(name, recorded[name], ours[name])


def test_message_queue_keys_written_as_fastjson_objects(ctl):
    setup_ours(ctl)
    body = call(ctl, RequestCode.GET_TOPIC_STATS_INFO, {"topic": sc.TOPIC}).body
    text = body.decode()
    # bare object keys exactly as fastjson writes them (recorded answer has the same members)
    recorded = json.loads(DATA.read_text())["records"]["topic_stats"]["body"]
    key0 = '{"brokerName":"broker-a","queueId":0,"topic":"AdmT"}:{'
    assert key0 in text and key0 in recorded
    assert text.startswith('{"offsetTable":{{"brokerName":"broker-a","queueId":0,')
    assert len(text) == len(recorded)   # same members and values; store times have 13 digits on both
    # our order is by queue id, numerically (q10 after q9)
    call(ctl, RequestCode.UPDATE_AND_CREATE_TOPIC, dict(sc.CREATE, topic="Wide", readQueueNums=12, writeQueueNums=12))
    wide = call(ctl, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Wide"}).body.decode()
    ids = [int(m) for m in re.findall(r'"queueId":(\d+)', wide)]
    assert ids == list(range(12))


def test_topic_stats_and_consume_stats_values(ctl):
    setup_ours(ctl)
    store = ctl.store
    stats = loads(call(ctl, RequestCode.GET_TOPIC_STATS_INFO, {"topic": sc.TOPIC}).body)["offsetTable"]
    by_q = {k["queueId"]: v for k, v in stats.items()}
    for qid, n in enumerate(sc.PER_QUEUE):
        assert by_q[qid] == {"minOffset": 0, "maxOffset": n,
                             "lastUpdateTimestamp": store.last_store_timestamp(sc.TOPIC, qid)}
    cs = loads(call(ctl, RequestCode.GET_CONSUME_STATS, {"consumerGroup": sc.GROUP}).body)
    by_q = {k["queueId"]: v for k, v in cs["offsetTable"].items()}
    assert set(by_q) == {0, 1, 2, 3}
    assert by_q[0]["lastTimestamp"] == store.last_store_timestamp(sc.TOPIC, 0)   # offset 5 -> message 4
    # offset 3 on queue 1: the store time of message 2, read from the consume queue and commit log
    unit = store.read_cq_units(sc.TOPIC, 1, 2, 3)[0]
    assert by_q[1] == {"brokerOffset": 4, "consumerOffset": 3,
                       "lastTimestamp": store.commit_log.store_timestamp_at(int(unit["offset"]))}
    assert by_q[2] == {"brokerOffset": 3, "consumerOffset": 0, "lastTimestamp": 0}
    assert by_q[3] == {"brokerOffset": 2, "consumerOffset": 0, "lastTimestamp": 0}   # never committed
    assert cs["consumeTps"] == 0.0


def test_consume_stats_skips_topics_the_online_group_does_not_subscribe(ctl):
    setup_ours(ctl)
    call(ctl, RequestCode.UPDATE_AND_CREATE_TOPIC, dict(sc.CREATE, topic="Other"))
    ctl.offsets.commit_offset("h", sc.GROUP, "Other", 0, 0)
    cs = loads(call(ctl, RequestCode.GET_CONSUME_STATS, {"consumerGroup": sc.GROUP}).body)
    assert {k["topic"] for k in cs["offsetTable"]} == {sc.TOPIC}
    del ctl.consumers.groups[sc.GROUP]   # offline: every topic with offsets counts
    cs = loads(call(ctl, RequestCode.GET_CONSUME_STATS, {"consumerGroup": sc.GROUP}).body)
    assert {k["topic"] for k in cs["offsetTable"]} == {sc.TOPIC, "Other"}
    # a topic without config is skipped
    ctl.offsets.commit_offset("h", sc.GROUP, "Gone", 0, 1)
    cs = loads(call(ctl, RequestCode.GET_CONSUME_STATS, {"consumerGroup": sc.GROUP, "topic": "Gone"}).body)
    assert cs["offsetTable"] == {}


def test_create_and_delete_topic(ctl):
    resp = call(ctl, RequestCode.UPDATE_AND_CREATE_TOPIC, dict(sc.CREATE, topic="T1", readQueueNums=2,
                                                                writeQueueNums=3, perm=4, topicSysFlag=1))
    assert (resp.code, resp.remark) == (0, "not set any response code")
    tc = ctl.topics.get("T1")
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag) == (2, 3, 4, 1)
    counter = ctl.topics.data_version.counter
    body = loads(call(ctl, RequestCode.GET_ALL_TOPIC_CONFIG).body)
    assert body["dataVersion"]["counter"] == counter
    assert body["topicConfigTable"]["T1"] == {"order": False, "perm": 4, "readQueueNums": 2,
                                              "topicFilterType": "SINGLE_TAG", "topicName": "T1",
                                              "topicSysFlag": 1, "writeQueueNums": 3}
    assert call(ctl, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T1"}).code == 0
    assert ctl.topics.get("T1") is None
    for bad, remark in (("a" * 128, "The specified topic is longer than topic max length."),
                        ("rmq_sys_x", "The topic[rmq_sys_x] is conflict with system topic."),
                        ("DefaultCluster", "The topic[DefaultCluster] is conflict with system topic."),
                        ("broker-a", "The topic[broker-a] is conflict with system topic."),
                        ("é", "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$")):
        resp = call(ctl, RequestCode.UPDATE_AND_CREATE_TOPIC, dict(sc.CREATE, topic=bad))
        assert (resp.code, resp.remark) == (1, remark), bad
    assert ctl.topics.get("a" * 128) is None


def test_create_topic_bad_headers_name_the_field(ctl):
    from rocketstream.errors import HeaderFieldError
    with pytest.raises(HeaderFieldError, match="topicFilterType"):
        call(ctl, RequestCode.UPDATE_AND_CREATE_TOPIC, dict(sc.CREATE, topicFilterType="NOPE"))
    with pytest.raises(HeaderFieldError, match="readQueueNums"):
        call(ctl, RequestCode.UPDATE_AND_CREATE_TOPIC, dict(sc.CREATE, readQueueNums="x"))
    with pytest.raises(HeaderFieldError, match="writeQueueNums"):
        call(ctl, RequestCode.UPDATE_AND_CREATE_TOPIC, dict(sc.CREATE, writeQueueNums=-1))


def test_broker_config_update_and_get(ctl):
    before = call(ctl, RequestCode.GET_BROKER_CONFIG)
    props = dict(line.split("=", 1) for line in before.body.decode().splitlines())
    assert props["brokerName"] == "broker-a" and props["brokerIP1"] == "127.0.0.1"
    assert props["longPollingEnable"] == "true" and props["mappedFileSizeCommitLog"] == str(1 << 20)
    v0 = json.loads(before.ext_fields["version"])["counter"]
    resp = call(ctl, RequestCode.UPDATE_BROKER_CONFIG, body=b"longPollingEnable=false\nshortPollingTimeMills=250\n"
                                                            b"noSuchProperty=1\n")
    assert resp.code == 0
    assert ctl.config.long_polling_enable is False and ctl.config.short_polling_time_mills == 250
    after = call(ctl, RequestCode.GET_BROKER_CONFIG)
    assert "shortPollingTimeMills=250\n" in after.body.decode() and "noSuchProperty" not in after.body.decode()
    assert json.loads(after.ext_fields["version"])["counter"] == v0 + 1
    resp = call(ctl, RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerConfigPath=/etc/x\nlistenPort=1\n")
    assert (resp.code, resp.remark) == (16, "Can not update config in black list.")
    assert ctl.config.listen_port == 10911
    registrations = ctl.registrations
    resp = call(ctl, RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=4\n")
    assert resp.code == 0 and ctl.config.broker_permission == 4 and ctl.registrations == registrations + 1


def test_subscription_groups(ctl):
    cfg = {"groupName": "G1", "retryMaxTimes": 3, "consumeBroadcastEnable": False, "retryQueueNums": 2}
    assert call(ctl, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(cfg).encode()).code == 0
    table = loads(call(ctl, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)["subscriptionGroupTable"]
    assert table["G1"] == {"brokerId": 0, "consumeBroadcastEnable": False, "consumeEnable": True,
                           "consumeFromMinEnable": True, "groupName": "G1", "notifyConsumerIdsChangedEnable": True,
                           "retryMaxTimes": 3, "retryQueueNums": 2, "whichBrokerWhenConsumeSlowly": 1}
    ctl.offsets.commit_offset("h", "G1", "T", 0, 7)
    assert call(ctl, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G1"}).code == 0
    assert ctl.subscription_groups.get("G1") is None and ctl.offsets.query_offset("G1", "T", 0) == 7
    call(ctl, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(cfg).encode())
    call(ctl, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G1", "removeOffset": True})
    assert ctl.offsets.query_offset("G1", "T", 0) == -1
    from rocketstream.errors import BodyError
    with pytest.raises(BodyError, match="retryMaxTimes"):
        call(ctl, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
             body=json.dumps({"groupName": "G2", "retryMaxTimes": "many"}).encode())


def test_offset_tables_and_broker_consume_stats(ctl):
    setup_ours(ctl)
    ctl.schedule.table = {1: 4, 3: 0}
    assert call(ctl, RequestCode.GET_ALL_DELAY_OFFSET).body == b'{"offsetTable":{1:4,3:0}}'
    ctl.schedule = None   # no schedule service wired: nothing is delayed
    assert call(ctl, RequestCode.GET_ALL_DELAY_OFFSET).body == b'{"offsetTable":{}}'
    assert call(ctl, RequestCode.GET_ALL_CONSUMER_OFFSET).body == b'{"offsetTable":{"AdmT@AdmG":{0:5,1:3,2:0}}}'
    resp = call(ctl, RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": False})
    doc = loads(resp.body)
    assert doc["brokerAddr"] == "127.0.0.1:10911"
    # lag: (5-5) + (4-3) + (3-0) + (2-0)
    assert doc["totalDiff"] == 6
    groups = {next(iter(entry)): entry[next(iter(entry))] for entry in doc["consumeStatsList"]}
    assert set(groups) == {sc.GROUP, "SELF_TEST_C_GROUP", "TOOLS_CONSUMER"} and groups["TOOLS_CONSUMER"] == []
    assert len(groups[sc.GROUP]) == 1 and len(groups[sc.GROUP][0]["offsetTable"]) == 4
    assert call(ctl, RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": True}).body.count(b"offsetTable") == 0
    from rocketstream.errors import HeaderFieldError
    with pytest.raises(HeaderFieldError, match="isOrder"):
        call(ctl, RequestCode.GET_BROKER_CONSUME_STATS)


def test_runtime_info_counts_and_rates(ctl):
    stats: BrokerStats = ctl.stats
    ctl.put(sc.TOPIC, 0, 3)
    stats.on_put(sc.TOPIC, 3, 300)
    stats.on_get("G", sc.TOPIC, 2)
    table = loads(call(ctl, RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]
    assert table["msgPutTotalTodayNow"] == "3" and table["msgGetTotalTodayNow"] == "2"
    assert table["putMessageSizeTotal"] == "300" and table["putMessageAverageSize"] == "100.0"
    assert table["commitLogMaxOffset"] == str(ctl.store.commit_log_max_offset()) != "0"
    assert int(table["earliestMessageTimeStamp"]) == ctl.store.commit_log.store_timestamp_at(0) > 0
    assert re.fullmatch(r"Total : [0-9.]+ [KMGTPE]iB, Free : [0-9.]+ [KMGTPE]?i?B\.", table["commitLogDirCapacity"])
    assert re.fullmatch(r"\[ 0 days, 0 hours, 0 minutes, \d+ seconds \]", table["runtime"])


def test_rate_counter_windows():
    now = [1000.0]
    rc = RateCounter(clock=lambda: now[0])
    for sec in range(60):   # 10 messages a second for a minute
        now[0] = 1000.0 + sec
        rc.add(10)
    now[0] = 1060.0
    assert rc.total == 600
    assert rc.tps(10) == 10.0 and rc.tps(60) == 10.0 and rc.tps(600) == 1.0
    now[0] = 2000.0   # long idle: everything expired from the windows
    rc.add(1)
    assert rc.tps(600) == 0.0 and rc.total == 601
    stats = BrokerStats(clock=lambda: now[0])
    stats.on_get("G", "T", 120)
    now[0] = 2001.0
    assert stats.group_get_tps("G", "T") == 2.0 and stats.group_get_tps("G", "X") == 0.0
    assert BrokerStats.tps_triple(stats.get) == "12.0 2.0 0.2"


def test_java_number_formats(tmp_path):
    assert admin.human_readable_bytes(0) == "0 B"
    assert admin.human_readable_bytes(1023) == "1023 B"
    assert admin.human_readable_bytes(1024) == "1.0 KiB"
    assert admin.human_readable_bytes(270582939648) == "252.0 GiB"
    assert 0 <= admin.disk_used_ratio(tmp_path) <= 1
    assert admin.disk_used_ratio(tmp_path / "missing") == -1.0


async def _relay(ctl, consumer_handler, timeout_s=None):
    """An admin client asks our server for 307; the consumer (a real client connection registered as
    the group's channel) answers with ``consumer_handler``."""
    server = RemotingServer("127.0.0.1", 0, name="admin-relay")
    server.processors.update(ctl.server.processors)
    await server.start()
    try:
        consumer = await connect(server.address, on_request=consumer_handler)
        await consumer.invoke(RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET))   # server sees it now
        server_side = next(iter(server.channels))
        info = ClientChannelInfo(server_side, "127.0.0.1@c1", "JAVA", 409)
        ctl.consumers.groups["G"] = ConsumerGroupInfo(channels={"127.0.0.1@c1": info})
        adm = await connect(server.address)
        fields = {"consumerGroup": "G", "clientId": "127.0.0.1@c1", "jstackEnable": False}
        resp = await adm.invoke(RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, fields), 5)
        await adm.aclose()
        await consumer.aclose()
        return resp
    finally:
        await server.stop()


def test_consumer_running_info_is_relayed(ctl):
    seen = []

    def handler(channel, req):
        seen.append((req.code, dict(req.ext_fields)))
        return req.response(0, body=b'{"jstack":"x","properties":{"PROP_CLIENT_VERSION":"V4_9_8"}}')

    resp = asyncio.run(_relay(ctl, handler))
    assert resp.code == 0 and resp.body == b'{"jstack":"x","properties":{"PROP_CLIENT_VERSION":"V4_9_8"}}'
    assert seen == [(307, {"consumerGroup": "G", "clientId": "127.0.0.1@c1", "jstackEnable": "false"})]


def test_consumer_running_info_timeout_and_old_client(ctl, monkeypatch):
    monkeypatch.setattr(admin, "CALL_CONSUMER_TIMEOUT_S", 0.2)

    async def slow(channel, req):
        await asyncio.sleep(2)
        return req.response(0)

    resp = asyncio.run(_relay(ctl, slow))
    assert resp.code == ResponseCode.CONSUME_MSG_TIMEOUT
    assert resp.remark.startswith("consumer <G> <127.0.0.1@c1> Timeout")
    ctl.consumers.groups["G"] = ConsumerGroupInfo(channels={"c": ClientChannelInfo(_Chan(), "c", "JAVA", 10)})
    resp = call(ctl, RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "G", "clientId": "c"})
    assert resp.code == 1 and "too low" in resp.remark


# --------------------------------------------------------------------------------- live (Java)
# The session's real 4.9.8 broker (tests/conftest.py ``java_broker``, shared with the client and Spark
# tests): the scenario's topic and groups are its own; the broker-wide tables (every group's offsets, the
# delay levels' offsets) also hold other tests' rows, so those two answers are compared on the scenario's
# rows here - test_matches_recorded_java_answers compares them whole with a fresh broker's recorded answers.
SHARED_TABLES = {"all_consumer_offset": f"{sc.TOPIC}@", "all_delay_offset": None}


def compare_shared_table(name: str, java: dict, ours: dict) -> None:
    assert (ours["code"], ours["remark"], ours["ext"]) == (java["code"], java["remark"], java["ext"]), name
    jb, ob = sc.body_doc(java), sc.body_doc(ours)
    prefix = SHARED_TABLES[name]
    rows = {k: v for k, v in jb["offsetTable"].items() if prefix is not None and k.startswith(prefix)}
    assert jb.keys() == ob.keys(), name
    assert sc.normalize(ob) == sc.normalize({**jb, "offsetTable": rows}), name


@pytest.fixture(scope="module")
def real_broker(java_broker):
    return java_broker.broker_addr


def test_live_against_real_broker(real_broker, ctl):
    async def java_side():
        hb = await sc.setup_real(real_broker)
        try:
            # a 4.9.8 broker answers GET_BROKER_RUNTIME_INFO with code 1 (NoSuchElementException from
            # BrokerStatsManager's empty snapshot list) until its first stats sample: wait for one
            deadline = time.monotonic() + 60
            while True:
                resp = await hb.invoke(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 10)
                if resp.code == 0 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(1)
            return await sc.ask_all(real_broker)
        finally:
            await hb.aclose()
    java = sc.trim(asyncio.run(java_side()))
    setup_ours(ctl)
    ours = asyncio.run(ask_ours(ctl))
    for name, _, _ in sc.REQUESTS:
        (compare_shared_table if name in SHARED_TABLES else compare)(name, java[name], ours[name])
