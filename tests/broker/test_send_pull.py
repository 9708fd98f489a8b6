"""Send and pull over the wire against an in-process broker: what a send stores and answers, what a pull
returns (the stored records' bytes), the getMessage status -> response code mapping, tag filtering, long
and short polling, commitOffset piggy-backing, and bad header fields."""

from __future__ import annotations

import asyncio
import time

import pytest

from rocketstream import codec
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode
from rocketstream.store import MessageStore, StoreConfig
from tests.broker.brokerutil import COMMIT, SUBSCRIPTION, SUSPEND, broker, client, pull, records, send_v2


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_send_stores_what_the_producer_sent_and_answers_like_the_java_broker(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            ch = await client(b)
            born = 1_700_000_000_123
            props = codec.encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AB12", "WAIT": "true",
                                             "idx": "7"}).decode()
            resp = await ch.invoke(send_v2("AutoTopic", b"hello", born=born, flag=5, props=props, queue_id=2))
            assert resp.code == ResponseCode.SUCCESS, resp
            ext = resp.ext_fields
            assert ext["queueId"] == "2" and ext["queueOffset"] == "0"
            assert ext["MSG_REGION"] == "DefaultRegion" and ext["TRACE_ON"] == "true"
            # auto-created from TBW102: min(client's 4, TBW102's 8) queues, perm RW
            tc = b.topics.get("AutoTopic")
            assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (4, 4, 6)
            phys = codec.decode_offset_msg_id(ext["msgId"])[1]
            rec = b.store.look_message_by_offset(phys)
            assert rec.store_host == codec.HostAddress("127.0.0.1", b.config.listen_port)
            local = ch._transport.get_extra_info("sockname")
            assert rec.born_host == codec.HostAddress(local[0], local[1])   # the client's socket address
            assert (rec.body, rec.flag, rec.born_timestamp, rec.queue_id) == (b"hello", 5, born, 2)
            assert rec.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AB12", "idx": "7",
                                      "CLUSTER": "DefaultCluster"}   # WAIT stripped, CLUSTER added (4.9.x)
            # queueId < 0: a random writable queue
            resp = await ch.invoke(send_v2("AutoTopic", b"x"))
            assert 0 <= int(resp.ext_fields["queueId"]) < 4
            # a producer-compressed body and its sysFlag are stored as sent
            packed = codec.compress_body(b"z" * 5000)
            resp = await ch.invoke(send_v2("AutoTopic", packed[0], sys_flag=packed[1], queue_id=1))
            rec = b.store.look_message_by_offset(codec.decode_offset_msg_id(resp.ext_fields["msgId"])[1])
            assert rec.sys_flag == packed[1] and rec.body == packed[0] and rec.uncompressed_body() == b"z" * 5000
            await ch.aclose()
    run(go())


def test_send_refusals(tmp_path):
    async def go():
        async with broker(tmp_path, auto_create_topic_enable=False) as b:
            ch = await client(b)
            resp = await ch.invoke(send_v2("NoSuchTopic", b"x"))
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in resp.remark
            resp = await ch.invoke(send_v2("SCHEDULE_TOPIC_XXXX", b"x"))
            assert resp.code == ResponseCode.NO_PERMISSION
            resp = await ch.invoke(send_v2("bad topic!", b"x"))
            assert resp.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in resp.remark
            b.topics.create("T4", 4, 4, 6)
            resp = await ch.invoke(send_v2("T4", b"x", queue_id=4))
            assert resp.code == ResponseCode.SYSTEM_ERROR and "queueId[4] is illegal" in resp.remark
            assert resp.ext_fields["MSG_REGION"] == "DefaultRegion"   # error responses carry them too
            await ch.aclose()
    run(go())


def test_batch_send_appends_batch_properties(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            b.topics.create("B", 2, 2, 6)
            ch = await client(b)
            entries = [codec.BatchEntry(0, f"m{i}".encode(), {"UNIQ_KEY": f"U{i}", "TAGS": "t"}) for i in range(3)]
            body = codec.encode_batch_body(entries)
            req = send_v2("B", body, queue_id=1, props=codec.encode_properties({"WAIT": "true"}).decode())
            req.code = RequestCode.SEND_BATCH_MESSAGE
            req.ext_fields["m"] = "true"
            resp = await ch.invoke(req)
            assert resp.code == ResponseCode.SUCCESS, resp
            ids = resp.ext_fields["msgId"].split(",")
            assert len(ids) == 3 and resp.ext_fields["queueOffset"] == "0"
            recs = [b.store.look_message_by_offset(codec.decode_offset_msg_id(i)[1]) for i in ids]
            assert [r.body for r in recs] == [b"m0", b"m1", b"m2"]
            assert [r.queue_offset for r in recs] == [0, 1, 2]
            assert all(r.properties["CLUSTER"] == "DefaultCluster" and r.properties["WAIT"] == "true" for r in recs)
            await ch.aclose()
    run(go())


def test_retry_topic_goes_to_dlq_at_max_reconsume_times(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            ch = await client(b)
            resp = await ch.invoke(send_v2("%RETRY%g1", b"again", reconsume_times=1, max_reconsume_times=3))
            assert resp.code == ResponseCode.SUCCESS
            assert b.store.max_offset("%RETRY%g1", int(resp.ext_fields["queueId"])) == 1
            resp = await ch.invoke(send_v2("%RETRY%g1", b"dead", reconsume_times=3, max_reconsume_times=3))
            assert resp.code == ResponseCode.SUCCESS
            assert b.topics.get("%DLQ%g1") is not None and b.store.max_offset("%DLQ%g1", 0) == 1
            rec = b.store.look_message_by_offset(codec.decode_offset_msg_id(resp.ext_fields["msgId"])[1])
            assert rec.topic == "%DLQ%g1" and rec.reconsume_times == 3
            await ch.aclose()
    run(go())


def test_pull_returns_the_stored_record_bytes(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            b.topics.create("P", 1, 1, 6)
            ch = await client(b)
            for i in range(5):
                assert (await ch.invoke(send_v2("P", f"b{i}".encode(), tags="TagA" if i % 2 == 0 else "TagB",
                                                keys=f"K{i}", queue_id=0))).code == 0
            resp = await ch.invoke(pull("g", "P", 0, 0, max_msgs=3))
            assert resp.code == ResponseCode.SUCCESS and resp.remark == "FOUND"
            ext = resp.ext_fields
            assert (ext["nextBeginOffset"], ext["minOffset"], ext["maxOffset"], ext["suggestWhichBrokerId"]) == \
                ("3", "0", "5", "0")
            got = records(resp.body)
            assert [r.body for r in got] == [b"b0", b"b1", b"b2"]
            assert resp.body == b"".join(b.store.raw_record(r.physical_offset) for r in got)
            # the broker filters by tags code; the client completes the filter on the TAGS string
            resp = await ch.invoke(pull("g", "P", 0, 0, subscription="TagB"))
            assert resp.code == 0 and [r.body for r in records(resp.body)] == [b"b1", b"b3"]
            assert resp.ext_fields["nextBeginOffset"] == "5"
            resp = await ch.invoke(pull("g", "P", 0, 4, subscription="TagB"))   # only TagA left: no match
            assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY and resp.ext_fields["nextBeginOffset"] == "5"
            # the broker keeps the subscriptions it built (pull.py): each pull still gets its own
            for sub, want in (("TagA", [b"b0", b"b2", b"b4"]), ("TagB", [b"b1", b"b3"]),
                              ("TagA || TagB", [b"b0", b"b1", b"b2", b"b3", b"b4"]), ("TagC", [])):
                resp = await ch.invoke(pull("g", "P", 0, 0, subscription=sub))
                assert [r.body for r in records(resp.body)] == want, sub
            await ch.aclose()
    run(go())


def test_pull_status_mapping(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            b.topics.create("S", 2, 2, 6)
            ch = await client(b)
            for _ in range(3):
                await ch.invoke(send_v2("S", b"x", queue_id=0))

            async def code(offset, queue_id=0, topic="S", **kw):
                r = await ch.invoke(pull("g", topic, queue_id, offset, sys_flag=SUBSCRIPTION, **kw))
                return r.code, (r.ext_fields or {}).get("nextBeginOffset"), r.remark

            assert await code(3) == (ResponseCode.PULL_NOT_FOUND, "3", "OFFSET_OVERFLOW_ONE")
            assert await code(9) == (ResponseCode.PULL_OFFSET_MOVED, "3", "OFFSET_OVERFLOW_BADLY")
            # a queue that never got a message: 19 at offset 0, 21 (to 0) elsewhere
            assert await code(0, queue_id=1) == (ResponseCode.PULL_NOT_FOUND, "0", "NO_MATCHED_LOGIC_QUEUE")
            assert await code(5, queue_id=1) == (ResponseCode.PULL_OFFSET_MOVED, "0", "NO_MATCHED_LOGIC_QUEUE")
            c, _, remark = await code(0, queue_id=2)
            assert c == ResponseCode.SYSTEM_ERROR and "queueId[2] is illegal" in remark
            c, _, remark = await code(0, topic="Nope")
            assert c == ResponseCode.TOPIC_NOT_EXIST
            # no SUBSCRIPTION bit and no heartbeat: the group's subscription does not exist (24)
            r = await ch.invoke(pull("g", "S", 0, 0, sys_flag=0))
            assert r.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
            await ch.aclose()
    run(go())


def test_offset_too_small_after_retention(tmp_path):
    async def go():
        small = StoreConfig(mapped_file_size_commit_log=4096)
        async with broker(tmp_path, store_config=small) as b:
            b.topics.create("R", 1, 1, 6)
            ch = await client(b)
            for _i in range(100):
                assert (await ch.invoke(send_v2("R", bytes(200), queue_id=0))).code == 0
            b.store.delete_expired_files(reserved_hours=0)
            lo = b.store.min_offset("R", 0)
            assert lo > 0
            r = await ch.invoke(pull("g", "R", 0, 0, sys_flag=SUBSCRIPTION))
            assert (r.code, r.remark, r.ext_fields["nextBeginOffset"]) == \
                (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", str(lo))
            # QUERY_CONSUMER_OFFSET: no commit and the queue no longer starts at 0 -> 22
            q = await ch.invoke(RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET,
                                                        {"consumerGroup": "g", "topic": "R", "queueId": 0}))
            assert q.code == ResponseCode.QUERY_NOT_FOUND
            await ch.aclose()
    run(go())


def test_long_polling_answers_on_arrival_and_at_the_timeout(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            b.topics.create("L", 1, 1, 6)
            consumer, producer = await client(b), await client(b)
            # parked for up to 10 s; answered as soon as a message arrives
            t0 = time.monotonic()
            waiting = asyncio.ensure_future(consumer.invoke(pull("g", "L", 0, 0, suspend_ms=10000), 15))
            await asyncio.sleep(0.5)
            assert not waiting.done() and b.pull_holds.count() == 1
            sent = await producer.invoke(send_v2("L", b"wake", queue_id=0))
            t_sent = time.monotonic()
            resp = await waiting
            latency = time.monotonic() - t_sent
            assert resp.code == ResponseCode.SUCCESS and [r.body for r in records(resp.body)] == [b"wake"]
            assert sent.code == 0 and latency < 0.1, f"held pull answered {latency * 1000:.0f} ms after the send"
            assert time.monotonic() - t0 < 2
            # nothing arrives: 19 at the suspend timeout, not before
            t0 = time.monotonic()
            resp = await consumer.invoke(pull("g", "L", 0, 1, suspend_ms=700), 5)
            waited = time.monotonic() - t0
            assert resp.code == ResponseCode.PULL_NOT_FOUND and resp.ext_fields["nextBeginOffset"] == "1"
            assert 0.65 <= waited < 1.5, waited
            # a held pull whose filter does not match what arrives stays held
            t0 = time.monotonic()
            held = pull("g", "L", 0, 1, suspend_ms=800, subscription="TagA")
            waiting = asyncio.ensure_future(consumer.invoke(held, 5))
            await asyncio.sleep(0.2)
            await producer.invoke(send_v2("L", b"other", tags="TagB", queue_id=0))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            resp = await waiting
            assert time.monotonic() - t0 >= 0.75 and resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY
            assert b.pull_holds.count() == 0
            await consumer.aclose()
            await producer.aclose()
    run(go())


def test_short_polling(tmp_path):
    async def go():
        async with broker(tmp_path, long_polling_enable=False, short_polling_time_mills=300) as b:
            b.topics.create("SP", 1, 1, 6)
            ch = await client(b)
            t0 = time.monotonic()
            resp = await ch.invoke(pull("g", "SP", 0, 0, suspend_ms=20000), 5)
            assert resp.code == ResponseCode.PULL_NOT_FOUND and 0.25 <= time.monotonic() - t0 < 1.0
            await ch.aclose()
    run(go())


def test_commit_offset_piggy_backed_on_pull(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            b.topics.create("C", 1, 1, 6)
            ch = await client(b)
            await ch.invoke(send_v2("C", b"x", queue_id=0))
            r = await ch.invoke(pull("g", "C", 0, 1, sys_flag=SUSPEND | SUBSCRIPTION | COMMIT, commit_offset=1,
                                     suspend_ms=300))
            assert r.code == ResponseCode.PULL_NOT_FOUND
            assert b.offsets.query_offset("g", "C", 0) == 1
            q = await ch.invoke(RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET,
                                                        {"consumerGroup": "g", "topic": "C", "queueId": 0}))
            assert (q.code, q.ext_fields["offset"]) == (0, "1")
            await ch.aclose()
    run(go())


@pytest.mark.parametrize("code, fields, missing", [
    (RequestCode.PULL_MESSAGE, {"consumerGroup": "g", "topic": "T", "queueId": 0, "maxMsgNums": 1, "sysFlag": 0,
                                "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0}, "queueOffset"),
    (RequestCode.SEND_MESSAGE_V2, {"a": "pg", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0}, "b"),
    (RequestCode.SEND_MESSAGE, {"producerGroup": "pg", "topic": "T", "defaultTopic": "TBW102",
                                "defaultTopicQueueNums": 4, "queueId": "zero", "sysFlag": 0, "bornTimestamp": 0,
                                "flag": 0}, "queueId"),
    (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "queueId": 0}, "topic"),
])
def test_bad_header_fields_are_named(tmp_path, code, fields, missing):
    async def go():
        async with broker(tmp_path) as b:
            ch = await client(b)
            resp = await ch.invoke(RemotingCommand.request(code, fields, b"x"))
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert f"<{missing}>" in resp.remark, resp.remark
            # the connection is still usable
            ok = await ch.invoke(RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": 0}))
            assert (ok.code, ok.ext_fields["offset"]) == (0, "0")
            await ch.aclose()
    run(go())


def test_a_store_written_through_the_broker_is_a_normal_store(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            ch = await client(b)
            for i in range(20):
                r = await ch.invoke(send_v2("N", f"n{i}".encode(), tags="T", keys=f"key-{i}", queue_id=i % 2))
                assert r.code == 0
            await ch.aclose()
            return b.store.root
    root = run(go())
    with MessageStore.open(root, read_only=True) as store:
        assert store.check().ok
        table = next(store.read_range("N", 1, 0, 100)).to_pydict()
        assert table["body"] == [f"n{i}".encode() for i in range(1, 20, 2)]
        assert table["keys"] == [f"key-{i}" for i in range(1, 20, 2)]
        props = dict(table["properties"][0])
        assert props["TAGS"] == "T" and props["CLUSTER"] == "DefaultCluster" and "UNIQ_KEY" in props
    assert not (root / "abort").exists()
