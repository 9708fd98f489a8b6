"""Our name server against the real Apache RocketMQ 4.9.8: a Java broker registers with it, mqadmin
and the Java client (bin/smoke) route through it, and every answer equals the Java name server's
(the same broker registers with both, so the Java name server is the oracle)."""

from __future__ import annotations

import os
import subprocess

import pytest

from rocketstream.remoting import RequestCode, ResponseCode
from rocketstream.remoting.json_body import loads
from tests.namesrv.conftest import invoke, start_broker, start_ours, stop_ours, wait_until
from tests.realbroker import peers


def _run(home, *argv):
    """mqadmin or the shared dist's smoke program (tests/realbroker/peers.py command lines)."""
    command = peers.mqadmin_command if argv[0] == "mqadmin" else peers.smoke_command
    return subprocess.Popen(command(home, *argv[1:]), env=peers.server_env(peers.find_dist()),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _collect(proc, timeout=120):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        raise AssertionError(f"timed out:\n{out[-3000:]}") from None
    return proc.returncode, out


def _topics(addr):
    resp = invoke(addr, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert resp.code == ResponseCode.SUCCESS
    return set(loads(resp.body)["topicList"])


def _registered(interop):
    """Both name servers know broker-a (the broker registers with each in parallel)."""
    def known(addr):
        return b"broker-a" in (invoke(addr, RequestCode.GET_BROKER_CLUSTER_INFO).body or b"")
    wait_until(lambda: known(interop.ours.addr) and known(interop.java_addr), 30, "broker-a to register")


def test_java_broker_registers_with_our_name_server(interop):
    _registered(interop)
    ours = invoke(interop.ours.addr, RequestCode.GET_BROKER_CLUSTER_INFO)
    java = invoke(interop.java_addr, RequestCode.GET_BROKER_CLUSTER_INFO)
    assert ours.code == ResponseCode.SUCCESS
    info = loads(ours.body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {0: interop.broker_addr}
    assert ours.body == java.body   # byte for byte, bare integer keys included


def test_routes_equal_the_java_name_servers(interop):
    _registered(interop)
    topics = wait_until(lambda: _topics(interop.ours.addr) == _topics(interop.java_addr) and _topics(interop.java_addr),
                        30, "the same topic list on both name servers")
    assert {"TBW102", "SELF_TEST_TOPIC", "DefaultCluster", "broker-a"} <= topics
    for topic in sorted(topics) + ["NoSuchTopic"]:
        for version, std in ((409, None), (100, None), (100, "true")):   # standard JSON from V4_9_4 or on request
            fields = {"topic": topic, "acceptStandardJsonOnly": std}
            a = invoke(interop.ours.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, fields, version=version)
            b = invoke(interop.java_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, fields, version=version)
            assert (a.code, a.remark, a.body) == (b.code, b.remark, b.body), (topic, version, std)


def test_mqadmin_cluster_list_and_topic_route(interop):
    _registered(interop)
    home = interop.home
    procs = {(cmd, who): _run(home, "mqadmin", *argv, "-n", addr)
             for who, addr in (("ours", interop.ours.addr), ("java", interop.java_addr))
             for cmd, argv in (("clusterList", ["clusterList"]), ("topicRoute", ["topicRoute", "-t", "TBW102"]))}
    procs[("missing", "ours")] = _run(home, "mqadmin", "topicRoute", "-t", "NoSuchTopic", "-n", interop.ours.addr)
    out = {key: _collect(p) for key, p in procs.items()}
    for key in [k for k in out if k[0] != "missing"]:
        assert out[key][0] == 0, f"mqadmin {key}: {out[key][1][-2000:]}"

    def brokers(text):   # the runtime-stat columns (TPS, hours) differ between two calls; the rest must not
        return [line.split()[:5] for line in text.splitlines() if line.startswith("DefaultCluster")]
    assert brokers(out[("clusterList", "ours")][1]) == brokers(out[("clusterList", "java")][1]) == \
        [["DefaultCluster", "broker-a", "0", interop.broker_addr, "V4_9_8"]]
    assert out[("topicRoute", "ours")][1] == out[("topicRoute", "java")][1]
    assert f'0:"{interop.broker_addr}"' in out[("topicRoute", "ours")][1]
    assert "CODE: 17" in out[("missing", "ours")][1]


def test_java_smoke_routes_through_our_name_server(interop):
    try:
        proc = _run(interop.home, "smoke", "--namesrv", interop.ours.addr, "--timeout-s", "90")
    except peers.JavaUnavailable as exc:      # an Apache binary release has no smoke program
        pytest.skip(str(exc))
    code, text = _collect(proc, 150)
    assert code == 0 and "SMOKE PASSED" in text, text[-4000:]
    # the consumer groups' %RETRY% topics, created by the broker and registered, route as Java routes them
    # (the broker registers new topics with both name servers in parallel, some of them oneway)
    wait_until(lambda: _topics(interop.ours.addr) == _topics(interop.java_addr), 30, "the same topic lists")
    retry = {t for t in _topics(interop.ours.addr) if t.startswith("%RETRY%Smoke")}
    assert len(retry) == 2, retry
    for topic in retry | {t for t in _topics(interop.java_addr) if t.startswith("SmokeTopic")}:
        a = invoke(interop.ours.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        b = invoke(interop.java_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        assert a.code == ResponseCode.SUCCESS and a.body == b.body


def test_compressed_registration_and_a_killed_broker_leaving_the_routes_at_once(interop):
    # compressedRegister=true: RegisterBrokerBody travels as the zlib form (RegisterBrokerBody.encode(true))
    broker = start_broker(interop.home, interop.ours.addr, "broker-b", cluster="OtherCluster",
                          extra_conf={"compressedRegister": "true"})
    try:
        wait_until(lambda: b"broker-b" in invoke(interop.ours.addr, RequestCode.GET_BROKER_CLUSTER_INFO).body,
                   30, "broker-b to register")
        info = loads(invoke(interop.ours.addr, RequestCode.GET_BROKER_CLUSTER_INFO).body)
        assert info["clusterAddrTable"]["OtherCluster"] == ["broker-b"]
        assert invoke(interop.ours.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "broker-b"}).code == 0
        tbw = loads(invoke(interop.ours.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}).body)
        assert {q["brokerName"]: (q["perm"], q["readQueueNums"], q["writeQueueNums"]) for q in tbw["queueDatas"]} \
            == {"broker-a": (7, 8, 8), "broker-b": (7, 8, 8)}
    finally:
        broker.kill()
    # the registration connection closed: BrokerHousekeepingService.onChannelDestroy, not the 120 s expiry
    wait_until(lambda: invoke(interop.ours.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                              {"topic": "broker-b"}).code == ResponseCode.TOPIC_NOT_EXIST, 10, "broker-b to leave")
    info = loads(invoke(interop.ours.addr, RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert "OtherCluster" not in info["clusterAddrTable"] and "broker-a" in info["brokerAddrTable"]


def test_sigterm_stops_cleanly_and_bad_input_is_survived(tmp_path):
    ours = start_ours(tmp_path)
    try:
        import socket
        with socket.create_connection(("127.0.0.1", ours.port)) as s:   # garbage, then a hang-up
            s.sendall(b"\x00\x00\x00\x10garbage-garbage!" + os.urandom(64))
        resp = invoke(ours.addr, 4242)
        assert (resp.code, resp.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 4242 not supported")
        resp = invoke(ours.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {})
        assert resp.code == ResponseCode.SYSTEM_ERROR and "<topic>" in resp.remark
    finally:
        assert stop_ours(ours) == 0
    log = ours.log.read_text()
    assert "boot success" in log and "stopped" in log and "Traceback" not in log
