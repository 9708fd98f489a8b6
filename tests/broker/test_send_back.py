"""CONSUMER_SEND_MSG_BACK (rocketstream/broker/send_back.py) over a fake controller, and the records it
and the schedule service write compared with what the real 4.9.8 broker wrote (tests/realstore)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocketstream import codec
from rocketstream.broker.schedule import ScheduleMessageService, dump_delay_offsets, load_delay_offsets
from rocketstream.broker.send_back import send_back
from rocketstream.errors import HeaderFieldError
from rocketstream.remoting.codes import RequestCode, ResponseCode, Version
from rocketstream.remoting.command import RemotingCommand
from rocketstream.store import Message, MessageStore, StoreConfig
from rocketstream.store.write.messages import PutMessageResult, PutMessageStatus

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:   # tests.realstore is imported as a package from the repository root
    sys.path.insert(0, str(REPO))

# ``real_stores`` (stores the real 4.9.8 broker wrote; skips without Java) is a session fixture of
# tests/conftest.py, generated once for the whole run.

SCHED = codec.SCHEDULE_TOPIC
OFFSET_ID = re.compile(r"[0-9A-F]{32}")


@dataclass
class Group:
    retry_queue_nums: int = 1
    retry_max_times: int = 16


@dataclass
class Topics:
    perm: int = 6
    calls: list[tuple] = field(default_factory=list)

    def create_in_send_back(self, topic: str, queue_nums: int, perm: int, sys_flag: int = 0):
        self.calls.append((topic, queue_nums, perm, sys_flag))
        return SimpleNamespace(topic_name=topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums,
                               perm=self.perm if topic.startswith("%RETRY%") else perm, topic_sys_flag=sys_flag)


class Groups:
    def __init__(self, groups: dict[str, Group], auto: bool = False) -> None:
        self.groups = groups
        self.auto = auto

    def find_or_create(self, group: str, auto_create: bool):
        if group not in self.groups and auto_create and self.auto:
            self.groups[group] = Group()
        return self.groups.get(group)


class Controller:
    def __init__(self, store: MessageStore, **groups: Group) -> None:
        self.store = store
        self.topics = Topics()
        self.subscription_groups = Groups(groups or {"G": Group()})
        self.config = SimpleNamespace(broker_permission=6, broker_ip1="127.0.0.1",
                                      auto_create_subscription_group=True)
        self.puts: list[tuple[Message, int]] = []
        self.put_status: PutMessageStatus | None = None

    def put_message(self, msg: Message, queue_id: int) -> PutMessageResult:
        self.puts.append((msg, queue_id))
        if self.put_status is not None:
            return PutMessageResult(self.put_status, reason="test")
        return self.store.put_message(msg, queue_id)


def request(offset: object = None, group: object = "G", delay: object = 0, version: int = Version.CURRENT,
            **extra: object) -> RemotingCommand:
    fields = {"offset": offset, "group": group, "delayLevel": delay, **extra}
    req = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK,
                                  {k: v for k, v in fields.items() if v is not None})
    req.version = version
    return req


def open_store(root: Path, levels: str | None = None) -> MessageStore:
    cfg = StoreConfig(root) if levels is None else StoreConfig(root, message_delay_level=levels)
    return MessageStore.open(root, config=cfg)


def only(store: MessageStore, topic: str, queue_id: int) -> codec.MessageRecord:
    assert store.max_offset(topic, queue_id) == 1, (topic, queue_id, store.max_offset(topic, queue_id))
    u = store.read_cq_units(topic, queue_id, 0, 1)[0]
    return store.look_message_by_offset(int(u["offset"]), int(u["size"]))


def original(store: MessageStore, **kw) -> codec.MessageRecord:
    kw.setdefault("properties", {"a": "1"})
    r = store.put_message(Message("TopicA", b"body", tags="TagA", keys="K1", flag=5,
                                  born_timestamp=1_700_000_000_123, **kw), queue_id=2)
    assert r.ok
    return store.look_message_by_offset(r.physical_offset)


# ---------------------------------------------------------------------------------------- retry


def test_first_retry_goes_through_the_schedule_topic(tmp_path):
    with open_store(tmp_path / "s") as store:
        ctl = Controller(store)
        orig = original(store)
        resp = send_back(ctl, None, request(orig.physical_offset, delay=0))
        assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
        assert ctl.topics.calls == [("%RETRY%G", 1, 6, 0)]
        rec = only(store, SCHED, 2)   # level 3 + reconsumeTimes(0) -> queue 2
        p = rec.properties
        assert (p["REAL_TOPIC"], p["REAL_QID"], p["DELAY"]) == ("%RETRY%G", "0", "3")
        assert p["RETRY_TOPIC"] == "TopicA" and p["WAIT"] == "false"
        assert p["ORIGIN_MESSAGE_ID"] == orig.offset_msg_id and OFFSET_ID.fullmatch(p["ORIGIN_MESSAGE_ID"])
        assert (p["a"], p["TAGS"], p["KEYS"], p["UNIQ_KEY"]) == ("1", "TagA", "K1", orig.uniq_key)
        assert rec.reconsume_times == 1
        for f in ("body", "flag", "sys_flag", "born_timestamp", "born_host"):
            assert getattr(rec, f) == getattr(orig, f), f


def test_explicit_level_clamped_and_later_retries(tmp_path):
    with open_store(tmp_path / "s", levels="1s 2s") as store:
        ctl = Controller(store)
        orig = original(store)
        assert send_back(ctl, None, request(orig.physical_offset, delay=0)).code == ResponseCode.SUCCESS
        # 3 + 0 = 3 is beyond "1s 2s": the store clamps it to the highest level, as CommitLog does
        assert only(store, SCHED, 1).properties["DELAY"] == "2"
        assert send_back(ctl, None, request(orig.physical_offset, delay=1)).code == ResponseCode.SUCCESS
        first = only(store, SCHED, 0)
        assert first.properties["DELAY"] == "1"
        # deliver it, consume it from %RETRY%G and send it back again: ORIGIN_MESSAGE_ID and RETRY_TOPIC stay
        svc = ScheduleMessageService(store, store.config.delay_levels_ms, store.root / "config")
        svc.load()
        svc.deliver_due(1, now_ms=2**62)
        retry = only(store, "%RETRY%G", 0)
        assert retry.reconsume_times == 1
        assert send_back(ctl, None, request(retry.physical_offset, delay=1)).code == ResponseCode.SUCCESS
        u = store.read_cq_units(SCHED, 0, 1, 2)[0]
        second = store.look_message_by_offset(int(u["offset"]))
        assert second.reconsume_times == 2
        assert second.properties["ORIGIN_MESSAGE_ID"] == orig.offset_msg_id
        assert second.properties["RETRY_TOPIC"] == "TopicA"
        assert second.properties["REAL_TOPIC"] == "%RETRY%G"


def test_unit_mode_and_random_retry_queue(tmp_path):
    with open_store(tmp_path / "s") as store:
        ctl = Controller(store, G=Group(retry_queue_nums=4))
        orig = original(store)
        for _ in range(40):
            assert send_back(ctl, None, request(orig.physical_offset, delay=1, unitMode="true")).code == 0
        assert ctl.topics.calls[0] == ("%RETRY%G", 4, 6, 2)   # TopicSysFlag.buildSysFlag(false, true)
        assert {q for _, q in ctl.puts} == {0, 1, 2, 3}


# ------------------------------------------------------------------------------------------ DLQ


@pytest.mark.parametrize("times, header_max, version, delay, dlq", [
    (16, None, Version.CURRENT, 0, True),        # group retryMaxTimes 16 reached
    (15, None, Version.CURRENT, 0, False),
    (2, 2, Version.CURRENT, 0, True),            # the consumer's maxReconsumeTimes
    (2, 2, 120, 0, False),                       # ... ignored from clients older than V3_4_9
    (0, None, Version.CURRENT, -1, True),        # delayLevel < 0: straight to the DLQ
])
def test_dead_letter_queue(tmp_path, times, header_max, version, delay, dlq):
    with open_store(tmp_path / "s") as store:
        ctl = Controller(store)
        orig = original(store, reconsume_times=times)
        req = request(orig.physical_offset, delay=delay, version=version,
                      **({"maxReconsumeTimes": header_max} if header_max is not None else {}))
        assert send_back(ctl, None, req).code == ResponseCode.SUCCESS
        if not dlq:
            assert store.max_offset("%DLQ%G", 0) == 0
            return
        assert ctl.topics.calls == [("%RETRY%G", 1, 6, 0), ("%DLQ%G", 1, 6, 0)]
        rec = only(store, "%DLQ%G", 0)
        assert rec.reconsume_times == times + 1
        assert rec.properties["DELAY"] == "0" and "REAL_TOPIC" not in rec.properties
        assert rec.properties["RETRY_TOPIC"] == "TopicA"
        assert rec.properties["ORIGIN_MESSAGE_ID"] == orig.offset_msg_id
        assert all(store.max_offset(SCHED, q) == 0 for q in range(18))


# ------------------------------------------------------------------------------- refusals, errors


def test_refusals(tmp_path):
    with open_store(tmp_path / "s") as store:
        orig = original(store)
        ctl = Controller(store)
        resp = send_back(ctl, None, request(orig.physical_offset, group="Nope"))
        assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert resp.remark.startswith("subscription group not exist, Nope ")
        ctl.config.broker_permission = 4   # read only
        resp = send_back(ctl, None, request(orig.physical_offset))
        assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION,
                                            "the broker[127.0.0.1] sending message is forbidden")
        ctl.config.broker_permission = 6
        ctl.topics.perm = 4
        resp = send_back(ctl, None, request(orig.physical_offset))
        assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION,
                                            "the topic[%RETRY%G] sending message is forbidden")
        ctl = Controller(store, G=Group(retry_queue_nums=0))
        assert send_back(ctl, None, request(orig.physical_offset)).code == ResponseCode.SUCCESS
        assert ctl.puts == [] and ctl.topics.calls == []


@pytest.mark.parametrize("delta", [1, 10**9, -1])
def test_bad_offset(tmp_path, delta):
    with open_store(tmp_path / "s") as store:
        orig = original(store)
        ctl = Controller(store)
        off = orig.physical_offset + delta if delta > 0 else store.commit_log_max_offset()
        resp = send_back(ctl, None, request(off))
        assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {off}")
        assert ctl.puts == []


def test_failed_put(tmp_path):
    with open_store(tmp_path / "s") as store:
        ctl = Controller(store)
        ctl.put_status = PutMessageStatus.SERVICE_NOT_AVAILABLE
        resp = send_back(ctl, None, request(original(store).physical_offset))
        assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "SERVICE_NOT_AVAILABLE")


@pytest.mark.parametrize("fields, name", [
    ({"group": "G", "delayLevel": "0"}, "offset"),
    ({"offset": "x1", "group": "G", "delayLevel": "0"}, "offset"),
    ({"offset": "-5", "group": "G", "delayLevel": "0"}, "offset"),
    ({"offset": "0", "delayLevel": "0"}, "group"),
    ({"offset": "0", "group": "", "delayLevel": "0"}, "group"),
    ({"offset": "0", "group": "G"}, "delayLevel"),
    ({"offset": "0", "group": "G", "delayLevel": "9999999999"}, "delayLevel"),
    ({"offset": "0", "group": "G", "delayLevel": "1", "maxReconsumeTimes": "many"}, "maxReconsumeTimes"),
])
def test_bad_header_fields_name_the_field(tmp_path, fields, name):
    with open_store(tmp_path / "s") as store:
        ctl = Controller(store)
        req = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, fields)
        with pytest.raises(HeaderFieldError) as e:
            send_back(ctl, None, req)
        assert e.value.field == name and f"<{name}>" in str(e.value)
        assert ctl.puts == []


# ------------------------------------------------------------------------- against the real broker


def _real_records(store: MessageStore, topic: str, queue_id: int) -> list[codec.MessageRecord]:
    units = store.read_cq_units(topic, queue_id, store.min_offset(topic, queue_id), store.max_offset(topic, queue_id))
    return [store.look_message_by_offset(int(u["offset"]), int(u["size"])) for u in units]


def _shape(props: dict[str, str], offset_ids: set[str]) -> dict[str, str]:
    """Properties with the values that differ per store replaced by their pattern."""
    out = {}
    for k, v in props.items():
        if k == "ORIGIN_MESSAGE_ID":
            assert OFFSET_ID.fullmatch(v) and v in offset_ids, v
            v = "<offset msgId of the original>"
        elif k == "UNIQ_KEY":
            v = "<uniq>"
        out[k] = v
    return out


def test_same_records_as_the_real_broker(real_stores, tmp_path):
    """A consumer of RsGroup answered RECONSUME_LATER (delay level 1) twice for some messages: replay that
    through send_back and the schedule service on our store and compare every record with the real
    broker's - the schedule-topic copy, the %RETRY% delivery and the second round."""
    real = MessageStore.open(real_stores["clean"].root, read_only=True)
    try:
        retries = _real_records(real, "%RETRY%RsGroup", 0)
        sched = [r for r in _real_records(real, SCHED, 0) if r.properties["REAL_TOPIC"] == "%RETRY%RsGroup"]
        assert len(retries) >= 4 and len(sched) >= 4
        first = next(r for r in retries if r.reconsume_times == 1)
        second = next(r for r in retries if r.reconsume_times == 2 and r.uniq_key == first.uniq_key)
        sched1 = next(r for r in sched if r.uniq_key == first.uniq_key and r.reconsume_times == 1)
        orig = real.message_by_msg_id(first.properties["ORIGIN_MESSAGE_ID"])
    finally:
        real.close()
    # the real broker: the %RETRY% delivery keeps the schedule record's properties exactly (DELAY too)
    assert list(first.properties.items()) == list(sched1.properties.items())

    with open_store(tmp_path / "s", levels="1s 5s") as store:
        ctl = Controller(store, RsGroup=Group())
        # the original as the real broker stored it: same properties (no WAIT), same fields
        r = store.put_message(Message(orig.topic, orig.body, properties=dict(orig.properties), flag=orig.flag,
                                      sys_flag=orig.sys_flag & ~(codec.FLAG_BORNHOST_V6 | codec.FLAG_STOREHOST_V6),
                                      born_timestamp=orig.born_timestamp, born_host=orig.born_host,
                                      broker_copy=True), queue_id=orig.queue_id)
        ours_orig = store.look_message_by_offset(r.physical_offset)
        ids = {ours_orig.offset_msg_id, orig.offset_msg_id}
        svc = ScheduleMessageService(store, store.config.delay_levels_ms, store.root / "config")
        svc.load()

        assert send_back(ctl, None, request(ours_orig.physical_offset, group="RsGroup", delay=1)).code == 0
        our_sched1 = only(store, SCHED, 0)
        svc.deliver_due(1, now_ms=2**62)
        our_first = only(store, "%RETRY%RsGroup", 0)
        assert send_back(ctl, None, request(our_first.physical_offset, group="RsGroup", delay=1)).code == 0
        svc.deliver_due(1, now_ms=2**62)
        u = store.read_cq_units("%RETRY%RsGroup", 0, 1, 2)[0]
        our_second = store.look_message_by_offset(int(u["offset"]))

        for ours, theirs in ((our_sched1, sched1), (our_first, first), (our_second, second)):
            assert _shape(ours.properties, ids) == _shape(theirs.properties, ids)   # names and values
            assert ours.topic == theirs.topic and ours.queue_id == theirs.queue_id
            for f in ("reconsume_times", "flag", "sys_flag", "body", "born_timestamp", "born_host"):
                assert getattr(ours, f) == getattr(theirs, f), f
        # ours also keeps the schedule record's properties exactly on delivery (same order)
        assert list(our_first.properties.items()) == list(our_sched1.properties.items())


def test_same_delayed_delivery_as_the_real_broker(real_stores, tmp_path):
    """Producer-delayed messages (DELAY 1/2): the real broker's delivered copy in the real topic has the
    schedule record's properties unchanged; so has ours, for the same message."""
    real = MessageStore.open(real_stores["clean"].root, read_only=True)
    try:
        delivered = {r.uniq_key: r for q in real.queue_ids("RsOrders") for r in _real_records(real, "RsOrders", q)
                     if "REAL_TOPIC" in r.properties}
        pairs = [(s, delivered[s.uniq_key]) for q in (0, 1) for s in _real_records(real, SCHED, q)
                 if s.properties["REAL_TOPIC"] == "RsOrders"]
    finally:
        real.close()
    assert len(pairs) >= 20
    with open_store(tmp_path / "s", levels="1s 5s") as store:
        svc = ScheduleMessageService(store, store.config.delay_levels_ms, store.root / "config")
        svc.load()
        for s, d in pairs:
            assert list(d.properties.items()) == list(s.properties.items())
            assert (d.topic, d.queue_id) == (s.properties["REAL_TOPIC"], int(s.properties["REAL_QID"]))
            # the same message through our store: the producer's properties, delayed by the store
            user = {k: v for k, v in s.properties.items() if k not in ("REAL_TOPIC", "REAL_QID", "DELAY")}
            level = int(s.properties["DELAY"])
            r = store.put_message(Message(d.topic, s.body, properties=user, flag=s.flag, delay_level=level,
                                          born_timestamp=s.born_timestamp, born_host=s.born_host),
                                  queue_id=d.queue_id)
            assert r.ok
            ours_sched = store.look_message_by_offset(r.physical_offset)
            assert ours_sched.topic == SCHED and ours_sched.queue_id == level - 1
            assert ours_sched.properties == s.properties   # same names and values (order may differ)
        svc.deliver_all_due(now_ms=2**62)
        for s, d in pairs:
            mine = [r for r in _real_records(store, d.topic, d.queue_id) if r.uniq_key == s.uniq_key]
            assert len(mine) == 1
            assert mine[0].properties == d.properties
            for f in ("reconsume_times", "flag", "sys_flag", "body", "born_timestamp", "born_host"):
                assert getattr(mine[0], f) == getattr(d, f), f


def test_real_broker_offset_file_round_trips(real_stores):
    """The file 4.9.8 wrote is what we write for the same table, byte for byte."""
    for rs in real_stores.values():
        raw = (rs.root / "config" / "delayOffset.json").read_text()
        table = load_delay_offsets(raw)
        assert table and dump_delay_offsets(table) == raw
