"""ScheduleMessageService (rocketstream/broker/schedule.py): delayed delivery, delayOffset.json, restarts."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rocketstream import codec
from rocketstream.broker.schedule import (
    ScheduleMessageService,
    dump_delay_offsets,
    load_delay_offsets,
    message_timeup,
)
from rocketstream.errors import OffsetFileError
from rocketstream.store import Message, MessageStore, StoreConfig
from rocketstream.store.write.messages import PutMessageResult, PutMessageStatus

REPO = Path(__file__).resolve().parents[2]
SCHED = codec.SCHEDULE_TOPIC
LEVELS = "1s 2s"


def open_store(root: Path, levels: str = LEVELS, **kw) -> MessageStore:
    return MessageStore.open(root, config=StoreConfig(root, message_delay_level=levels, **kw))


def service(store: MessageStore, **kw) -> ScheduleMessageService:
    svc = ScheduleMessageService(store, store.config.delay_levels_ms, store.root / "config", **kw)
    svc.load()
    return svc


def records(store: MessageStore, topic: str, queue_id: int) -> list[codec.MessageRecord]:
    units = store.read_cq_units(topic, queue_id, 0, store.max_offset(topic, queue_id))
    return [store.look_message_by_offset(int(u["offset"]), int(u["size"])) for u in units]


def put_delayed(store: MessageStore, n: int, level: int, topic: str = "T", queue_id: int = 1,
                prefix: str = "m") -> list[str]:
    keys = []
    for i in range(n):
        r = store.put_message(Message(topic, f"{prefix}{i}".encode(), tags="TagA", keys=f"K{prefix}{i}",
                                      properties={"seq": str(i)}, delay_level=level, flag=7,
                                      born_timestamp=1_700_000_000_000 + i), queue_id=queue_id)
        assert r.ok, r
        keys += r.msg_ids
    return keys


# ------------------------------------------------------------------------------------- record copy


def test_broker_copy_keeps_properties_and_is_not_delayed_again(tmp_path):
    """Message.broker_copy: DELAY is data, no UNIQ_KEY/WAIT added, no compression (store change for the
    schedule service)."""
    with open_store(tmp_path / "s") as store:
        props = {"DELAY": "2", "REAL_TOPIC": "T", "REAL_QID": "0", "x": "y"}
        big = b"z" * 10_000   # over compressMsgBodyOverHowmuch (4096)
        r = store.put_message(Message("T", big, properties=props, broker_copy=True), queue_id=0)
        assert r.ok and store.max_offset(SCHED, 1) == 0
        rec = records(store, "T", 0)[0]
        assert rec.properties == props   # same keys, same order, nothing added
        assert rec.body == big and not rec.sys_flag & codec.FLAG_COMPRESSED
        # a normal message with the same DELAY property is delayed (the producer path is unchanged)
        assert store.put_message(Message("T", b"a", properties={"DELAY": "2"}), queue_id=0).ok
        assert store.max_offset(SCHED, 1) == 1


def test_message_timeup_rebuilds_the_real_message(tmp_path):
    with open_store(tmp_path / "s") as store:
        put_delayed(store, 1, level=2, queue_id=3)
        rec = records(store, SCHED, 1)[0]
        msg, qid = message_timeup(rec)
        assert (msg.topic, qid) == ("T", 3)
        assert msg.properties == rec.properties and msg.broker_copy and msg.delay_level == 0
        assert (msg.body, msg.flag, msg.born_timestamp, msg.born_host) == (rec.body, 7, rec.born_timestamp,
                                                                          rec.born_host)


# ---------------------------------------------------------------------------------------- delivery


def test_due_units_only_and_in_order(tmp_path):
    with open_store(tmp_path / "s") as store:
        keys = put_delayed(store, 5, level=1)
        sched = records(store, SCHED, 0)
        due_at = [r.store_timestamp + 1000 for r in sched]
        svc = service(store)
        assert svc.deliver_due(1, now_ms=due_at[0] - 1) == (0, False)
        assert store.max_offset("T", 1) == 0
        # exactly the units whose delivery time has come, in queue order
        assert svc.deliver_due(1, now_ms=due_at[2])[0] >= 3
        n_first = store.max_offset("T", 1)
        assert svc.deliver_due(1, now_ms=due_at[-1] + 1)[0] == 5 - n_first
        got = records(store, "T", 1)
        assert [r.uniq_key for r in got] == keys
        assert [r.queue_offset for r in got] == list(range(5))
        assert svc.offset_table() == {1: 5}
        assert svc.delivered == 5 and svc.skipped == 0


def test_delivered_record_fields(tmp_path):
    """New queue offset / commit-log offset / store time in the real topic; everything else kept, the
    properties byte for byte (what 4.9.8 writes: see test_real_broker_delivery_shape)."""
    with open_store(tmp_path / "s") as store:
        put_delayed(store, 1, level=2, queue_id=2)
        src = records(store, SCHED, 1)[0]
        service(store).deliver_due(2, now_ms=src.store_timestamp + 2000)
        out = records(store, "T", 2)[0]
        assert out.topic == "T" and out.queue_id == 2 and out.queue_offset == 0
        assert out.physical_offset > src.physical_offset and out.store_timestamp >= src.store_timestamp
        assert list(out.properties.items()) == list(src.properties.items())
        assert out.properties["DELAY"] == "2" and out.properties["REAL_TOPIC"] == "T"
        for f in ("body", "flag", "sys_flag", "born_timestamp", "born_host", "reconsume_times"):
            assert getattr(out, f) == getattr(src, f), f
        # the unit's tags code is the TAGS hash again, not a time
        unit = store.read_cq_units("T", 2, 0, 1)[0]
        assert int(unit["tags_code"]) == codec.tags_code("TagA") == 2598919


def test_clock_back_delivers_now(tmp_path):
    """correctDeliverTimestamp: a deliver time beyond now + the level's delay is due at once."""
    with open_store(tmp_path / "s") as store:
        put_delayed(store, 1, level=2)
        ts = records(store, SCHED, 1)[0].store_timestamp
        svc = service(store)
        assert svc.deliver_due(2, now_ms=ts + 1999)[0] == 0          # not yet due
        assert svc.deliver_due(2, now_ms=ts - 60_000)[0] == 1        # clock went back a minute


def test_runs_on_the_event_loop_at_the_right_time(tmp_path):
    with open_store(tmp_path / "s") as store:
        calls: list[tuple[str, int]] = []

        def put(msg: Message, queue_id: int) -> PutMessageResult:   # the broker's wrapper
            calls.append((msg.topic, queue_id))
            return store.put_message(msg, queue_id)

        async def main() -> None:
            svc = service(store, put=put, first_delay_s=0)
            svc.start()
            svc.start()   # idempotent
            put_delayed(store, 3, level=1, queue_id=0, prefix="a")
            put_delayed(store, 2, level=2, queue_id=1, prefix="b")
            deadline = time.monotonic() + 10
            while store.max_offset("T", 0) + store.max_offset("T", 1) < 5 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            svc.stop()
            assert not svc.running

        asyncio.run(main())
        assert sorted(calls) == [("T", 0)] * 3 + [("T", 1)] * 2
        for qid, level in ((0, 1), (1, 2)):
            for src, out in zip(records(store, SCHED, level - 1), records(store, "T", qid), strict=True):
                late = out.store_timestamp - (src.store_timestamp + level * 1000)
                assert 0 <= late < 800, (level, late)   # checked every 100 ms
        text = (store.root / "config" / "delayOffset.json").read_text()
        assert text == '{\n\t"offsetTable":{1:3,2:2\n\t}\n}'


# ------------------------------------------------------------------------------- skips and retries


def test_unreadable_unit_is_skipped_with_a_log_line(tmp_path, caplog):
    with open_store(tmp_path / "s") as store:
        keys = put_delayed(store, 3, level=1)
        bad = records(store, SCHED, 0)[1]
        cl = store.commit_log.find_file(bad.physical_offset)
        pos = bad.physical_offset - cl.file_from_offset
        cl.mm[pos + 4:pos + 8] = b"\x00\x00\x00\x00"   # MAGICCODE gone: the record cannot be read
        svc = service(store)
        with caplog.at_level(logging.WARNING, logger="rocketstream.broker.schedule"):
            assert svc.deliver_due(1, now_ms=2**62)[0] == 3
        assert [r.uniq_key for r in records(store, "T", 1)] == [keys[0], keys[2]]
        assert svc.skipped == 1 and svc.offset_table() == {1: 3}
        assert any("unit 1" in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)


def test_record_without_real_topic_is_skipped(tmp_path, caplog):
    with open_store(tmp_path / "s") as store:
        # straight into the schedule queue, no DELAY: tags code 0 (due), no REAL_TOPIC
        assert store.put_message(Message(SCHED, b"x"), queue_id=0).ok
        put_delayed(store, 1, level=1)
        svc = service(store)
        with caplog.at_level(logging.ERROR, logger="rocketstream.broker.schedule"):
            assert svc.deliver_due(1, now_ms=2**62)[0] == 2
        assert store.max_offset("T", 1) == 1 and svc.skipped == 1
        assert any("REAL_TOPIC" in r.getMessage() for r in caplog.records)


def test_failed_put_is_retried_refused_put_is_skipped(tmp_path):
    with open_store(tmp_path / "s") as store:
        put_delayed(store, 3, level=1)
        answers = [PutMessageStatus.SERVICE_NOT_AVAILABLE, PutMessageStatus.MESSAGE_ILLEGAL]

        def put(msg: Message, queue_id: int) -> PutMessageResult:
            if answers:
                return PutMessageResult(answers.pop(0), reason="test")
            return store.put_message(msg, queue_id)

        svc = service(store, put=put)
        assert svc.deliver_due(1, now_ms=2**62) == (0, False)        # transient: stays on unit 0
        assert svc.offset_table() == {}
        assert svc.deliver_due(1, now_ms=2**62)[0] == 3              # unit 0 refused for good, 1 and 2 put
        assert [r.body for r in records(store, "T", 1)] == [b"m1", b"m2"]
        assert svc.skipped == 1


def test_put_exception_pauses_the_level_and_loses_nothing(tmp_path, caplog):
    with open_store(tmp_path / "s") as store:
        put_delayed(store, 2, level=1)
        fail = [True]

        def put(msg: Message, queue_id: int) -> PutMessageResult:
            if fail:
                fail.clear()
                raise OSError("disk full")
            return store.put_message(msg, queue_id)

        async def main() -> None:
            svc = service(store, put=put, first_delay_s=0, error_pause_s=0.3)
            svc.start()
            deadline = time.monotonic() + 10
            while store.max_offset("T", 1) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            svc.stop()

        with caplog.at_level(logging.ERROR, logger="rocketstream.broker.schedule"):
            asyncio.run(main())
        assert [r.body for r in records(store, "T", 1)] == [b"m0", b"m1"]
        assert any("delay level 1 failed" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- offsets and restarts


def test_offset_file_layout_and_round_trip(tmp_path):
    table = {2: 12, 1: 40}
    text = dump_delay_offsets(table)
    assert text == '{\n\t"offsetTable":{1:40,2:12\n\t}\n}'
    assert load_delay_offsets(text) == {1: 40, 2: 12}
    assert load_delay_offsets('{"offsetTable":{"3":5}}') == {3: 5}   # a standard JSON writer's quoted keys
    assert load_delay_offsets('{"offsetTable":{},"dataVersion":{"counter":1}}') == {}   # 5.x
    for bad, where in (('{"offsetTable":{1:"x"}}', 18), ('{"offsetTable":{"a":1}}', 16), ("[1]", 0),
                       ('{"offsetTable":{1:2', None)):
        with pytest.raises(OffsetFileError) as e:
            load_delay_offsets(bad, path="f.json")
        assert "f.json" in str(e.value)
        if where is not None:
            assert e.value.position == where


def test_stop_persists_and_a_restart_resumes(tmp_path):
    root = tmp_path / "s"
    with open_store(root) as store:
        put_delayed(store, 4, level=1, prefix="a")
        svc = service(store)
        svc.deliver_due(1, now_ms=2**62)
        svc.stop()
        assert (root / "config" / "delayOffset.json").read_text() == '{\n\t"offsetTable":{1:4\n\t}\n}'
    with open_store(root) as store:
        svc = service(store)
        assert svc.offset_table() == {1: 4}
        put_delayed(store, 2, level=1, prefix="b")
        assert svc.deliver_due(1, now_ms=2**62)[0] == 2
        assert [r.body for r in records(store, "T", 1)] == [b"a0", b"a1", b"a2", b"a3", b"b0", b"b1"]
        svc.stop()
        # the previous content is the backup, as ConfigManager keeps it
        assert (root / "config" / "delayOffset.json.bak").read_text() == '{\n\t"offsetTable":{1:4\n\t}\n}'


def test_position_outside_the_queue_is_corrected_on_load(tmp_path, caplog):
    root = tmp_path / "s"
    with open_store(root) as store:
        put_delayed(store, 2, level=1)
        (root / "config" / "delayOffset.json").write_text(dump_delay_offsets({1: 99, 7: 3}))
        with caplog.at_level(logging.ERROR, logger="rocketstream.broker.schedule"):
            svc = service(store)
        assert svc.offset_table() == {1: 2, 7: 3}   # unknown levels are kept, as Java's putAll keeps them
        assert any("corrected to 2" in r.getMessage() for r in caplog.records)


def test_corrupt_file_falls_back_to_backup_and_never_resets(tmp_path):
    root = tmp_path / "s"
    with open_store(root) as store:
        cfg = root / "config"
        (cfg / "delayOffset.json").write_text("{garbage")
        (cfg / "delayOffset.json.bak").write_text(dump_delay_offsets({1: 0}))
        assert service(store).offset_table() == {1: 0}
        (cfg / "delayOffset.json.bak").write_text("{also garbage")
        with pytest.raises(OffsetFileError, match="both unusable"):
            service(store)


CHILD = textwrap.dedent("""
    import asyncio, sys
    from rocketstream.store import Message, MessageStore, StoreConfig
    from rocketstream.broker.schedule import ScheduleMessageService
    root = sys.argv[1]
    store = MessageStore.open(root, config=StoreConfig(root, message_delay_level="1s 2s"))
    async def main():
        svc = ScheduleMessageService(store, store.config.delay_levels_ms, store.root / "config",
                                     first_delay_s=0, persist_interval_s=0.2)
        svc.load()
        svc.start()
        i = 0
        while True:
            for _ in range(20):
                assert store.put_message(Message("T", b"x%d" % i, delay_level=1 + i % 2), queue_id=0).ok
                i += 1
            print("put", i, "delivered", svc.delivered, flush=True)
            await asyncio.sleep(0.05)
    asyncio.run(main())
""")


def test_sigkill_loses_no_due_message(tmp_path):
    """A broker killed mid-delivery: after the restart every scheduled message reaches its topic at least
    once (duplicates only for units delivered after the last persist)."""
    root = tmp_path / "s"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(root)], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if int(line.split()[3]) >= 60:
                break
        else:
            pytest.fail(f"child ended early: {child.wait()}")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    persisted = load_delay_offsets((root / "config" / "delayOffset.json").read_text())
    with open_store(root) as store:
        delivered_before = store.max_offset("T", 0)
        assert delivered_before >= 60
        svc = service(store)
        assert svc.offset_table() == persisted
        svc.deliver_all_due(now_ms=2**62)
        scheduled = [r.uniq_key for q in (0, 1) for r in records(store, SCHED, q)]
        delivered = [r.uniq_key for r in records(store, "T", 0)]
        assert set(delivered) == set(scheduled)                     # none lost
        dups = len(delivered) - len(set(delivered))
        # re-delivered: at most what was delivered after the last persist
        assert dups <= delivered_before - sum(persisted.values())
        svc.stop()
        assert json.dumps(svc.offset_table()) == json.dumps({1: store.max_offset(SCHED, 0),
                                                             2: store.max_offset(SCHED, 1)})


def test_encode_and_registration(tmp_path):
    from types import SimpleNamespace

    from rocketstream.broker import send_back
    from rocketstream.remoting.codes import RequestCode

    with open_store(tmp_path / "s") as store:
        put_delayed(store, 2, level=2)
        svc = service(store)
        assert svc.encode() == '{"offsetTable":{}}'
        svc.deliver_due(2, now_ms=2**62)
        assert svc.encode() == '{"offsetTable":{2:2}}'   # Java's encode(): GET_ALL_DELAY_OFFSET's body
        registered: dict[int, object] = {}
        send_back.register(SimpleNamespace(server=SimpleNamespace(register=registered.__setitem__)))
        assert set(registered) == {RequestCode.CONSUMER_SEND_MSG_BACK}
