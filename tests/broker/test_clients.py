"""Heartbeats, consumer lists, NOTIFY_CONSUMER_IDS_CHANGED on join/leave, locks, offset and message
queries, and the clean SIGTERM stop of ``rocketstream serve``."""

from __future__ import annotations

import asyncio
import time

from rocketstream import codec
from rocketstream.broker.rebalance_lock import MessageQueue, RebalanceLockManager
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode, connect, json_body
from tests.broker.brokerutil import broker, client, heartbeat, records, send_v2
from tests.broker.conftest import start_serve, stop_serve


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


class Notices:
    def __init__(self) -> None:
        self.groups: list[str] = []
        self.event = asyncio.Event()

    def __call__(self, ch, req):
        assert req.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and req.is_oneway
        self.groups.append(req.field("consumerGroup"))
        self.event.set()
        return None


def test_heartbeat_consumer_list_and_notifications(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            n1, n2 = Notices(), Notices()
            c1 = await client(b, on_request=n1)
            c2 = await client(b, on_request=n2)
            r = await c1.invoke(heartbeat("10.0.0.1@1", "G", {"T": "TagA || TagB", "%RETRY%G": "*"}))
            assert r.code == ResponseCode.SUCCESS and r.version == 409
            assert b.topics.get("%RETRY%G") is not None   # created on heartbeat
            info = b.consumers.group_info("G")
            assert info.subscriptions["T"].code_set == {codec.java_hash("TagA"), codec.java_hash("TagB")}
            assert "pg" not in b.producers.table and "CLIENT_INNER_PRODUCER" in b.producers.table
            await asyncio.wait_for(n1.event.wait(), 2)   # its own join changes the group
            n1.event.clear()
            await c2.invoke(heartbeat("10.0.0.2@2", "G", {"T": "*", "%RETRY%G": "*"}))
            await asyncio.wait_for(n1.event.wait(), 2)   # a new member: everyone is told
            lst = await c1.invoke(RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                          {"consumerGroup": "G"}))
            assert sorted(json_body.loads(lst.body)["consumerIdList"]) == ["10.0.0.1@1", "10.0.0.2@2"]
            # a repeated heartbeat with nothing new notifies nobody
            n1.event.clear()
            n2.event.clear()
            await c2.invoke(heartbeat("10.0.0.2@2", "G", {"T": "*", "%RETRY%G": "*"}))
            await asyncio.sleep(0.2)
            assert not n1.event.is_set() and not n2.event.is_set()
            # the connection closes: it leaves and the rest are told
            await c2.aclose()
            await asyncio.wait_for(n1.event.wait(), 2)
            assert b.consumers.group_info("G").client_ids() == ["10.0.0.1@1"]
            # unregister: the group is gone; the list answers 1
            r = await c1.invoke(RemotingCommand.request(RequestCode.UNREGISTER_CLIENT,
                                                        {"clientID": "10.0.0.1@1", "consumerGroup": "G"}))
            assert r.code == 0 and b.consumers.group_info("G") is None
            lst = await c1.invoke(RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                          {"consumerGroup": "G"}))
            assert lst.code == ResponseCode.SYSTEM_ERROR and lst.remark == "no consumer for this group, G"
            # expiry: no heartbeat for the timeout -> removed and its connection closed
            await c1.invoke(heartbeat("10.0.0.1@1", "G", {"T": "*"}))
            b.consumers.group_info("G").channels["10.0.0.1@1"].last_update_ms -= 200_000
            b.consumers.scan_not_active(120_000)
            assert b.consumers.group_info("G") is None
            await asyncio.wait_for(c1.wait_closed(), 2)
    run(go())


def test_subscription_from_heartbeat_filters_pulls(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            b.topics.create("F", 1, 1, 6)
            ch = await client(b)
            for tag in ("TagA", "TagB", "TagA"):
                await ch.invoke(send_v2("F", tag.encode(), tags=tag, queue_id=0))
            await ch.invoke(heartbeat("c@1", "G", {"F": "TagB"}, sub_version=5))
            req = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                "consumerGroup": "G", "topic": "F", "queueId": 0, "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 0,
                "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 5})
            r = await ch.invoke(req)
            assert r.code == 0 and [m.body for m in records(r.body)] == [b"TagB"]
            req.ext_fields["subVersion"] = "6"   # newer than the heartbeat's
            r = await ch.invoke(req)
            assert r.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
            await ch.aclose()
    run(go())


def test_locks(tmp_path):
    mq = MessageQueue("T", "b", 0)
    m = RebalanceLockManager()
    assert m.try_lock_batch("G", [mq], "c1", now_ms=1000) == {mq}
    assert m.try_lock_batch("G", [mq], "c2", now_ms=30_000) == set()
    assert m.try_lock_batch("G", [mq], "c1", now_ms=50_000) == {mq}          # renewed
    assert m.try_lock_batch("G", [mq], "c2", now_ms=100_000) == set()        # 50 s after the renewal
    assert m.try_lock_batch("G", [mq], "c2", now_ms=110_001) == {mq}         # > 60 s: expired, taken over
    m.unlock_batch("G", [mq], "c1")                                           # not c1's any more
    assert m.is_locked("G", mq, "c2", now_ms=110_002)

    async def go():
        async with broker(tmp_path) as b:
            ch = await client(b)

            def body(cid, qids):
                return json_body.dumps({"clientId": cid, "consumerGroup": "G",
                                        "mqSet": [{"brokerName": "b", "queueId": q, "topic": "T"} for q in qids]})

            r = await ch.invoke(RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body("c1", [0, 1])))
            assert sorted(m["queueId"] for m in json_body.loads(r.body)["lockOKMQSet"]) == [0, 1]
            r = await ch.invoke(RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body("c2", [1, 2])))
            assert [m["queueId"] for m in json_body.loads(r.body)["lockOKMQSet"]] == [2]
            r = await ch.invoke(RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=body("c1", [1])))
            assert r.code == 0
            r = await ch.invoke(RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body("c2", [1])))
            assert [m["queueId"] for m in json_body.loads(r.body)["lockOKMQSet"]] == [1]
            r = await ch.invoke(RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=b"{not json"))
            assert r.code == ResponseCode.SYSTEM_ERROR and "LockBatchRequestBody" in r.remark
            await ch.aclose()
    run(go())


def test_offset_and_message_queries(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            b.topics.create("Q", 2, 2, 6)
            ch = await client(b)

            async def ask(code, **fields):
                return await ch.invoke(RemotingCommand.request(code, fields))

            r = await ask(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g", topic="Q", queueId=0)
            assert (r.code, r.ext_fields["offset"]) == (0, "0")   # a young queue: 0, not 22
            t_before = int(time.time() * 1000)
            sends = [await ch.invoke(send_v2("Q", f"q{i}".encode(), keys=f"KEY-{i}", queue_id=0)) for i in range(4)]
            upd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": "g", "topic": "Q", "queueId": 0, "commitOffset": 3}, oneway=True)
            await ch.invoke_oneway(upd)   # oneway: never answered
            r = await ask(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g", topic="Q", queueId=0)
            assert r.ext_fields["offset"] == "3"
            assert (await ask(RequestCode.GET_MAX_OFFSET, topic="Q", queueId=0)).ext_fields["offset"] == "4"
            assert (await ask(RequestCode.GET_MIN_OFFSET, topic="Q", queueId=0)).ext_fields["offset"] == "0"
            earliest = int((await ask(RequestCode.GET_EARLIEST_MSG_STORETIME, topic="Q", queueId=0))
                           .ext_fields["timestamp"])
            assert earliest >= t_before
            assert (await ask(RequestCode.GET_EARLIEST_MSG_STORETIME, topic="Q", queueId=1)).ext_fields["timestamp"] \
                == "-1"
            r = await ask(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic="Q", queueId=0, timestamp=t_before - 10_000)
            assert r.ext_fields["offset"] == "0"
            # view by id: exactly the stored record
            phys = codec.decode_offset_msg_id(sends[2].ext_fields["msgId"])[1]
            r = await ask(RequestCode.VIEW_MESSAGE_BY_ID, offset=phys)
            assert r.code == 0 and r.body == b.store.raw_record(phys) and records(r.body)[0].body == b"q2"
            r = await ask(RequestCode.VIEW_MESSAGE_BY_ID, offset=phys + 1)
            assert r.code == ResponseCode.SYSTEM_ERROR and "can not find message by the offset" in r.remark
            # query by key
            r = await ask(RequestCode.QUERY_MESSAGE, topic="Q", key="KEY-1", maxNum=32, beginTimestamp=0,
                          endTimestamp=2**63 - 1)
            assert r.code == 0 and [m.body for m in records(r.body)] == [b"q1"]
            assert "indexLastUpdatePhyoffset" in r.ext_fields and "indexLastUpdateTimestamp" in r.ext_fields
            r = await ask(RequestCode.QUERY_MESSAGE, topic="Q", key="KEY-99", maxNum=32, beginTimestamp=0,
                          endTimestamp=2**63 - 1)
            assert r.code == ResponseCode.QUERY_NOT_FOUND
            await ch.aclose()
    run(go())


def test_serve_stops_cleanly_on_sigterm(tmp_path):
    served = start_serve(tmp_path)
    try:
        async def go():
            ch = await connect(served.broker_addr)
            r = await ch.invoke(send_v2("Stop", b"x", queue_id=0))
            assert r.code == 0
            await ch.invoke_oneway(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": "g", "topic": "Stop", "queueId": 0, "commitOffset": 1}))
            await ch.invoke(RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "Stop", "queueId": 0}))
            # the topic (auto-created from TBW102) was registered with the name server before the send's
            # answer (createTopicInSendMessageMethod's order): routable at once
            ns = await connect(served.namesrv_addr)
            route = await ns.invoke(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Stop"}))
            assert route.code == 0, route
            assert json_body.loads(route.body)["queueDatas"][0]["writeQueueNums"] == 4
            await ns.aclose()
            await ch.aclose()
        run(go())
        assert (served.store / "abort").exists()
    finally:
        rc = stop_serve(served)
    assert rc == 0, served.log_text()[-3000:]
    assert not (served.store / "abort").exists()
    assert "shutdown OK" in served.log_text()
    text = (served.store / "config" / "consumerOffset.json").read_text()
    assert '"Stop@g":{0:1' in text
