"""Transactional messages in our broker, over the wire against an in-process broker (broker/transaction.py):
the half message (stored in RMQ_SYS_TRANS_HALF_TOPIC, invisible in its real topic), END_TRANSACTION commit
and rollback with their op records, the header checks, the check-back (TRANSACTION_CHECK_TIMES raised on
every re-write, exactly transactionCheckMax checks, then TRANS_CHECK_MAX_TIME_TOPIC), transactions decided by
the producer never checked, CHECK_IMMUNITY_TIME_IN_SECONDS, and the settings.

The byte-level facts asserted here (properties order, no trailing separator, op record tag/body/born host,
WAIT=false in check bodies, consumer offsets of CID_RMQ_SYS_TRANS, which topics get a config) were read from
stores the real 4.9.8 broker wrote in the same scenarios; tests/client/test_transaction_brokers.py runs the
scenarios against both brokers and compares the stores."""

from __future__ import annotations

import asyncio
import time

import pytest

from rocketstream import codec
from rocketstream.broker import BrokerConfig
from rocketstream.broker.transaction import (
    REMOVE_TAG,
    SYS_TRANS_GROUP,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    java_hashmap_ordered,
)
from rocketstream.errors import RemotingTimeoutError, StoreConfigError
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode
from tests.broker.brokerutil import SUBSCRIPTION, broker, client, heartbeat, pull, records, send_v2

GROUP = "tx_pg"
TOPIC = "TxUnit"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def half_props(key: str, **extra: str) -> str:
    """What the Java producer sends for a transactional message (DefaultMQProducerImpl.sendMessageInTransaction)."""
    props = {"KEYS": key, "TAGS": "tg", "WAIT": "true", "TRAN_MSG": "true", "PGROUP": GROUP,
             "UNIQ_KEY": codec.new_uniq_key(), **extra}
    return codec.encode_properties(props)[:-1].decode()


def send_half(key: str, *, born: int | None = None, queue_id: int = 1, **extra: str) -> RemotingCommand:
    req = send_v2(TOPIC, f"body-{key}".encode(), props=half_props(key, **extra), queue_id=queue_id, born=born,
                  sys_flag=codec.TRANSACTION_PREPARED)
    req.ext_fields["a"] = GROUP
    return req


def end_tx(resp: RemotingCommand, kind: int, *, group: str = GROUP, oneway: bool = False, check: bool = False,
           **override: object) -> RemotingCommand:
    fields: dict[str, object] = {
        "producerGroup": group, "tranStateTableOffset": int(resp.ext_fields["queueOffset"]),
        "commitLogOffset": codec.decode_offset_msg_id(resp.ext_fields["msgId"])[1], "commitOrRollback": kind,
        "fromTransactionCheck": check, "msgId": "m"}
    fields.update(override)
    return RemotingCommand.request(RequestCode.END_TRANSACTION, fields, oneway=oneway)


def raw_props(store, phys: int) -> bytes:
    rec = store.look_message_by_offset(phys)
    raw = store.raw_record(phys)
    size = codec.record_size(len(rec.body), len(rec.topic.encode()), 0, born_v6=rec.born_host.is_v6,
                             store_v6=rec.store_host.is_v6)
    return raw[size:]


def queue_records(store, topic: str, queue_id: int) -> list[codec.MessageRecord]:
    lo, hi = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    if hi <= lo:
        return []
    return list(store.get_message("t", topic, queue_id, lo, hi - lo).messages)


def phys_of(resp: RemotingCommand) -> int:
    return codec.decode_offset_msg_id(resp.ext_fields["msgId"])[1]


async def until_clock_passes(ms: int) -> None:
    """The check pass skips records stored in the millisecond it starts: wait for the clock to move on."""
    deadline = time.monotonic() + 5
    while time.time_ns() // 1_000_000 <= ms:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.001)


async def wait_for(cond, what: str) -> None:
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.005)


def test_java_hashmap_order_is_what_4_9_8_wrote():
    # orders read from records the real broker wrote (half message, op record; tests/client/test_transaction_brokers.py)
    wire = [("KEYS", "c"), ("TAGS", "tg"), ("TRAN_MSG", "true"), ("PGROUP", "txg"), ("UNIQ_KEY", "X"),
            ("CLUSTER", "DefaultCluster"), ("WAIT", "true"), ("REAL_TOPIC", "TxTopic"), ("REAL_QID", "3")]
    assert list(java_hashmap_ordered(wire)) == ["REAL_TOPIC", "KEYS", "TRAN_MSG", "UNIQ_KEY", "CLUSTER", "PGROUP",
                                                "WAIT", "TAGS", "REAL_QID"]
    assert list(java_hashmap_ordered([("TAGS", "d"), ("WAIT", "true")])) == ["WAIT", "TAGS"]
    # a put of a key already there keeps its place and takes the new value
    assert java_hashmap_ordered([("TAGS", "a"), ("WAIT", "true"), ("TAGS", "b")]) == {"WAIT": "true", "TAGS": "b"}


def test_half_message_is_stored_in_the_half_topic_and_invisible(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            ch = await client(b)
            born = int(time.time() * 1000) - 5
            resp = await ch.invoke(send_half("a", born=born, queue_id=2))
            assert resp.code == ResponseCode.SUCCESS, resp
            # the answer: the real queue id, the half record's offsetMsgId and half-queue offset
            assert resp.ext_fields["queueId"] == "2" and resp.ext_fields["queueOffset"] == "0"
            rec = b.store.look_message_by_offset(phys_of(resp))
            assert (rec.topic, rec.queue_id, rec.queue_offset, rec.sys_flag) == (TRANS_HALF_TOPIC, 0, 0, 0)
            assert rec.body == b"body-a" and rec.born_timestamp == born
            props = raw_props(b.store, rec.physical_offset)
            # the map 4.9.8 writes: CLUSTER added, WAIT put back last, REAL_TOPIC/REAL_QID, HashMap order, no
            # separator after the last pair
            assert not props.endswith(b"\x02")
            assert list(rec.properties) == ["REAL_TOPIC", "KEYS", "TRAN_MSG", "UNIQ_KEY", "CLUSTER", "PGROUP", "WAIT",
                                            "TAGS", "REAL_QID"]
            assert rec.properties["REAL_TOPIC"] == TOPIC and rec.properties["REAL_QID"] == "2"
            assert rec.properties["WAIT"] == "true" and rec.properties["CLUSTER"] == "DefaultCluster"
            # invisible: nothing in the real topic's queue; a pull finds nothing
            assert b.store.max_offset(TOPIC, 2) == 0
            resp = await ch.invoke(pull("g", TOPIC, 2, 0, sys_flag=SUBSCRIPTION))
            assert resp.code != ResponseCode.SUCCESS and not records(resp.body)
            # neither the half nor the op topic gets a topic config from a send (only the check service makes
            # the half topic's, as 4.9.8 does)
            assert b.topics.get(TRANS_HALF_TOPIC) is None and b.topics.get(TRANS_OP_HALF_TOPIC) is None
            await ch.aclose()
    run(go())


def test_commit_rollback_and_their_op_records(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            ch = await client(b)
            committed = await ch.invoke(send_half("c", queue_id=1))
            rolled = await ch.invoke(send_half("r", queue_id=1))
            # the Java producer sends END_TRANSACTION oneway
            await ch.invoke_oneway(end_tx(committed, codec.TRANSACTION_COMMIT))
            resp = await ch.invoke(end_tx(rolled, codec.TRANSACTION_ROLLBACK))
            assert resp.code == ResponseCode.SUCCESS, resp
            # committed: in its real topic and queue, sysFlag COMMIT, preparedTransactionOffset = the half's
            # commit-log offset, the half's properties bytes unchanged (REAL_TOPIC, REAL_QID, TRAN_MSG, PGROUP kept)
            got = queue_records(b.store, TOPIC, 1)
            assert [r.body for r in got] == [b"body-c"]
            msg = got[0]
            assert msg.sys_flag == codec.TRANSACTION_COMMIT
            assert msg.prepared_transaction_offset == phys_of(committed)
            assert raw_props(b.store, msg.physical_offset) == raw_props(b.store, phys_of(committed))
            for name in ("REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP"):
                assert name in msg.properties
            # a consumer sees it
            resp = await ch.invoke(pull("g", TOPIC, 1, 0, sys_flag=SUBSCRIPTION))
            assert [r.body for r in records(resp.body)] == [b"body-c"]
            # op records: tag d, body the half queue offset, queue 0, born and stored by the broker, no topic config
            ops = queue_records(b.store, TRANS_OP_HALF_TOPIC, 0)
            assert [(r.body, r.properties) for r in ops] == [(b"0", {"WAIT": "true", "TAGS": REMOVE_TAG}),
                                                             (b"1", {"WAIT": "true", "TAGS": REMOVE_TAG})]
            host = codec.HostAddress("127.0.0.1", b.config.listen_port)
            assert all(r.born_host == host and r.sys_flag == 0 for r in ops)
            assert raw_props(b.store, ops[0].physical_offset) == b"WAIT\x01true\x02TAGS\x01d"
            assert b.topics.get(TRANS_OP_HALF_TOPIC) is None
            await ch.aclose()
    run(go())


def test_end_transaction_refusals_name_what_is_wrong(tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            ch = await client(b)
            half = await ch.invoke(send_half("x"))
            plain = await ch.invoke(send_v2(TOPIC, b"plain", queue_id=0))
            cases = [
                (end_tx(half, 8, group="other"), "The producer group wrong"),
                (end_tx(half, 8, tranStateTableOffset=5), "The transaction state table offset wrong"),
                (end_tx(half, 8, commitLogOffset=phys_of(half) + 1), "Find prepared transaction message failed"),
                (end_tx(half, 8, commitLogOffset=10**12), "Find prepared transaction message failed"),
                # a record of another topic is no half message
                (end_tx(plain, 8), "Find prepared transaction message failed"),
            ]
            for req, remark in cases:
                resp = await ch.invoke(req)
                assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, remark)
            # a bad header field is named
            resp = await ch.invoke(end_tx(half, 8, commitLogOffset="x1"))
            assert resp.code == ResponseCode.SYSTEM_ERROR and "commitLogOffset" in resp.remark
            req = end_tx(half, 8)
            del req.ext_fields["producerGroup"]
            resp = await ch.invoke(req)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "producerGroup" in resp.remark
            # UNKNOW (0) and unknown kinds are ignored: no answer, nothing written
            before = b.store.commit_log_max_offset()
            for kind in (0, 3):
                with pytest.raises(RemotingTimeoutError):
                    await ch.invoke(end_tx(half, kind), 0.5)
            assert b.store.commit_log_max_offset() == before
            assert b.store.max_offset(TOPIC, 1) == 0 and b.store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 0
            await ch.aclose()
    run(go())


def test_reject_transaction_message(tmp_path):
    async def go():
        async with broker(tmp_path, reject_transaction_message=True) as b:
            ch = await client(b)
            resp = await ch.invoke(send_half("x"))
            assert resp.code == ResponseCode.NO_PERMISSION and "transaction message is forbidden" in resp.remark
            assert b.store.max_offset(TRANS_HALF_TOPIC, 0) == 0
            await ch.aclose()
    run(go())


class Producer:
    """A connection registered as a producer of GROUP that records the CHECK_TRANSACTION_STATE requests."""

    def __init__(self) -> None:
        self.checks: list[RemotingCommand] = []
        self.ch = None

    def on_request(self, channel, request):
        if request.code == RequestCode.CHECK_TRANSACTION_STATE:
            assert request.is_oneway
            self.checks.append(request)
        return None

    async def start(self, b) -> Producer:
        self.ch = await client(b, on_request=self.on_request)
        resp = await self.ch.invoke(heartbeat("tx-client", "none", {}, producer=GROUP))
        assert resp.code == ResponseCode.SUCCESS
        return self

    async def wait_checks(self, n: int) -> None:
        deadline = time.monotonic() + 10
        while len(self.checks) < n:
            assert time.monotonic() < deadline, f"{len(self.checks)} checks, expected {n}"
            await asyncio.sleep(0.01)


def test_check_back_count_then_trans_check_max_time_topic(tmp_path):
    async def go():
        async with broker(tmp_path, transaction_time_out=0, transaction_check_max=3) as b:
            p = await Producer().start(b)
            service = b.transactions
            born = int(time.time() * 1000) - 1000
            undecided = await p.ch.invoke(send_half("u", born=born, queue_id=3))
            decided = await p.ch.invoke(send_half("d", born=born, queue_id=3))
            await p.ch.invoke_oneway(end_tx(decided, codec.TRANSACTION_COMMIT))
            await wait_for(lambda: b.store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 1, "the op record of the commit")
            uniq = b.store.look_message_by_offset(phys_of(undecided)).properties["UNIQ_KEY"]
            for n in range(1, 4):
                await until_clock_passes(b.store.last_store_timestamp(TRANS_HALF_TOPIC, 0))
                await service.check()
                await p.wait_checks(n)
                req = p.checks[-1]
                half = queue_records(b.store, TRANS_HALF_TOPIC, 0)[-1]   # the re-written half message
                assert half.properties["TRANSACTION_CHECK_TIMES"] == str(n)
                assert not raw_props(b.store, half.physical_offset).endswith(b"\x02")
                ext = req.ext_fields
                assert int(ext["commitLogOffset"]) == half.physical_offset
                assert int(ext["tranStateTableOffset"]) == half.queue_offset
                assert ext["offsetMsgId"] == half.offset_msg_id
                assert ext["msgId"] == ext["transactionId"] == uniq
                # the body: the re-written record with its real topic and queue id, WAIT=false (4.9.8's map)
                (body,) = records(req.body)
                assert (body.topic, body.queue_id, body.body) == (TOPIC, 3, b"body-u")
                assert body.queue_offset == half.queue_offset and body.physical_offset == half.physical_offset
                assert body.properties["TRANSACTION_CHECK_TIMES"] == str(n) and body.properties["WAIT"] == "false"
            # checked transactionCheckMax (3) times: the next pass moves it to TRANS_CHECK_MAX_TIME_TOPIC
            await until_clock_passes(b.store.last_store_timestamp(TRANS_HALF_TOPIC, 0))
            await service.check()
            await service.check()
            assert len(p.checks) == 3 and service.discarded == 1
            (moved,) = queue_records(b.store, TRANS_CHECK_MAX_TIME_TOPIC, 0)
            assert moved.body == b"body-u" and moved.properties["TRANSACTION_CHECK_TIMES"] == "3"
            tc = b.topics.get(TRANS_CHECK_MAX_TIME_TOPIC)
            assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (1, 1, 6)
            # the transaction decided by its producer was never checked, and never reached the real topic twice
            assert all(r.ext_fields["msgId"] == uniq for r in p.checks)
            assert [r.body for r in queue_records(b.store, TOPIC, 3)] == [b"body-d"]
            # the check service made the half topic's config (1 queue) and moved CID_RMQ_SYS_TRANS's offsets past
            # everything it handled; the op topic still has no config
            half_tc = b.topics.get(TRANS_HALF_TOPIC)
            assert (half_tc.read_queue_nums, half_tc.write_queue_nums) == (1, 1)
            assert b.topics.get(TRANS_OP_HALF_TOPIC) is None
            half_max = b.store.max_offset(TRANS_HALF_TOPIC, 0)
            assert b.offsets.query_offset(SYS_TRANS_GROUP, TRANS_HALF_TOPIC, 0) == half_max
            assert b.offsets.query_offset(SYS_TRANS_GROUP, TRANS_OP_HALF_TOPIC, 0) == 1
            await p.ch.aclose()
    run(go())


def test_check_back_answered_commit_and_young_messages_wait(tmp_path):
    async def go():
        async with broker(tmp_path, transaction_time_out=3_600_000) as b:
            p = await Producer().start(b)
            old = await p.ch.invoke(send_half("old", born=int(time.time() * 1000) - 7_200_000, queue_id=0))
            await p.ch.invoke(send_half("young", queue_id=0))
            await until_clock_passes(b.store.last_store_timestamp(TRANS_HALF_TOPIC, 0))
            await b.transactions.check()
            await p.wait_checks(1)
            assert len(p.checks) == 1   # the young one (born < transactionTimeOut ago) is not checked yet
            ext = p.checks[0].ext_fields
            assert int(ext["commitLogOffset"]) != phys_of(old)   # the check names the re-written copy
            # the producer answers the check: commit, fromTransactionCheck
            req = RemotingCommand.request(RequestCode.END_TRANSACTION, {
                "producerGroup": GROUP, "tranStateTableOffset": ext["tranStateTableOffset"],
                "commitLogOffset": ext["commitLogOffset"], "commitOrRollback": 8, "fromTransactionCheck": True,
                "msgId": ext["msgId"], "transactionId": ext["transactionId"]}, oneway=True)
            await p.ch.invoke_oneway(req)
            await wait_for(lambda: b.store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 1, "the op record of the commit")
            await until_clock_passes(b.store.last_store_timestamp(TRANS_OP_HALF_TOPIC, 0))
            (msg,) = queue_records(b.store, TOPIC, 0)
            assert msg.body == b"body-old" and msg.prepared_transaction_offset == int(ext["commitLogOffset"])
            # the next pass finds its op record: no further check of it
            await b.transactions.check()
            await asyncio.sleep(0)
            assert len(p.checks) == 1
            await p.ch.aclose()
    run(go())


def test_check_immunity_time(tmp_path):
    async def go():
        async with broker(tmp_path, transaction_time_out=0) as b:
            p = await Producer().start(b)
            born = int(time.time() * 1000) - 1000
            immune = await p.ch.invoke(send_half("imm", born=born, CHECK_IMMUNITY_TIME_IN_SECONDS="3600"))
            await until_clock_passes(b.store.last_store_timestamp(TRANS_HALF_TOPIC, 0))
            await b.transactions.check()
            # still immune: not checked, written again with the first copy's queue offset
            assert p.checks == []
            copy = queue_records(b.store, TRANS_HALF_TOPIC, 0)[-1]
            assert copy.queue_offset == 1 and copy.properties["TRAN_PREPARED_QUEUE_OFFSET"] == "0"
            # the producer commits the first copy. 4.9.8's next pass counts that op record as done (its half offset
            # is below the pass's start) and so writes the still-immune copy once more - never checking it
            await p.ch.invoke_oneway(end_tx(immune, codec.TRANSACTION_COMMIT))
            await wait_for(lambda: b.store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 1, "the op record of the commit")
            await until_clock_passes(b.store.last_store_timestamp(TRANS_OP_HALF_TOPIC, 0))
            await b.transactions.check()
            assert p.checks == [] and b.store.max_offset(TRANS_HALF_TOPIC, 0) == 3
            again = queue_records(b.store, TRANS_HALF_TOPIC, 0)[-1]
            assert again.properties["TRAN_PREPARED_QUEUE_OFFSET"] == "0"
            assert again.properties["TRANSACTION_CHECK_TIMES"] == "2"
            assert b.offsets.query_offset(SYS_TRANS_GROUP, TRANS_HALF_TOPIC, 0) == 2
            assert b.offsets.query_offset(SYS_TRANS_GROUP, TRANS_OP_HALF_TOPIC, 0) == 1
            assert [r.body for r in queue_records(b.store, TOPIC, 1)] == [b"body-imm"]
            await p.ch.aclose()
    run(go())


def test_check_service_runs_every_interval(tmp_path):
    async def go():
        async with broker(tmp_path, transaction_time_out=0, transaction_check_interval=50) as b:
            p = await Producer().start(b)
            await p.ch.invoke(send_half("i", born=int(time.time() * 1000) - 1000))
            await p.wait_checks(2)   # checked on its own, again and again
            await p.ch.aclose()
    run(go())


def test_transaction_settings(tmp_path):
    cfg = BrokerConfig()
    assert (cfg.transaction_time_out, cfg.transaction_check_max, cfg.transaction_check_interval,
            cfg.reject_transaction_message) == (6000, 15, 60000, False)
    conf = tmp_path / "broker.conf"
    conf.write_text("transactionTimeOut=1000\ntransactionCheckMax=3\ntransactionCheckInterval=500\n"
                    "rejectTransactionMessage=true\n")
    cfg = BrokerConfig.from_conf(conf)
    assert (cfg.transaction_time_out, cfg.transaction_check_max, cfg.transaction_check_interval,
            cfg.reject_transaction_message) == (1000, 3, 500, True)
    conf.write_text("transactionCheckInterval=0\n")
    with pytest.raises(StoreConfigError, match="transactionCheckInterval"):
        BrokerConfig.from_conf(conf)
    conf.write_text("transactionTimeOut=soon\n")
    with pytest.raises(StoreConfigError, match="transactionTimeOut"):
        BrokerConfig.from_conf(conf)
