"""One admin scenario played against the real 4.9.8 broker (over the wire) and against our admin
processor (over a comparable store), and the requests whose answers are compared.

Scenario: topic ``AdmT`` (4 read / 4 write queues) created with UPDATE_AND_CREATE_TOPIC; 5, 4, 3, 2
messages sent to queues 0..3 (tag TagA); group ``AdmG`` commits offsets q0=5, q1=3, q2=0 (q3 none); a
consumer of ``AdmG`` (clientId ``127.0.0.1@adm``, subscription ``AdmT`` / ``TagA``) heartbeats and stays
connected; producer group ``AdmP`` heartbeats on the same connection.

``capture`` (run as a script: ``python -m tests.broker.admin_scenario BROKER_ADDR OUT.json``) records
the real broker's answers; tests/broker/data/admin_oracle.json was written that way against
``../shared/rocketmq-4.9.8`` (bin/broker, defaults of tests/realbroker/peers.start_broker).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from rocketstream.remoting import RemotingCommand, RequestCode, connect
from rocketstream.remoting.json_body import loads

TOPIC, GROUP, PGROUP, CLIENT_ID = "AdmT", "AdmG", "AdmP", "127.0.0.1@adm"
PER_QUEUE = (5, 4, 3, 2)
COMMITS = {0: 5, 1: 3, 2: 0}
SUB_VERSION = 1700000000000
TAG_HASH = 2598919   # "TagA".hashCode()

HEARTBEAT = {
    "clientID": CLIENT_ID,
    "consumerDataSet": [{"consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "consumeType": "CONSUME_PASSIVELY",
                         "groupName": GROUP, "messageModel": "CLUSTERING", "unitMode": False,
                         "subscriptionDataSet": [{"classFilterMode": False, "codeSet": [TAG_HASH],
                                                  "expressionType": "TAG", "subString": "TagA",
                                                  "subVersion": SUB_VERSION, "tagsSet": ["TagA"], "topic": TOPIC}]}],
    "producerDataSet": [{"groupName": PGROUP}],
}

CREATE = {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
          "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}

# (name, code, header fields): asked in this order after the scenario is set up
REQUESTS: list[tuple[str, int, dict | None]] = [
    ("topic_stats", RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC}),
    ("topic_stats_missing", RequestCode.GET_TOPIC_STATS_INFO, {"topic": "NoSuchAdmT"}),
    ("consumer_connection", RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": GROUP}),
    ("consumer_connection_missing", RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "NoSuchG"}),
    ("producer_connection", RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": PGROUP}),
    ("producer_connection_missing", RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "NoSuchP"}),
    ("consume_stats", RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP}),
    ("consume_stats_topic", RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": TOPIC}),
    ("consume_stats_unknown_group", RequestCode.GET_CONSUME_STATS, {"consumerGroup": "NoSuchG"}),
    ("consume_by_who", RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC}),
    ("all_consumer_offset", RequestCode.GET_ALL_CONSUMER_OFFSET, None),
    ("all_delay_offset", RequestCode.GET_ALL_DELAY_OFFSET, None),
    ("system_topics", RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER, None),
    ("running_info_offline", RequestCode.GET_CONSUMER_RUNNING_INFO,
     {"consumerGroup": GROUP, "clientId": "nobody", "jstackEnable": False}),
    ("all_topic_config", RequestCode.GET_ALL_TOPIC_CONFIG, None),
    ("all_subscription_group", RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, None),
    ("runtime_info", RequestCode.GET_BROKER_RUNTIME_INFO, None),
    ("broker_config", RequestCode.GET_BROKER_CONFIG, None),
    ("create_system_topic", RequestCode.UPDATE_AND_CREATE_TOPIC, dict(CREATE, topic="TBW102")),
    ("create_bad_name", RequestCode.UPDATE_AND_CREATE_TOPIC, dict(CREATE, topic="bad topic!")),
    ("create_missing_perm", RequestCode.UPDATE_AND_CREATE_TOPIC, {k: v for k, v in CREATE.items() if k != "perm"}),
    ("create_other", RequestCode.UPDATE_AND_CREATE_TOPIC, dict(CREATE, topic="AdmNew", readQueueNums=2,
                                                                writeQueueNums=3)),
    ("topic_stats_other", RequestCode.GET_TOPIC_STATS_INFO, {"topic": "AdmNew"}),
    ("delete_other", RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "AdmNew"}),
    ("delete_other_again", RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "AdmNew"}),
    ("topic_stats_deleted", RequestCode.GET_TOPIC_STATS_INFO, {"topic": "AdmNew"}),
    ("delete_system_topic", RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "SCHEDULE_TOPIC_XXXX"}),
    ("unsupported_22", RequestCode.GET_TOPIC_CONFIG_LIST, None),
    ("unsupported_212", RequestCode.RESET_CONSUMER_OFFSET_IN_BROKER, None),
]


def send_fields(queue_id: int) -> dict:
    """SEND_MESSAGE_V2's one-letter header (SendMessageRequestHeaderV2)."""
    return {"a": PGROUP, "b": TOPIC, "c": "TBW102", "d": 4, "e": queue_id, "f": 0,
            "g": int(time.time() * 1000), "h": 0, "i": "TAGS\x01TagA\x02WAIT\x01true\x02", "j": 0, "k": False,
            "m": False}


def as_record(resp: RemotingCommand) -> dict:
    return {"code": resp.code, "remark": resp.remark, "ext": resp.ext_fields,
            "body": resp.body.decode("utf-8") if resp.body is not None else None}


async def setup_real(addr: str):
    """Play the scenario against a real broker; the heartbeat connection is returned (keep it open)."""
    ch = await connect(addr)
    resp = await ch.invoke(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE), 10)
    assert resp.code == 0, resp
    for qid, n in enumerate(PER_QUEUE):
        for i in range(n):
            resp = await ch.invoke(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_fields(qid),
                                                           f"m{i}".encode()), 10)
            assert resp.code == 0, resp
    for qid, off in COMMITS.items():
        resp = await ch.invoke(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": GROUP, "topic": TOPIC, "queueId": qid, "commitOffset": off}), 10)
        assert resp.code == 0, resp
    resp = await ch.invoke(RemotingCommand.request(RequestCode.HEART_BEAT, None, json.dumps(HEARTBEAT).encode()), 10)
    assert resp.code == 0, resp
    return ch


async def ask_all(addr: str) -> dict[str, dict]:
    ch = await connect(addr)
    try:
        out = {}
        for name, code, fields in REQUESTS:
            out[name] = as_record(await ch.invoke(RemotingCommand.request(code, fields), 10))
        return out
    finally:
        await ch.aclose()


def _norm_value(key: object, value: object) -> object:
    if key in ("lastUpdateTimestamp", "lastTimestamp", "timestamp") and isinstance(value, int):
        return "TS" if value > 0 else value
    if key == "clientAddr":
        return "ADDR"
    return value


def normalize(value: object, key: object = None) -> object:
    """A body with store/boot times and client addresses replaced by placeholders; MessageQueue keys
    become sortable tuples; lists of strings sorted (Java writes HashSets in hash order)."""
    if isinstance(value, dict) or hasattr(value, "items"):
        out = {}
        for k, v in value.items():
            nk = (k["topic"], k["brokerName"], k["queueId"]) if hasattr(k, "items") else k
            out[nk] = normalize(v, k)
        return out
    if isinstance(value, (list, tuple)):
        items = [normalize(v) for v in value]
        return sorted(items) if all(isinstance(v, str) for v in items) else items
    return _norm_value(key, value)


def body_doc(record: dict) -> object:
    return loads(record["body"]) if record["body"] else None


def capture(addr: str, out_path: str) -> None:
    async def go():
        hb = await setup_real(addr)
        try:
            return await ask_all(addr)
        finally:
            await hb.aclose()
    records = asyncio.run(go())
    doc = {"_comment": "Answers of a real RocketMQ 4.9.8 broker (../shared/rocketmq-4.9.8, started by "
                       "tests/realbroker/peers.start_broker) to tests/broker/admin_scenario.REQUESTS after "
                       "admin_scenario.setup_real; written by `python -m tests.broker.admin_scenario "
                       "BROKER_ADDR OUT.json`. broker_config's body and runtime_info's machine-specific "
                       "values are trimmed (see trim()).",
           "broker_addr": addr, "records": trim(records)}
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


def trim(records: dict[str, dict]) -> dict[str, dict]:
    """Keep the fixture small and free of machine paths: broker_config keeps the property names only,
    all_topic_config / all_subscription_group keep the scenario's entries plus one built-in."""
    records = json.loads(json.dumps(records))
    cfg = records["broker_config"]
    cfg["body"] = "".join(sorted(line.split("=", 1)[0] + "=\n" for line in cfg["body"].splitlines()))
    rt = records["runtime_info"]
    assert rt["body"] is not None, f"GET_BROKER_RUNTIME_INFO was not answered with a body: {rt}"
    table = json.loads(rt["body"])["table"]
    rt["body"] = json.dumps({"table": {k.split("_/")[0]: "" for k in table}}, sort_keys=True)
    for name, table_key, keep in (("all_topic_config", "topicConfigTable", {TOPIC, "TBW102"}),
                                  ("all_subscription_group", "subscriptionGroupTable", {GROUP, "TOOLS_CONSUMER"})):
        doc = json.loads(records[name]["body"])
        doc[table_key] = {k: v for k, v in doc[table_key].items() if k in keep}
        records[name]["body"] = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    return records


if __name__ == "__main__":
    capture(sys.argv[1], sys.argv[2])
