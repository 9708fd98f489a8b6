"""rocketstream.broker.acl: plain_acl.yml, AclClientRPCHook signatures and PlainPermissionManager decisions.

Parity with Java is checked three ways: tests/java/AclProbe.java signs requests with the 4.9.8
AclClientRPCHook (our signatures must equal its), the same program sends requests to a real 4.9.8 broker
started with aclEnable=true and our plain_acl.yml (our hook must refuse exactly what it refuses, with the
same code and remark), and tests/java/AclScenario.java (a signed DefaultMQProducer) against that broker.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstream.broker import acl
from rocketstream.errors import AclConfigError
from rocketstream.remoting.codes import RequestCode, ResponseCode
from rocketstream.remoting.command import ONEWAY_FLAG, RemotingCommand
from tests.realbroker import acl_peers, peers

REPO = Path(__file__).resolve().parents[2]
JAVA_DIR = REPO / "tests" / "java"

ACL_YML = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
      - AclTopic=PUB|SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
  - accessKey: adminWithPerms
    secretKey: abcdefgh
    admin: true
    defaultTopicPerm: SUB
    topicPerms:
      - topicP=PUB
"""

AK, SK = "RocketMQ", "12345678"
LOCAL = "127.0.0.1:40000"
SIGNATURE_FAILED = ("org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=RocketMQ, "
                    "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:684)")


# ------------------------------------------------------------------------------------------ helpers
@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    p = tmp_path / "store" / "conf" / "plain_acl.yml"
    p.parent.mkdir(parents=True)
    p.write_text(ACL_YML)
    return p


@pytest.fixture
def hook(acl_file: Path) -> acl.AclHook:
    return acl.AclHook(SimpleNamespace(store_path_root_dir=acl_file.parents[1], acl_enable=True, acl_plain_file=None))


def chan(addr: str = LOCAL) -> SimpleNamespace:
    return SimpleNamespace(addr=addr)


def signed(code: int, fields: dict[str, str], body: bytes | None = None, ak: str | None = AK,
           sk: str = SK, oneway: bool = False) -> RemotingCommand:
    f = dict(fields)
    if ak is not None:
        acl.sign_fields(f, body, ak, sk)
    return RemotingCommand(code=code, ext_fields=f, body=body, opaque=7, flag=ONEWAY_FLAG if oneway else 0)


def denied_remark(message: str, frame: str) -> str:
    return acl.AccessDenied(message, frame).remark


def pull(topic: str, group: str, **kw) -> RemotingCommand:
    return signed(RequestCode.PULL_MESSAGE, {"consumerGroup": group, "topic": topic, "queueId": "0",
                                             "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "0",
                                             "commitOffset": "0", "suspendTimeoutMillis": "1000"}, **kw)


def send_v2(topic: str, group: str = "pg", **kw) -> RemotingCommand:
    return signed(RequestCode.SEND_MESSAGE_V2, {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": "0",
                                                "f": "0", "g": "1700000000000", "h": "0", "j": "0",
                                                "k": "false", "m": "false"}, body=b"hello", **kw)


def heartbeat(consumers: list[tuple[str, list[str]]], **kw) -> RemotingCommand:
    body = {"clientID": "c1", "producerDataSet": [],
            "consumerDataSet": [{"groupName": g, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                                 "subscriptionDataSet": [{"topic": t, "subString": "*"} for t in topics]}
                                for g, topics in consumers]}
    return signed(RequestCode.HEART_BEAT, {}, body=json.dumps(body).encode(), **kw)


# ------------------------------------------------------------------------------------------ signatures (no Java)
def test_signature_matches_aclclientrpchook_recipe() -> None:
    # values concatenated in key order (AccessKey sorts before lower-case keys), then the body
    fields = {"b": "T\u00e9", "a": "G", "AccessKey": "RocketMQ"}
    content = acl.signing_content(fields, b"hello")
    assert content == "RocketMQGT\u00e9".encode() + b"hello"
    assert acl.calc_signature(b"RocketMQ" + b"x", "12345678") != acl.calc_signature(b"RocketMQx", "12345679")
    # Java's TreeMap orders by UTF-16 code units: a surrogate pair (U+1F600) sorts before U+FFFF
    assert acl.java_sorted(["\uffff", "\U0001F600", "a"]) == ["a", "\U0001F600", "\uffff"]


def test_signature_excludes_only_signature_and_unique_key_flag_on_the_broker() -> None:
    f = acl.sign_fields({"topic": "topicB", "_UNIQUE_KEY_QUERY": "false"}, None, AK, SK)
    req = RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields=f)
    parsed = acl.parse_request(req, LOCAL)
    assert parsed.content == b"RocketMQtopicB"    # the client signed "RocketMQfalsetopicB"
    assert acl.calc_signature(parsed.content, SK) != f["Signature"]


# ------------------------------------------------------------------------------------------ decisions
def test_allowed_and_denied_per_code(hook: acl.AclHook) -> None:
    assert hook(chan(), send_v2("topicB")) is None
    assert hook(chan(), send_v2("AclTopic")) is None
    r = hook(chan(), send_v2("topicA"))
    assert r is not None and r.code == ResponseCode.SYSTEM_ERROR and r.opaque == 7 and r.is_response
    assert r.remark == denied_remark("No default permission for topic:topicA", acl.FRAME_RESOURCE_PERM)
    # SUB-only topic: no PUB; a topic with no entry falls to defaultTopicPerm DENY
    assert hook(chan(), send_v2("topicC")).remark == denied_remark("No default permission for topic:topicC",
                                                                   acl.FRAME_RESOURCE_PERM)
    assert hook(chan(), send_v2("other")).remark == denied_remark("No default permission for topic:other",
                                                                  acl.FRAME_DEFAULT_PERM)
    # pull needs SUB on the topic and on %RETRY%group (defaultGroupPerm SUB covers unknown groups)
    assert hook(chan(), pull("topicC", "someGroup")) is None
    assert hook(chan(), pull("topicC", "groupA")).remark == denied_remark("No default permission for group:groupA",
                                                                          acl.FRAME_RESOURCE_PERM)
    # a send to a retry topic checks the producer group's retry topic for SUB (V2: 'a' is the group)
    assert hook(chan(), send_v2("%RETRY%groupC", group="groupC")) is None
    assert hook(chan(), send_v2("%RETRY%groupA", group="groupA")).remark.startswith(
        "org.apache.rocketmq.acl.common.AclException: No default permission for group:groupA")
    # send back, offsets, consumer list, unregister: the group
    for code in (RequestCode.CONSUMER_SEND_MSG_BACK,):
        assert hook(chan(), signed(code, {"group": "groupA", "offset": "1"})) is not None
        assert hook(chan(), signed(code, {"group": "groupB", "offset": "1"})) is None
    for code in (RequestCode.GET_CONSUMER_LIST_BY_GROUP, RequestCode.UNREGISTER_CLIENT):
        assert hook(chan(), signed(code, {"consumerGroup": "groupA", "clientID": "c"})) is not None
        assert hook(chan(), signed(code, {"consumerGroup": "groupC", "clientID": "c"})) is None
        assert hook(chan(), signed(code, {"clientID": "c"})) is None      # no group: nothing to check
    off = {"consumerGroup": "groupC", "topic": "topicA", "queueId": "0", "commitOffset": "5"}
    assert hook(chan(), signed(RequestCode.UPDATE_CONSUMER_OFFSET, off)) is not None
    assert hook(chan(), signed(RequestCode.UPDATE_CONSUMER_OFFSET, {**off, "topic": "topicC"})) is None
    # heartbeat: every consumer group and subscription
    assert hook(chan(), heartbeat([("groupC", ["topicB", "topicC"])])) is None
    assert hook(chan(), heartbeat([("groupC", ["topicB", "topicA"])])) is not None
    assert hook(chan(), heartbeat([])) is None    # a producer's heartbeat: only the signature counts
    # a code 4.9.8 reads no resource for checks its topic here (test_acl_every_code.py walks them all)
    assert hook(chan(), signed(RequestCode.GET_MAX_OFFSET, {"topic": "topicA", "queueId": "0"})).remark == \
        denied_remark("No default permission for topic:topicA", acl.FRAME_RESOURCE_PERM)
    assert hook(chan(), signed(RequestCode.GET_MAX_OFFSET, {"topic": "topicC", "queueId": "0"})) is None
    # a code the broker does not serve: only the signature (it is answered REQUEST_CODE_NOT_SUPPORTED)
    assert hook(chan(), signed(RequestCode.QUERY_BROKER_OFFSET, {"topic": "topicA"})) is None


def test_signature_and_access_key_failures(hook: acl.AclHook) -> None:
    assert hook(chan(), send_v2("topicB", sk="wrongsecret")).remark == SIGNATURE_FAILED
    assert hook(chan(), send_v2("topicB", ak=None)).remark == denied_remark("No accessKey is configured",
                                                                            acl.FRAME_NO_ACCESS_KEY)
    assert hook(chan(), send_v2("topicB", ak="nobodyhere")).remark == denied_remark(
        "No acl config for nobodyhere", acl.FRAME_UNKNOWN_ACCESS_KEY)
    # a field changed after signing, or the body
    req = send_v2("topicB")
    req.ext_fields["d"] = "5"
    assert hook(chan(), req).remark == SIGNATURE_FAILED
    req = send_v2("topicB")
    req.body = b"hellO"
    assert hook(chan(), req).remark == SIGNATURE_FAILED
    # no extFields at all
    assert hook(chan(), RemotingCommand(code=RequestCode.HEART_BEAT)).remark == denied_remark(
        "No accessKey is configured", acl.FRAME_NO_ACCESS_KEY)


def test_admin_codes(hook: acl.AclHook) -> None:
    create = {"topic": "newT", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}
    for code in sorted(acl.ADMIN_CODES):
        r = hook(chan(), signed(code, create))
        assert r is not None and r.remark == denied_remark(
            f"Need admin permission for request code={code}, but accessKey=RocketMQ is not", acl.FRAME_ADMIN)
        # an admin account passes (rocketmq2 has no topic/group perms at all: everything allowed)
        assert hook(chan(), signed(code, create, ak="rocketmq2")) is None
    assert acl.ADMIN_CODES == {17, 25, 215, 200, 207}
    # admin with resource perms: admin codes pass, resources still checked (defaultTopicPerm SUB)
    assert hook(chan(), signed(17, create, ak="adminWithPerms", sk="abcdefgh")) is None
    assert hook(chan(), send_v2("topicP", ak="adminWithPerms", sk="abcdefgh")) is None
    assert hook(chan(), send_v2("topicQ", ak="adminWithPerms", sk="abcdefgh")) is not None
    assert hook(chan(), send_v2("anything", ak="rocketmq2")) is None


def test_white_lists(hook: acl.AclHook) -> None:
    # global white list: anything goes, even unsigned
    assert hook(chan("10.10.103.7:5555"), signed(17, {"topic": "x"}, ak=None)) is None
    assert hook(chan("10.10.104.7:5555"), signed(17, {"topic": "x"}, ak=None)) is not None
    # the account's white address skips the signature and permission checks
    assert hook(chan("192.168.1.9:1"), send_v2("topicA", ak="rocketmq2", sk="wrong-secret")) is None
    assert hook(chan("192.168.2.9:1"), send_v2("topicA", ak="rocketmq2", sk="wrong-secret")) is not None
    # ...but an access key is still needed
    assert hook(chan("192.168.1.9:1"), send_v2("topicA", ak=None)) is not None


def test_trace_topic_pub_skips_permissions(hook: acl.AclHook) -> None:
    assert hook(chan(), send_v2("RMQ_SYS_TRACE_TOPIC")) is None
    assert hook(chan(), pull("RMQ_SYS_TRACE_TOPIC", "groupC")) is not None    # SUB is checked


@pytest.mark.parametrize("pattern,yes,no", [
    ("192.168.0.*", ["192.168.0.1", "192.168.0.255"], ["192.168.1.1", "10.0.0.1", "::1"]),
    ("192.168.*.*", ["192.168.7.1"], ["192.169.0.1"]),
    ("192.*.*.*", ["192.1.2.3"], ["193.1.2.3"]),
    ("192.168.1.10-20", ["192.168.1.10", "192.168.1.20"], ["192.168.1.9", "192.168.1.21"]),
    ("192.168.3-4.*", ["192.168.3.1", "192.168.4.200"], ["192.168.5.1"]),
    ("192.168.1.{1,2}", ["192.168.1.1", "192.168.1.2"], ["192.168.1.3"]),
    ("127.0.0.1,10.0.0.2", ["127.0.0.1", "10.0.0.2"], ["10.0.0.3"]),
    ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
    ("*", ["1.2.3.4", "::1"], []),
    ("::1", ["0:0:0:0:0:0:0:1", "::1"], ["::2", "127.0.0.1"]),
    ("1:2:3:4:5:6:7:*", ["1:2:3:4:5:6:7:ffff"], ["1:2:3:4:5:6:8:1"]),
    ("", [], ["127.0.0.1"]),
])
def test_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    rule = acl.address_rule(pattern, lambda m: AclConfigError(m))
    assert all(rule.match(ip) for ip in yes)
    assert not any(rule.match(ip) for ip in no)


def test_java_hashmap_order() -> None:
    # what a real 4.9.8 broker reports for a pull refused on both topicA and %RETRY%groupA: the topic
    assert acl.java_hashmap_order(["topicA", "%RETRY%groupA"])[0] == "topicA"
    assert acl.java_hashmap_order(["%RETRY%groupA", "topicA"])[0] == "topicA"
    assert sorted(acl.java_hashmap_order([f"t{i}" for i in range(40)])) == sorted(f"t{i}" for i in range(40))
    assert acl._java_hash("hello") == 99162322    # "hello".hashCode()


def test_oneway_request_gets_a_response_to_drop(hook: acl.AclHook) -> None:
    r = hook(chan(), signed(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "groupA", "topic": "topicC"},
                            oneway=True))
    assert r is not None and r.code == ResponseCode.SYSTEM_ERROR


# ------------------------------------------------------------------------------------------ the file
def test_reload_when_file_changes(acl_file: Path) -> None:
    now = [0.0]
    mgr = acl.PlainPermissionManager(acl_file, watch_interval_s=5.0, clock=lambda: now[0])
    req = send_v2("topicZ")
    with pytest.raises(acl.AccessDenied):
        mgr.check(req, LOCAL)
    acl_file.write_text(ACL_YML.replace("      - AclTopic=PUB|SUB", "      - topicZ=PUB"))
    os.utime(acl_file, ns=(1, 1))    # a different mtime even on a coarse clock
    with pytest.raises(acl.AccessDenied):
        mgr.check(req, LOCAL)        # not yet: checked at most every 5 s
    now[0] = 6.0
    mgr.check(req, LOCAL)
    assert mgr.reloads == 1
    # a broken edit keeps the rules in force
    acl_file.write_text("accounts: [\n")
    now[0] = 12.0
    mgr.check(req, LOCAL)
    assert mgr.reloads == 1
    acl_file.unlink()
    now[0] = 18.0
    mgr.check(req, LOCAL)


@pytest.mark.parametrize("text,field,words", [
    ("accounts: [\n", None, "not valid YAML"),
    ("- a\n- b\n", None, "top level must be a mapping"),
    ("accounts: {a: 1}\n", "accounts", "must be a list"),
    ("accounts:\n  - secretKey: 12345678\n", "accounts[0].accessKey", "is missing"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: 123456\n", "accounts[0].secretKey", "longer than 6"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: [1]\n", "accounts[0].secretKey", "must be a string"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: 1234567\n    admin: maybe\n", "accounts[0].admin",
     "true or false"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: 1234567\n    defaultTopicPerm: PUB SUB\n",
     "accounts[0].defaultTopicPerm", "permission must be one of"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: 1234567\n    topicPerms: [topicA]\n",
     "accounts[0].topicPerms[0]", "name=PERM"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: 1234567\n    groupPerms: [g=pub]\n",
     "accounts[0].groupPerms[0]", "permission must be one of"),
    ("accounts:\n  - accessKey: abcdefg\n    secretKey: 1234567\n    whiteRemoteAddress: 1.2.3\n",
     "accounts[0].whiteRemoteAddress", "not an IPv4 or IPv6 address"),
    ("globalWhiteRemoteAddresses: [10.10.*]\n", "globalWhiteRemoteAddresses[0]", "4 parts"),
    ("accounts:\n  - {accessKey: abcdefg, secretKey: 1234567}\n  - {accessKey: abcdefg, secretKey: 7654321}\n",
     "accounts[1].accessKey", "defined twice"),
])
def test_bad_files_name_file_and_field(tmp_path: Path, text: str, field: str | None, words: str) -> None:
    p = tmp_path / "plain_acl.yml"
    p.write_text(text)
    with pytest.raises(AclConfigError) as ei:
        acl.load_acl_file(p)
    assert ei.value.field == field and ei.value.path == str(p)
    assert words in str(ei.value) and str(p) in str(ei.value)


def test_missing_file_and_locations(tmp_path: Path) -> None:
    with pytest.raises(AclConfigError, match="not found"):
        acl.AclHook(SimpleNamespace(store_path_root_dir=tmp_path, acl_enable=True, acl_plain_file=None))
    cfg = SimpleNamespace(store_path_root_dir=tmp_path, acl_plain_file=None)
    assert acl.resolve_acl_file(cfg) == tmp_path / "conf" / "plain_acl.yml"
    assert acl.resolve_acl_file(SimpleNamespace(store_path_root_dir=tmp_path, acl_plain_file="x/a.yml")) == \
        tmp_path / "x" / "a.yml"
    assert acl.resolve_acl_file(SimpleNamespace(store_path_root_dir=tmp_path, acl_plain_file="/etc/a.yml")) == \
        Path("/etc/a.yml")
    # an empty file is an explicit "nobody": everything refused
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "plain_acl.yml").write_text("")
    h = acl.AclHook(cfg)
    assert h(chan(), send_v2("t")).remark.endswith("PlainPermissionManager.java:668)")


def test_register_only_when_enabled(acl_file: Path) -> None:
    root = acl_file.parents[1]
    off = SimpleNamespace(config=SimpleNamespace(acl_enable=False, store_path_root_dir=root, acl_plain_file=None),
                          request_hooks=[])
    acl.register(off)
    assert off.request_hooks == []
    on = SimpleNamespace(config=SimpleNamespace(acl_enable=True, store_path_root_dir=root, acl_plain_file=None),
                         request_hooks=[])
    acl.register(on)
    assert len(on.request_hooks) == 1 and isinstance(on.request_hooks[0], acl.AclHook)
    assert on.request_hooks[0](chan(), send_v2("topicB", sk="bad-secret")).remark == SIGNATURE_FAILED


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


# 100 examples in the default run; 300 with ROCKETSTREAM_FUZZ_FULL=1 (as tests/reliability/test_broker_fuzz.py)
@settings(max_examples=300 if os.environ.get("ROCKETSTREAM_FUZZ_FULL") == "1" else 100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(code=st.sampled_from([10, 11, 12, 15, 17, 34, 35, 36, 38, 310, 25, 0, -1, 99999,
                              14, 21, 33, 41, 42, 46, 202, 222, 320, 321, 361]),
       fields=st.none() | st.dictionaries(st.sampled_from(["AccessKey", "Signature", "SecurityToken", "topic",
                                                           "group", "consumerGroup", "a", "b", "clientID", "offset",
                                                           "_UNIQUE_KEY_QUERY"]) | _text, _text, max_size=6),
       body=st.none() | st.binary(max_size=64) | st.sampled_from([
           b'{"consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"t"}]}]}',
           b'{"consumerDataSet":7}', b'{"consumerDataSet":[{"groupName":{}}]}', b"null", b"[]", b'"x"',
           b'{"consumerGroup":"g","clientId":"c","mqSet":[{"topic":"t","brokerName":"b","queueId":0}]}',
           b'{"consumerGroup":7,"mqSet":[1]}', b'{"mqSet":{}}', b'{"group":"g","subscriptionData":{"topic":[]}}',
           b'{"group":"g","subscriptionData":"t"}']),
       addr=st.none() | st.sampled_from(["127.0.0.1:1", "::1:5", "garbage", "10.10.103.1:2", "192.168.1.1:3"]),
       sign=st.booleans())
def test_random_requests_never_crash_the_hook(hook: acl.AclHook, code, fields, body, addr, sign) -> None:
    if sign and fields is not None:
        acl.sign_fields(fields, body, AK, SK)
    req = RemotingCommand(code=code, ext_fields=fields, body=body)
    r = hook(SimpleNamespace(addr=addr), req)
    assert r is None or (r.code == ResponseCode.SYSTEM_ERROR and r.remark.startswith(
        "org.apache.rocketmq.acl.common.AclException"))


# ------------------------------------------------------------------------------------------ Java
@pytest.fixture(scope="module")
def java_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        peers.find_dist()
        peers.find_java()
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))
    return peers.compile_java(tmp_path_factory.mktemp("acl-java"), JAVA_DIR / "AclProbe.java",
                              JAVA_DIR / "AclScenario.java")


def _java(classes: Path, home: Path, main: str, *args: str, stdin: str = "", timeout: float = 120):
    java, _ = peers.find_java()
    cmd = [str(java), "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dfile.encoding=UTF-8",
           f"-Duser.home={home}", f"-Drocketmq.client.logRoot={home}/client-logs",
           "-cp", f"{classes}:{peers.find_dist()}/lib/*", main, *args]
    return subprocess.run(cmd, input=stdin.encode(), capture_output=True, timeout=timeout)


def _probe(classes: Path, home: Path, cases: list[dict], *args: str) -> list[dict]:
    res = _java(classes, home, "AclProbe", *args, stdin="".join(json.dumps(c) + "\n" for c in cases))
    out = res.stdout.decode("utf-8")
    # netty/logback may log to stdout too: our lines are the JSON objects
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert res.returncode == 0 and len(lines) == len(cases), (res.returncode, out[-3000:], res.stderr[-3000:])
    return lines


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


SEND_V2 = {"a": "groupB", "b": "topicB", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 1700000000000, "h": 0,
           "j": 0, "k": False, "m": False}
PULL_V1 = {"consumerGroup": "groupA", "topic": "topicA", "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
           "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 1000, "subVersion": 0, "subscription": "*",
           "expressionType": "TAG"}


def test_signatures_equal_java_aclclientrpchook(java_classes: Path, tmp_path: Path) -> None:
    cases = [
        {"code": 10, "fields": {"topic": "T", "producerGroup": "G"}, "ak": AK, "sk": SK},
        {"code": 10, "fields": {"topic": "Tópico-中文-😀", "properties": "KEYS\u0001k1 k2\u0002TAGS\u0001été"},
         "ak": "clé-d'accès", "sk": "sécret-😀-key", "body": _b64("corps é 😀".encode())},
        {"code": 34, "fields": {}, "ak": AK, "sk": SK, "token": "tok-\u00e9", "body": _b64(bytes(range(256)))},
        {"code": 11, "fields": {"\uffff": "max-bmp", "\U0001F600": "emoji-key", "Z": "z", "a": ""},
         "ak": AK, "sk": SK},
        {"code": 310, "fields": SEND_V2, "header": "sendV2", "ak": AK, "sk": SK, "body": _b64(b"hello")},
        {"code": 11, "fields": PULL_V1, "header": "pullV1", "ak": AK, "sk": SK},
        {"code": 12, "fields": {"topic": "t", "_UNIQUE_KEY_QUERY": "true"}, "ak": AK, "sk": SK},
    ]
    for case, out in zip(cases, _probe(java_classes, tmp_path, cases, "sign"), strict=True):
        fields = dict(out["fields"])
        assert fields["Signature"] == out["signature"]
        body = base64.b64decode(case["body"]) if "body" in case else None
        # the broker-side recomputation over what arrived ...
        assert acl.calc_signature(acl.signing_content(fields, body), case["sk"]) == out["signature"], case
        # ... and the client-side recipe from the unsigned fields
        unsigned = {k: v for k, v in fields.items() if k not in ("Signature", "AccessKey", "SecurityToken")}
        assert acl.sign_fields(unsigned, body, case["ak"], case["sk"], case.get("token")) == fields


# the real 4.9.8 broker with aclEnable=true and ACL_YML --------------------------------------------------
@pytest.fixture(scope="module")
def real_acl_broker(tmp_path_factory: pytest.TempPathFactory, java_classes: Path):
    with acl_peers.java_with_acl(tmp_path_factory.mktemp("acl-real"), ACL_YML) as cluster:
        log = cluster.broker_server.rocketmq_log("broker.log").read_text(errors="replace")
        assert "Broker plain acl conf data" in log
        yield cluster


REAL_CASES = [
    {"code": 310, "fields": SEND_V2, "header": "sendV2", "ak": AK, "sk": "wrongsecret", "body": _b64(b"hello")},
    {"code": 310, "fields": SEND_V2, "header": "sendV2", "ak": AK, "sk": SK, "body": _b64(b"hello")},
    {"code": 310, "fields": {**SEND_V2, "b": "topicA"}, "header": "sendV2", "ak": AK, "sk": SK},
    {"code": 310, "fields": {**SEND_V2, "b": "unlisted"}, "header": "sendV2", "ak": AK, "sk": SK},
    {"code": 310, "fields": {**SEND_V2, "b": "%RETRY%groupA", "a": "groupA"}, "header": "sendV2", "ak": AK,
     "sk": SK},
    {"code": 310, "fields": SEND_V2, "header": "sendV2", "body": _b64(b"x")},
    {"code": 310, "fields": SEND_V2, "header": "sendV2", "ak": "nobodyhere", "sk": SK},
    {"code": 11, "fields": PULL_V1, "header": "pullV1", "ak": AK, "sk": SK},
    {"code": 11, "fields": {**PULL_V1, "topic": "topicC"}, "header": "pullV1", "ak": AK, "sk": SK},
    {"code": 17, "fields": {"topic": "newT", "defaultTopic": "TBW102", "readQueueNums": "1",
                            "writeQueueNums": "1", "perm": "6", "topicFilterType": "SINGLE_TAG",
                            "topicSysFlag": "0", "order": "false"}, "ak": AK, "sk": SK},
    {"code": 215, "fields": {"topic": "nope"}, "ak": AK, "sk": SK},
    {"code": 34, "fields": {}, "ak": AK, "sk": SK},
    {"code": 34, "fields": {}, "ak": AK, "sk": SK, "body": _b64(json.dumps({
        "clientID": "c1", "producerDataSet": [], "consumerDataSet": [{
            "groupName": "groupC", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
            "subscriptionDataSet": [{"topic": "topicA", "subString": "*", "classFilterMode": False,
                                     "tagsSet": [], "codeSet": [], "subVersion": 1,
                                     "expressionType": "TAG"}]}]}).encode())},
    {"code": 38, "fields": {"consumerGroup": "groupA"}, "ak": AK, "sk": SK},
    {"code": 38, "fields": {"consumerGroup": "groupC"}, "ak": AK, "sk": SK},
    {"code": 30, "fields": {"topic": "topicA", "queueId": "0"}, "ak": AK, "sk": "12345679"},
]


def test_real_broker_refuses_what_we_refuse(real_acl_broker, java_classes: Path, acl_file: Path,
                                            hook: acl.AclHook) -> None:
    answers = _probe(java_classes, real_acl_broker.home, REAL_CASES, "send", real_acl_broker.broker)
    prefix = "org.apache.rocketmq.acl.common.AclException"
    refused = []
    for i, (case, ans) in enumerate(zip(REAL_CASES, answers, strict=True)):
        body = base64.b64decode(case["body"]) if "body" in case else None
        ours = hook(chan(), RemotingCommand(code=case["code"], ext_fields=ans["fields"], body=body))
        real_refused = ans["code"] == 1 and (ans.get("remark") or "").startswith(prefix)
        if ours is None:
            assert not real_refused, (case, ans)
        else:
            assert real_refused and (ours.code, ours.remark) == (ans["code"], ans["remark"]), (case, ans)
            refused.append(i)
    assert refused == [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15]
    assert answers[0]["code"] == ResponseCode.SYSTEM_ERROR and answers[0]["remark"] == SIGNATURE_FAILED


def test_acl_scenario_against_real_broker(real_acl_broker, java_classes: Path) -> None:
    ok = _java(java_classes, real_acl_broker.home, "AclScenario", "--namesrv", real_acl_broker.namesrv,
               "--ak", AK, "--sk", SK)
    assert ok.returncode == 0 and b"RESULT SEND_OK" in ok.stdout, ok.stdout[-2000:]
    bad = _java(java_classes, real_acl_broker.home, "AclScenario", "--namesrv", real_acl_broker.namesrv,
                "--ak", AK, "--sk", "wrongsecret")
    line = [x for x in bad.stdout.decode().splitlines() if x.startswith("RESULT")]
    assert bad.returncode == 3 and line == [f"RESULT REJECTED code=1 remark={SIGNATURE_FAILED}"], bad.stdout[-2000:]


# our broker with aclEnable=true: the same Java scenario, the same answers -------------------------------
@pytest.fixture(scope="module")
def our_acl_broker(tmp_path_factory: pytest.TempPathFactory):
    with acl_peers.ours_with_acl(tmp_path_factory.mktemp("acl-ours"), ACL_YML) as served:
        yield served


def test_acl_scenario_against_our_broker(our_acl_broker, java_classes: Path, tmp_path: Path) -> None:
    ok = _java(java_classes, tmp_path, "AclScenario", "--namesrv", our_acl_broker.namesrv_addr, "--ak", AK, "--sk", SK)
    assert ok.returncode == 0 and b"RESULT SEND_OK" in ok.stdout, ok.stdout[-2000:]
    bad = _java(java_classes, tmp_path, "AclScenario", "--namesrv", our_acl_broker.namesrv_addr,
                "--ak", AK, "--sk", "wrongsecret")
    line = [x for x in bad.stdout.decode().splitlines() if x.startswith("RESULT")]
    assert bad.returncode == 3 and line == [f"RESULT REJECTED code=1 remark={SIGNATURE_FAILED}"], bad.stdout[-2000:]
    unsigned = _java(java_classes, tmp_path, "AclScenario", "--namesrv", our_acl_broker.namesrv_addr,
                     "--ak", "nobodyhere", "--sk", SK)
    assert unsigned.returncode == 3, unsigned.stdout[-2000:]


def test_secrets_stay_out_of_reprs_and_errors(acl_file: Path, tmp_path: Path) -> None:
    rules = acl.load_acl_file(acl_file)
    assert SK not in repr(rules) and "abcdefgh" not in repr(rules) and "secret_key" not in repr(rules)
    req = acl.parse_request(signed(RequestCode.GET_MAX_OFFSET, {"SecurityToken": "tok-very-private"}), LOCAL)
    assert "tok-very-private" not in repr(req)
    # a YAML error names the line and column, not the line's text (it may be a secretKey line)
    bad = tmp_path / "bad.yml"
    bad.write_text("accounts:\n  - accessKey: abcdefg\n    secretKey: sup3r-s3cret: x\n")
    with pytest.raises(AclConfigError) as ei:
        acl.load_acl_file(bad)
    assert "sup3r-s3cret" not in str(ei.value) and "line 3, column 28" in str(ei.value)
    assert ei.value.__cause__ is None and ei.value.__suppress_context__
    # a secret of the wrong type: its type, not its value
    bad.write_text("accounts:\n  - accessKey: abcdefg\n    secretKey: [sup3r-s3cret]\n")
    with pytest.raises(AclConfigError, match="must be a string, got list") as ei:
        acl.load_acl_file(bad)
    assert "sup3r-s3cret" not in str(ei.value)
