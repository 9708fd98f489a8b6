"""RouteInfoManager and DefaultRequestProcessor without a network: registration, routes, expiry,
channel close, bodies in fastjson's dialect, and requests with missing or bad fields."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from rocketstream.errors import BodyError, HeaderFieldError
from rocketstream.namesrv.kv_config import KVConfigManager
from rocketstream.namesrv.processor import DefaultRequestProcessor, crc32_rocketmq, decode_register_broker_body
from rocketstream.namesrv.route_info import DataVersion, RouteInfoManager, TopicConfig
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode

A = "127.0.0.1:10911"


class FakeChannel:
    def __init__(self, addr="127.0.0.1:50000"):
        self.addr = addr
        self.closed_with = None

    def close(self, reason="x"):
        self.closed_with = reason


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def configs(*specs):
    return {name: TopicConfig(name, r, w, perm) for name, r, w, perm in specs}


def test_register_route_cluster_and_topic_list():
    m = RouteInfoManager()
    ch = FakeChannel()
    m.register_broker("DefaultCluster", A, "broker-a", 0, "127.0.0.1:10912", DataVersion(1, 1),
                      configs(("TBW102", 8, 8, 7), ("T", 4, 4, 6), ("%RETRY%g", 1, 1, 6)), [], ch)
    route = m.pickup_topic_route_data("T")
    assert route == {"brokerDatas": [{"brokerAddrs": {0: A}, "brokerName": "broker-a", "cluster": "DefaultCluster"}],
                     "filterServerTable": {},
                     "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                                     "writeQueueNums": 4}]}
    assert m.pickup_topic_route_data("nope") is None
    assert m.get_all_topic_list() == ["%RETRY%g", "T", "TBW102"]
    assert m.get_all_cluster_info()["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}


def test_queue_data_only_from_masters_and_only_when_the_data_version_changes():
    m = RouteInfoManager()
    ch = FakeChannel()
    m.register_broker("c", A, "b", 0, None, DataVersion(1, 1), configs(("T", 4, 4, 6)), None, ch)
    # same DataVersion: a changed config is ignored (isBrokerTopicConfigChanged is false)
    m.register_broker("c", A, "b", 0, None, DataVersion(1, 1), configs(("T", 8, 8, 6)), None, ch)
    assert m.pickup_topic_route_data("T")["queueDatas"][0]["readQueueNums"] == 4
    # incremental registration (registerIncrementBrokerData): only the new topic, the others stay
    m.register_broker("c", A, "b", 0, None, DataVersion(1, 2), configs(("U", 2, 2, 6)), None, ch)
    assert m.get_all_topic_list() == ["T", "U"]
    # a slave adds its address but no queue data
    m.register_broker("c", "127.0.0.1:20911", "b", 1, None, DataVersion(9, 9), configs(("S", 1, 1, 6)), None,
                      FakeChannel("127.0.0.1:50001"))
    assert m.pickup_topic_route_data("S") is None
    assert m.pickup_topic_route_data("T")["brokerDatas"][0]["brokerAddrs"] == {0: A, 1: "127.0.0.1:20911"}


def test_slave_gets_master_ha_address():
    m = RouteInfoManager()
    m.register_broker("c", A, "b", 0, "127.0.0.1:10912", DataVersion(), {}, None, FakeChannel())
    r = m.register_broker("c", "127.0.0.1:20911", "b", 1, "x", DataVersion(), {}, None, FakeChannel("s"))
    assert (r.master_addr, r.ha_server_addr) == (A, "127.0.0.1:10912")


def test_expiry_scan_drops_silent_brokers_and_their_topics():
    clock = Clock()
    m = RouteInfoManager(broker_expiry_s=120, clock=clock)
    ch = FakeChannel()
    m.register_broker("c", A, "b", 0, None, DataVersion(1, 1), configs(("T", 4, 4, 6)), None, ch)
    clock.now += 119
    assert m.scan_not_active_broker() == []
    m.register_broker("c", A, "b", 0, None, DataVersion(1, 1), configs(("T", 4, 4, 6)), None, ch)   # 30 s refresh
    clock.now += 119
    assert m.scan_not_active_broker() == []
    clock.now += 2
    assert m.scan_not_active_broker() == [A]
    assert ch.closed_with is not None
    assert m.pickup_topic_route_data("T") is None and m.get_all_cluster_info() == {"brokerAddrTable": {},
                                                                                   "clusterAddrTable": {}}


def test_channel_close_and_unregister():
    m = RouteInfoManager()
    ch_a, ch_b = FakeChannel("x:1"), FakeChannel("x:2")
    m.register_broker("c", A, "a", 0, None, DataVersion(1, 1), configs(("T", 4, 4, 6)), None, ch_a)
    m.register_broker("c", "127.0.0.1:30911", "b", 0, None, DataVersion(1, 1), configs(("T", 2, 2, 6)), None, ch_b)
    assert len(m.pickup_topic_route_data("T")["queueDatas"]) == 2
    m.on_channel_destroy("x:1", ch_a)
    assert [q["brokerName"] for q in m.pickup_topic_route_data("T")["queueDatas"]] == ["b"]
    m.on_channel_destroy("not-a-broker:9", FakeChannel("not-a-broker:9"))   # a client's connection: no effect
    m.unregister_broker("c", "127.0.0.1:30911", "b", 0)
    assert m.pickup_topic_route_data("T") is None and not m.cluster_addr_table and not m.broker_live_table


# ----------------------------------------------------------------------------------- processor
def _processor():
    m = RouteInfoManager()
    return DefaultRequestProcessor(m, KVConfigManager()), m


def _register_body(topics, counter=1):
    return json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": counter, "timestamp": 1700000000000},
        "topicConfigTable": {t: {"order": False, "perm": p, "readQueueNums": q, "topicFilterType": "SINGLE_TAG",
                                 "topicName": t, "topicSysFlag": 0, "writeQueueNums": q}
                             for t, q, p in topics}}}).encode()


def _register(p, body, **extra):
    fields = {"brokerName": "broker-a", "brokerAddr": A, "clusterName": "DefaultCluster",
              "haServerAddr": "127.0.0.1:10912", "brokerId": 0, "compressed": False, "bodyCrc32": crc32_rocketmq(body)}
    fields.update(extra)
    req = RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body)
    return p(FakeChannel(), req)


def test_processor_bodies_are_written_as_the_java_name_server_writes_them():
    p, _ = _processor()
    assert _register(p, _register_body([("TBW102", 8, 7), ("T", 4, 6)])).code == ResponseCode.SUCCESS
    old = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    old.version = 100
    assert p(None, old).body == (b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a",'
                                 b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":'
                                 b'"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}')
    new = p(None, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}))   # version 409
    assert b'"brokerAddrs":{"0":"127.0.0.1:10911"}' in new.body
    cluster = p(None, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert cluster.body == (b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":'
                            b'"broker-a","cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}')
    topics = p(None, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert topics.body == b'{"topicList":["T","TBW102"]}'
    missing = p(None, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "nope"}))
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "for the topic: nope" in missing.remark


def test_register_crc_mismatch_compressed_body_and_no_body():
    p, m = _processor()
    body = _register_body([("T", 4, 6)])
    bad = _register(p, body, bodyCrc32=crc32_rocketmq(body) ^ 1)
    assert (bad.code, bad.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    # RegisterBrokerBody.encode(true): zlib of length-prefixed DataVersion, topic count, "name r w perm type", filters
    parts = [b'{"counter":3,"timestamp":5}', struct.pack(">i", 1), b"Z 2 3 6 SINGLE_TAG", b"[]"]
    raw = b"".join((struct.pack(">i", len(x)) + x) if i != 1 else x for i, x in enumerate(parts))
    compressed = zlib.compress(raw, 9)
    assert _register(p, compressed, compressed=True).code == ResponseCode.SUCCESS
    assert m.topic_queue_table["Z"]["broker-a"].write_queue_nums == 3
    assert m.broker_live_table[A].data_version == DataVersion(5, 3)
    req = RemotingCommand.request(RequestCode.REGISTER_BROKER, {"brokerName": "b2", "brokerAddr": "h:1",
                                  "clusterName": "c", "haServerAddr": "h:2", "brokerId": 0})
    assert p(FakeChannel("y:1"), req).code == ResponseCode.SUCCESS   # no body: an empty registration
    assert "b2" in m.broker_addr_table


def test_bad_bodies_raise_body_error():
    for body in (b"{", b"[1]", b'{"topicConfigSerializeWrapper":{"topicConfigTable":[]}}',
                 b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":"x"}}}}'):
        with pytest.raises(BodyError):
            decode_register_broker_body(body, False)
    for body in (b"not zlib", zlib.compress(b"\x00\x00\x00\x50{}")):
        with pytest.raises(BodyError):
            decode_register_broker_body(body, True)


@pytest.mark.parametrize("code,fields,missing", [
    (RequestCode.GET_ROUTEINFO_BY_TOPIC, {}, "topic"),
    (RequestCode.REGISTER_BROKER, {"brokerName": "b"}, "brokerAddr"),
    (RequestCode.UNREGISTER_BROKER, {"brokerName": "b", "brokerAddr": "a", "clusterName": "c"}, "brokerId"),
    (RequestCode.PUT_KV_CONFIG, {"namespace": "n", "key": "k"}, "value"),
    (RequestCode.GET_TOPICS_BY_CLUSTER, {}, "cluster"),
])
def test_missing_header_fields_are_named(code, fields, missing):
    p, _ = _processor()
    with pytest.raises(HeaderFieldError, match=f"<{missing}>") as exc:
        p(FakeChannel(), RemotingCommand.request(code, fields))
    assert exc.value.field == missing


def test_bad_number_field_is_named():
    p, _ = _processor()
    with pytest.raises(HeaderFieldError, match="<brokerId> is not a number"):
        _register(p, _register_body([]), brokerId="zero")


def test_kv_config_and_data_version(tmp_path):
    m = RouteInfoManager()
    kv = KVConfigManager(tmp_path / "kvConfig.json")
    p = DefaultRequestProcessor(m, kv)
    put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T",
                                                              "value": "broker-a:4"})
    assert p(None, put).code == 0
    got = p(None, RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"}))
    assert got.ext_fields == {"value": "broker-a:4"}
    kv2 = KVConfigManager(tmp_path / "kvConfig.json")
    kv2.load()
    assert kv2.config_table == {"ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}}
    reg = _register(p, _register_body([("T", 4, 6)]))
    assert reg.body == b'{"table":{"T":"broker-a:4"}}'   # the order-topic KV table rides on the response
    miss = p(None, RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "x", "key": "y"}))
    assert (miss.code, miss.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: x Key: y")
    q = RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, {"brokerName": "broker-a", "brokerAddr": A,
                                "clusterName": "DefaultCluster", "brokerId": 0},
                                b'{"counter":1,"timestamp":1700000000000}')
    resp = p(None, q)
    assert resp.ext_fields == {"changed": "false"} and resp.body == b'{"counter":1,"timestamp":1700000000000}'
    q.body = b'{"counter":2,"timestamp":1700000000000}'
    assert p(None, q).ext_fields == {"changed": "true"}
    assert p(None, RemotingCommand.request(9999)).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
