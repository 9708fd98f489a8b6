"""In-process broker for protocol-level tests: a BrokerController on a free 127.0.0.1 port over a
temporary store (no name server), and request builders speaking as a Java 4.9.8 client would."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

from rocketstream import codec
from rocketstream.broker import BrokerConfig, BrokerController
from rocketstream.remoting import Channel, RemotingCommand, RequestCode, connect, json_body
from rocketstream.store import StoreConfig

SUSPEND, SUBSCRIPTION, COMMIT = 0x2, 0x4, 0x1


@contextlib.asynccontextmanager
async def broker(tmp: Path, *, store_config: StoreConfig | None = None, **settings) -> AsyncIterator[BrokerController]:
    cfg = BrokerConfig(store_path_root_dir=tmp / "store", listen_port=0, store_config=store_config, **settings)
    controller = await BrokerController(cfg).start()
    try:
        yield controller
    finally:
        await controller.stop()


async def client(controller: BrokerController, on_request=None) -> Channel:
    return await connect(controller.broker_addr, on_request=on_request)


def properties(tags: str | None = None, keys: str | None = None, **extra: str) -> str:
    props = {"WAIT": "true", "UNIQ_KEY": codec.new_uniq_key()}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    props.update(extra)
    return codec.encode_properties(props).decode()


def send_v2(topic: str, body: bytes, *, tags: str | None = None, keys: str | None = None, queue_id: int = -1,
            born: int | None = None, flag: int = 0, sys_flag: int = 0, props: str | None = None,
            reconsume_times: int | None = None, max_reconsume_times: int | None = None) -> RemotingCommand:
    fields: dict[str, object] = {
        "a": "pg", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": sys_flag,
        "g": born if born is not None else int(time.time() * 1000), "h": flag,
        "i": props if props is not None else properties(tags, keys), "k": False, "m": False}
    if reconsume_times is not None:
        fields["j"] = reconsume_times
    if max_reconsume_times is not None:
        fields["l"] = max_reconsume_times
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, body)


def pull(group: str, topic: str, queue_id: int, offset: int, *, sys_flag: int = SUSPEND | SUBSCRIPTION,
         suspend_ms: int = 15000, subscription: str = "*", max_msgs: int = 32, commit_offset: int = 0,
         sub_version: int = 0) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset, "maxMsgNums": max_msgs,
        "sysFlag": sys_flag, "commitOffset": commit_offset, "suspendTimeoutMillis": suspend_ms,
        "subscription": subscription, "subVersion": sub_version, "expressionType": "TAG"})


def heartbeat(client_id: str, group: str, topics: dict[str, str], *, producer: str | None = None,
              sub_version: int = 1) -> RemotingCommand:
    subs = []
    for topic, expr in topics.items():
        tags = [] if expr == "*" else [t.strip() for t in expr.split("||")]
        subs.append({"classFilterMode": False, "codeSet": [codec.java_hash(t) for t in tags], "expressionType": "TAG",
                     "subString": expr, "subVersion": sub_version, "tagsSet": tags, "topic": topic})
    body = {"clientID": client_id,
            "consumerDataSet": [{"consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "consumeType": "CONSUME_PASSIVELY",
                                 "groupName": group, "messageModel": "CLUSTERING", "subscriptionDataSet": subs,
                                 "unitMode": False}],
            "producerDataSet": [{"groupName": producer or "CLIENT_INNER_PRODUCER"}]}
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=json_body.dumps(body))


def records(body: bytes | None) -> list[codec.MessageRecord]:
    """MessageDecoder.decodes: the records of a pull / query body, in order."""
    out: list[codec.MessageRecord] = []
    pos = 0
    data = body or b""
    while pos < len(data):
        rec = codec.decode_record(data, pos, check_crc=True)
        assert rec is not None
        out.append(rec)
        pos += rec.total_size
    return out
