"""Issue 19 defects 3-7 (security review of ``rocketstream serve``): names from the wire are validated before
anything is kept, queue counts are bounded, long admin work leaves the loop free, UPDATE_BROKER_CONFIG changes
only what changes at run time, a held pull's time is capped, auto-created topics are written and announced
together. Each test runs an in-process broker (tests/broker/brokerutil.py) and speaks the wire protocol."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from rocketstream.broker import BrokerConfig, topic_manager
from rocketstream.broker.topic_manager import TopicConfig, TopicConfigManager
from rocketstream.codec import names
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode, json_body
from rocketstream.remoting.server import RemotingServer
from rocketstream.store import Message
from rocketstream.store.meta.topic_config import TopicConfigTable
from tests.broker.brokerutil import broker, client, heartbeat, pull, send_v2

TIMEOUT = 30.0


def run(coro):
    return asyncio.run(coro)


def create_topic(topic: str, queues: int = 4) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False})


def send_back(group: str, offset: int = 0) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK,
                                   {"offset": offset, "group": group, "delayLevel": 0, "unitMode": False})


def topics_json(controller) -> dict:
    return json.loads((Path(controller.store.root) / "config" / "topics.json").read_text())["topicConfigTable"]


# ------------------------------------------------------------------------------------------------ names
def test_name_rules():
    assert names.topic_problem("abc") is None and names.topic_problem("%RETRY%g|x-_1") is None
    for bad in ("abc\n", "a b", "", "  ", "é", "a" * 128, None):
        assert names.topic_problem(bad) is not None, bad
    assert names.topic_problem("a" * 127) is None
    assert names.group_problem("g" * 255) is None and names.group_problem("g" * 256) is not None
    assert names.group_problem("g\n") is not None
    assert names.derived_topic_problem("g" * 120) is None and names.derived_topic_problem("g" * 121) is not None
    assert names.registered_topic_problem("%RETRY%" + "g" * 255) is None   # a 5.x broker's long retry topic
    assert names.registered_topic_problem("%RETRY%" + "g\n" * 100) is not None
    long_remark = names.group_problem("g" * 8_000_000)
    assert long_remark is not None and len(long_remark) < 300   # a remark never echoes the whole name


def test_send_back_with_a_huge_group_creates_nothing(tmp_path):
    """Defect 3: the send-back of an 8.5 MB group made a 17 MB topics.json (here 2 MB)."""
    async def main():
        async with broker(tmp_path) as b:
            ch = await client(b)
            before = set(topics_json(b))
            for group in ("g" * 2_000_000, "g" * 121, "bad\ngroup"):
                resp = await ch.invoke(send_back(group), TIMEOUT)
                assert resp.code == ResponseCode.SYSTEM_ERROR, resp
                assert "group" in resp.remark and len(resp.remark) < 400
                assert b.topics.get("%RETRY%" + group) is None and b.topics.get("%DLQ%" + group) is None
                assert b.subscription_groups.get(group) is None
            assert set(topics_json(b)) == before
            assert (Path(b.store.root) / "config" / "topics.json").stat().st_size < 100_000
            # a legal group still gets its retry topic (the offset holds no record: SYSTEM_ERROR after it)
            resp = await ch.invoke(send_back("g" * 120), TIMEOUT)
            assert resp.remark.startswith("look message by offset failed")
            assert b.topics.get("%RETRY%" + "g" * 120) is not None
            await ch.aclose()
    run(main())


def test_names_from_pull_heartbeat_and_offsets_are_checked(tmp_path):
    async def main():
        async with broker(tmp_path) as b:
            ch = await client(b)
            assert (await ch.invoke(create_topic("T"), TIMEOUT)).code == 0
            huge = "g" * 300
            for req in (pull(huge, "T", 0, 0, suspend_ms=0), heartbeat("c1", huge, {"T": "*"}),
                        RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                            "consumerGroup": "g", "topic": "T\n", "queueId": 0, "commitOffset": 1})):
                resp = await ch.invoke(req, TIMEOUT)
                assert resp.code == ResponseCode.SYSTEM_ERROR and "<" in resp.remark, resp
            assert b.subscription_groups.get(huge) is None and b.topics.get("%RETRY%" + huge) is None
            assert not any(k.startswith("T\n") for k in b.offsets.table())
            await ch.aclose()
    run(main())


def test_topic_with_a_trailing_newline_is_refused(tmp_path):
    """Defect 5: ``^...$`` with re.match took "abc\\n"."""
    async def main():
        async with broker(tmp_path) as b:
            ch = await client(b)
            resp = await ch.invoke(send_v2("abc\n", b"x"), TIMEOUT)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in resp.remark
            resp = await ch.invoke(create_topic("abc\n"), TIMEOUT)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in resp.remark
            assert b.topics.get("abc\n") is None and "abc\n" not in topics_json(b)
            await ch.aclose()
    run(main())


def test_illegal_name_already_kept_is_deletable_and_not_registered(tmp_path):
    """A topics.json written before names were checked: registration leaves the name out, DELETE_TOPIC
    removes it, and a restart finds it gone."""
    bad = "%RETRY%" + "g" * 5000
    async def main():
        async with broker(tmp_path) as b:
            b.store.topic_config.put(bad, TopicConfig(bad, 1, 1).to_json())
            b.store.topic_config.put("abc\n", TopicConfig("abc\n", 1, 1).to_json())
            table = b.topics.wrapper_json()["topicConfigTable"]
            assert bad not in table and "abc\n" not in table and "TBW102" in table
            ch = await client(b)
            for topic in (bad, "abc\n"):
                resp = await ch.invoke(RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}),
                                       TIMEOUT)
                assert resp.code == ResponseCode.SUCCESS, resp
            # a name the table does not hold is still refused with TopicValidator's remark
            resp = await ch.invoke(RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "x y"}),
                                   TIMEOUT)
            assert resp.code == ResponseCode.SYSTEM_ERROR
            await ch.aclose()
        async with broker(tmp_path) as b:
            assert b.topics.get(bad) is None and b.topics.get("abc\n") is None
    run(main())


# ------------------------------------------------------------------------------------------------ queue counts
def test_queue_counts_are_bounded(tmp_path):
    """Defect 4: UPDATE_AND_CREATE_TOPIC took 2·10⁹ queues; GET_TOPIC_STATS_INFO then walked them on the loop."""
    async def main():
        async with broker(tmp_path) as b:   # the default bound: 1,024 queues
            ch = await client(b)
            resp = await ch.invoke(create_topic("Big", 2_000_000_000), TIMEOUT)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "maxTopicQueueNums 1024" in resp.remark
            assert b.topics.get("Big") is None
            assert (await ch.invoke(create_topic("Ok", 1024), TIMEOUT)).code == 0
            group = {"groupName": "G", "retryQueueNums": 1025}
            resp = await ch.invoke(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                                           body=json_body.dumps(group)), TIMEOUT)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "retryQueueNums" in resp.remark
            # a topic kept before the bound: its stats are refused at once, naming the setting
            b.store.topic_config.put("Old", TopicConfig("Old", 2_000_000_000, 2_000_000_000).to_json())
            started = time.monotonic()
            resp = await ch.invoke(RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Old"}),
                                   TIMEOUT)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "maxTopicQueueNums" in resp.remark
            assert time.monotonic() - started < 5.0
            await ch.aclose()
    run(main())


def test_topic_stats_leave_the_loop_free(tmp_path):
    """While the stats of the largest allowed topic are computed, other requests are answered: a store
    made slow (1 ms per queue offset lookup, 1,024 queues: over a second of work) must not hold a
    control request for more than a fraction of it."""
    async def main():
        async with broker(tmp_path) as b:
            ch = await client(b)
            cap = 1024   # the default maxTopicQueueNums
            assert (await ch.invoke(create_topic("Wide", cap), TIMEOUT)).code == 0
            real_min = b.store.min_offset

            def slow_min(topic, queue_id):
                if topic == "Wide":
                    time.sleep(0.001)
                return real_min(topic, queue_id)

            b.store.min_offset = slow_min
            stats = asyncio.ensure_future(ch.invoke(
                RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Wide"}), TIMEOUT))
            await asyncio.sleep(0.1)
            rtts = []
            while not stats.done():
                started = time.monotonic()
                resp = await ch.invoke(RemotingCommand.request(RequestCode.GET_BROKER_CONFIG), TIMEOUT)
                assert resp.code == 0
                rtts.append(time.monotonic() - started)
            resp = await stats
            assert resp.code == 0 and len(json_body.loads(resp.body)["offsetTable"]) == cap
            assert len(rtts) >= 3, rtts              # answered all along, not once at the end
            assert max(rtts) < 0.5, rtts             # the goal is < 50 ms; generous for a loaded machine
            await ch.aclose()
    run(main())


# ------------------------------------------------------------------------------------------------ broker config
def test_update_broker_config_refuses_settings_read_at_start(tmp_path):
    """Defect 6: storePathRootDir, flushDiskType, aclEnable were taken and reported, none in force."""
    async def main():
        async with broker(tmp_path) as b:
            ch = await client(b)

            async def config() -> dict[str, str]:
                resp = await ch.invoke(RemotingCommand.request(RequestCode.GET_BROKER_CONFIG), TIMEOUT)
                return dict(line.split("=", 1) for line in resp.body.decode().splitlines())

            before = await config()
            for line in (b"storePathRootDir=/tmp/elsewhere\n", b"flushDiskType=SYNC_FLUSH\n", b"aclEnable=true\n",
                         b"longPollingEnable=false\nlistenPort=1\n"):
                resp = await ch.invoke(RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=line), TIMEOUT)
                name = line.split(b"\n")[-2].split(b"=")[0].decode()
                assert resp.code == ResponseCode.SYSTEM_ERROR and name in resp.remark, resp
                assert "restart" in resp.remark
            assert await config() == before
            assert b.config.long_polling_enable is True   # refused whole
            resp = await ch.invoke(RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG,
                                                           body=b"shortPollingTimeMills=0\n"), TIMEOUT)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "shortPollingTimeMills" in resp.remark
            resp = await ch.invoke(RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG,
                                                           body=b"maxTopicQueueNums=8\n"), TIMEOUT)
            assert resp.code == 0 and (await config())["maxTopicQueueNums"] == "8"
            resp = await ch.invoke(create_topic("Nine", 9), TIMEOUT)
            assert resp.code == ResponseCode.SYSTEM_ERROR   # the new value is in force
            await ch.aclose()
    run(main())


# ------------------------------------------------------------------------------------------------ held pulls
def test_held_pull_time_is_capped_and_keeps_no_body(tmp_path):
    """Defect 7: a pull asking 10¹² ms was held that long, with whatever body it carried."""
    async def main():
        async with broker(tmp_path) as b:
            ch = await client(b)
            resp = await ch.invoke(RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG,
                                                           body=b"maxPullSuspendTimeMills=300\n"), TIMEOUT)
            assert resp.code == 0
            assert (await ch.invoke(create_topic("T", 1), TIMEOUT)).code == 0
            req = pull("G", "T", 0, 0, suspend_ms=10**12)
            req.body = b"x" * 1_000_000
            started = time.monotonic()
            answer = asyncio.ensure_future(ch.invoke(req, 10.0))   # on main: held past it, a timeout
            deadline = time.monotonic() + TIMEOUT
            while b.pull_holds.count() == 0 and not answer.done():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            held = [r for waiting in b.pull_holds.held.values() for r in waiting]
            assert held and all(r.request.body is None for r in held)
            resp = await answer
            assert resp.code == ResponseCode.PULL_NOT_FOUND
            assert time.monotonic() - started < 10.0
            await ch.aclose()
    run(main())


# ------------------------------------------------------------------------------------------------ auto-created topics
class _CountingTable(TopicConfigTable):
    saves = 0

    def save(self) -> None:
        self.saves += 1
        super().save()


def test_auto_created_topics_are_written_and_announced_together(tmp_path):
    """Defect 7: each auto-created topic rewrote topics.json and re-registered the whole table. Created in
    one loop turn, 500 topics cost one write and one announcement; each is in the table at once, in
    topics.json after the delay, and a flush (the broker's stop) writes what is pending."""
    table = _CountingTable(tmp_path, read_only=False)
    announced = []
    cfg = BrokerConfig()   # topicConfigFlushDelayMills 100
    topics = TopicConfigManager(table, cfg, on_change=lambda: announced.append(1))
    topics.init_system_topics()
    table.save()

    async def main():
        base = table.saves
        # the first topic after a quiet window: written and announced at once (routable right away)
        assert topics.create_in_send("T0", "TBW102", "127.0.0.1:1", 4) is not None
        assert table.saves == base + 1 and len(announced) == 1
        for i in range(1, 500):
            assert topics.create_in_send(f"T{i}", "TBW102", "127.0.0.1:1", 4) is not None
            assert topics.get(f"T{i}") is not None
        assert table.saves == base + 1 and len(announced) == 1
        deadline = time.monotonic() + TIMEOUT
        while table.saves == base + 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        assert table.saves == base + 2 and len(announced) == 2
        on_disk = json.loads(table.path.read_text())["topicConfigTable"]
        assert all(f"T{i}" in on_disk for i in range(500))
        topics.create_in_send_back("%RETRY%G", 1, 6)   # within the next window: pending
        assert table.saves == base + 2
        topics.flush()                     # the stop: written now, the timer does nothing more
        assert "%RETRY%G" in json.loads(table.path.read_text())["topicConfigTable"]
        await asyncio.sleep(0.7)           # past the window (0.5 s at ~510 topics)
        assert table.saves == base + 3 and len(announced) == 3
        # an admin create is written before it returns, the pending auto-created ones with it
        topics.create_in_send("Auto", "TBW102", "127.0.0.1:1", 4)
        topics.create("Admin", 2, 2, 6)
        on_disk = json.loads(table.path.read_text())["topicConfigTable"]
        assert "Admin" in on_disk and "Auto" in on_disk
    asyncio.run(main())
    with pytest.raises(Exception, match="topic"):
        topics.create_in_send("bad\n", "TBW102", "127.0.0.1:1", 4)
    assert topic_manager.validate_topic("TBW102") is not None


def test_broker_stop_writes_pending_topics(tmp_path):
    async def main():
        async with broker(tmp_path) as b:
            ch = await client(b)
            resp = await ch.invoke(RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG,
                                                           body=b"topicConfigFlushDelayMills=60000\n"), TIMEOUT)
            assert resp.code == 0
            resp = await ch.invoke(send_v2("First", b"x"), TIMEOUT)
            assert resp.code == 0 and "First" in topics_json(b)   # the first of a window: written at once
            resp = await ch.invoke(send_v2("AutoCreated", b"x"), TIMEOUT)
            assert resp.code == 0
            assert "AutoCreated" not in topics_json(b)   # waiting for the end of its window
            await ch.aclose()
        async with broker(tmp_path) as b:
            assert b.topics.get("AutoCreated") is not None
            assert b.store.put_message(Message(topic="AutoCreated", body=b"y"), 0).ok
    run(main())


def test_auto_created_topics_are_announced_incrementally(tmp_path):
    """With ``on_new_topics`` (the controller's incremental registration), the topics created in one loop
    turn are announced on the next, alone: no whole-table registration per window."""
    table = _CountingTable(tmp_path, read_only=False)
    full, increments = [], []
    topics = TopicConfigManager(table, BrokerConfig(), on_change=lambda: full.append(1),
                                on_new_topics=increments.append)
    topics.init_system_topics()

    async def main():
        for i in range(300):
            topics.create_in_send(f"T{i}", "TBW102", "127.0.0.1:1", 4)
        assert not increments
        await asyncio.sleep(0)
        assert len(increments) == 1 and set(increments[0]["topicConfigTable"]) == {f"T{i}" for i in range(300)}
        assert increments[0]["dataVersion"] == topics.data_version
        topics.create_in_send("Later", "TBW102", "127.0.0.1:1", 4)
        await asyncio.sleep(0)
        assert len(increments) == 2 and set(increments[1]["topicConfigTable"]) == {"Later"}
        topics.flush()
        assert not full and "Later" in json.loads(table.path.read_text())["topicConfigTable"]
    asyncio.run(main())


def test_a_send_that_creates_its_topic_answers_after_registering_it(tmp_path):
    """``createTopicInSendMessageMethod`` registers a topic it created before the send goes on, so a route query
    made after the send's answer finds it. Ours answered first and registered on the next loop turn (a test that
    asked the name server right after the answer got TOPIC_NOT_EXIST under CI load). A name server that answers
    each registration 0.3 s late shows the order: the send's answer must come after the registration carrying the
    new topic was answered."""
    registered: list[tuple[float, set[str]]] = []   # (answered at, topics in the registration)

    async def register(channel, request: RemotingCommand):
        topics = set(json_body.loads(request.body)["topicConfigSerializeWrapper"]["topicConfigTable"])
        await asyncio.sleep(0.3)
        registered.append((time.monotonic(), topics))
        return request.response(ResponseCode.SUCCESS)

    async def main():
        ns = RemotingServer("127.0.0.1", 0, name="slow-namesrv", idle_timeout_s=None)
        ns.register(RequestCode.REGISTER_BROKER, register)
        ns.default_processor = lambda ch, req: None if req.is_oneway else req.response(ResponseCode.SUCCESS)
        await ns.start()
        try:
            async with broker(tmp_path, namesrv_addr=ns.address) as b:
                ch = await client(b)
                r = await ch.invoke(send_v2("Fresh", b"x", queue_id=0))
                answered = time.monotonic()
                assert r.code == ResponseCode.SUCCESS, r
                with_topic = [at for at, topics in registered if "Fresh" in topics]
                assert with_topic and with_topic[0] <= answered, registered
                # the topic is announced alone (an incremental registration), once: the next send creates nothing
                assert (await ch.invoke(send_v2("Fresh", b"y", queue_id=0))).code == ResponseCode.SUCCESS
                assert [topics for _, topics in registered if topics == {"Fresh"}] == [{"Fresh"}]
                await ch.aclose()
        finally:
            await ns.stop()
    run(main())
