"""The exactly-once sink's pieces without Spark (rocketstream/spark/exactly_once.py): its options, the
check-back's answers from the commit record, and the driver's commit of real half messages on our broker
and on the real 4.9.8 broker (the session's shared brokers): committed once, a batch committed before rolled
back. The kill tests are tests/reliability/test_sink_exactly_once_kills.py."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from rocketstream.client import Message, Producer
from rocketstream.client.transaction import LocalTransactionState as S
from rocketstream.client.transaction import send_half_messages
from rocketstream.errors import OptionError, RocketStreamError
from rocketstream.spark import exactly_once as eos
from rocketstream.spark.sink import parse_sink_options
from tests.client.test_transaction_brokers import pull_topic

NS = "127.0.0.1:9876"


@pytest.mark.parametrize("options, streaming, problem", [
    ({"path": "/tmp/x"}, True, "needs network mode"),
    ({"nameServer": NS}, False, "applies to df.writeStream"),
    ({"nameServer": NS}, True, "needs the query's 'checkpointLocation'"),
])
def test_exactly_once_options_refused_where_it_cannot_hold(options, streaming, problem):
    with pytest.raises(OptionError, match=problem) as err:
        parse_sink_options({**options, "topic": "T", "exactlyOnce": "true"}, streaming=streaming)
    assert err.value.option == "exactlyOnce"
    assert "sk-hidden-value" not in str(err.value)


def test_exactly_once_options():
    parsed = parse_sink_options({"nameServer": NS, "topic": "T", "ExactlyOnce": "TRUE",
                                 "checkpointLocation": "/tmp/ck"}, streaming=True)
    assert (parsed.exactly_once, parsed.checkpoint) == (True, "/tmp/ck")
    assert parse_sink_options({"nameServer": NS, "topic": "T", "checkpointLocation": "/c"},
                              streaming=True).exactly_once is False
    with pytest.raises(OptionError, match="must be true or false"):
        parse_sink_options({"nameServer": NS, "topic": "T", "exactlyOnce": "yes"}, streaming=True)


def test_exactly_once_takes_a_secured_clusters_options():
    parsed = parse_sink_options({"nameServer": NS, "topic": "T", "exactlyOnce": "true", "checkpointLocation": "/c",
                                 "accessKey": "ak", "secretKey": "sk-hidden-value", "namespace": "ns1"},
                                streaming=True)
    assert parsed.exactly_once and parsed.secured.namespace == "ns1"
    assert parsed.secured.credentials is not None and parsed.secured.credentials.access_key == "ak"
    assert "sk-hidden-value" not in repr(parsed)


def test_kill_env_is_checked(monkeypatch):
    monkeypatch.setenv(eos.KILL_ENV, "after_intent@1,task@2")
    eos.check_kill_env()
    assert eos.kill_wanted("task", 2) and not eos.kill_wanted("task", 1) and eos.kill_wanted("after_intent", 1)
    monkeypatch.setenv(eos.KILL_ENV, "after_intnt")
    with pytest.raises(OptionError, match="before_commit"):
        eos.check_kill_env()


def test_transaction_group_is_per_checkpoint(tmp_path):
    a, b = eos.transaction_group(str(tmp_path / "a")), eos.transaction_group(str(tmp_path / "b"))
    assert a != b and a.startswith("rocketstream-eos-") and a == eos.transaction_group(str(tmp_path / "a"))


def test_check_back_answers_follow_the_record(tmp_path):
    record = eos.CommitRecord(tmp_path)
    me = eos.driver_jvm()   # a live process
    dead = "999999999:1"
    record.write(3, ["a", "b"], eos.ENDED, me)
    record.write(4, ["c"], eos.COMMITTING, dead)
    record.write(5, ["d"], eos.COMMITTING, me)
    record.write(7, ["e"], eos.UNRESOLVED, me)
    assert eos.alive(me) and not eos.alive(dead)
    cases = {
        "3:a": S.ROLLBACK_MESSAGE,   # ended: every chosen half was confirmed ended, this is a check's copy
        "3:z": S.ROLLBACK_MESSAGE,   # an attempt not chosen
        "4:c": S.COMMIT_MESSAGE,     # recorded, its driver died before ending it
        "4:x": S.ROLLBACK_MESSAGE,
        "5:d": S.UNKNOW,             # its driver is ending it right now
        "6:f": S.ROLLBACK_MESSAGE,   # below a recorded batch, never recorded: aborted or a dead run's
        "7:e": S.COMMIT_MESSAGE,     # ends not confirmed: the check-back commits what is still a half
        "8:g": S.UNKNOW,             # above every recorded batch: may still be running
        "": S.UNKNOW, "nonsense": S.UNKNOW, "x:y": S.UNKNOW,
    }
    assert {mark: eos.decide(record, mark) for mark in cases} == cases
    assert eos.decide(record, None) is S.UNKNOW
    # a dead driver confirmed some COMMITs before it died: a check of one of those is of a copy 4.9.8's
    # check service made of a half that is committed already
    record.add_ended(4, ["U1", "U2"])
    with open(tmp_path / "batches" / "4.ended", "a") as f:
        f.write("U3")   # torn: not confirmed
    assert [eos.decide(record, "4:c", u) for u in ("U1", "U2", "U3", "U9")] == \
        [S.ROLLBACK_MESSAGE, S.ROLLBACK_MESSAGE, S.COMMIT_MESSAGE, S.COMMIT_MESSAGE]
    assert eos.decide(record, "5:d", "U1") is S.UNKNOW


def test_old_ended_batches_are_pruned_and_answers_stay_the_same(tmp_path):
    """Every ended batch left its record and its list of confirmed ends behind for good: now the lists go once a
    later batch ended, the records once more than RETAIN_BATCHES are newer; unresolved and committing records
    stay, and every check-back is answered as before the pruning."""
    record = eos.CommitRecord(tmp_path)
    me, dead = eos.driver_jvm(), "999999999:1"
    newest = 2 * eos.RETAIN_BATCHES + 10
    for b in range(newest + 1):
        state = eos.UNRESOLVED if b == 5 else eos.COMMITTING if b == 6 else eos.ENDED
        record.write(b, [f"a{b}"], state, dead if b == 6 else me)
        record.add_ended(b, [f"U{b}"])
    marks = [f"{b}:{a}{b}" for b in range(newest + 2) for a in ("a", "z")]
    before = {m: eos.decide(record, m, "U9") for m in marks}
    assert record.prune(newest) > 0
    assert {m: eos.decide(record, m, "U9") for m in marks} == before
    names = {p.name for p in (tmp_path / "batches").iterdir()}
    cut = newest - eos.RETAIN_BATCHES
    assert names == {str(b) for b in (5, 6, *range(cut, newest + 1))} | {"5.ended", "6.ended", f"{newest}.ended"}
    assert record.max_batch() == newest and record.ended(5) == {"U5"}
    assert record.prune(newest) == 0   # nothing left to prune


def test_an_unreadable_record_names_its_file(tmp_path):
    record = eos.CommitRecord(tmp_path)
    record.ensure()
    (tmp_path / "batches" / "2").write_text("{not json")
    with pytest.raises(RocketStreamError, match=r"batches/2 is unreadable"):
        eos.decide(record, "2:a")


def _visible(broker, topic: str, want: int) -> list:
    deadline = time.monotonic() + 30
    while True:
        got = pull_topic(broker.broker_addr, broker.namesrv_addr, topic, 4)
        if len(got) >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_driver_commits_each_half_once_and_rolls_a_committed_batch_back(mq_broker, tmp_path):
    """Halves sent by a 'task' (a producer of another group) are committed by the Committer (END_TRANSACTION
    confirmed); a second commit of the same batch (a re-run after a restart) rolls its new halves back."""
    topic, group = f"EosUnit{uuid.uuid4().hex[:8]}", eos.transaction_group(str(tmp_path))
    record = eos.CommitRecord(tmp_path / "state")
    committer = eos.Committer(record, mq_broker.namesrv_addr, group, 10.0)
    producer = Producer(f"eos_unit_{uuid.uuid4().hex[:6]}", namesrv=mq_broker.namesrv_addr,
                        send_msg_timeout=15.0, retry_times_when_send_failed=0).start()
    try:
        def task(n: int, tag: str) -> eos.HalfMessages:
            out = eos.HalfMessages(uuid.uuid4().hex, 0)
            msgs = [Message(topic, f"{tag}-{i}".encode(), keys=f"{tag}-{i}",
                            properties={eos.MARK_PROPERTY: f"0:{out.attempt}"}) for i in range(n)]
            for r in send_half_messages(producer, msgs, transaction_group=group, in_flight=8):
                out.halves.append(eos.HalfRef.of(producer.instance.broker_addr(r.queue.broker_name), r))
            return out
        first = [task(6, "a"), task(5, "b")]
        assert pull_topic(mq_broker.broker_addr, mq_broker.namesrv_addr, topic, 4) == []   # halves are invisible
        assert committer.commit([*first, None], 0) == 11
        entry = record.load(0)
        assert entry is not None and entry["state"] == eos.ENDED
        assert record.ended(0) == {h.msg_id for t in first for h in t.halves}
        assert sorted(entry["attempts"]) == sorted(t.attempt for t in first)
        got = _visible(mq_broker, topic, 11)
        assert sorted(m.keys for m in got) == sorted([f"a-{i}" for i in range(6)] + [f"b-{i}" for i in range(5)])
        again = [task(4, "c")]
        assert committer.commit(again, 0) == 0   # the batch is recorded: its re-run is rolled back
        committer.abort([task(3, "d")], 1)
        time.sleep(0.5)
        assert len(pull_topic(mq_broker.broker_addr, mq_broker.namesrv_addr, topic, 4)) == 11
    finally:
        producer.shutdown()
    assert os.path.isdir(tmp_path / "state" / "batches")


def test_a_commit_that_breaks_off_leaves_the_batch_to_the_check_back(tmp_path, monkeypatch):
    """An error while ending (not a refused end: anything) marks the batch unresolved: the check-back then
    commits its halves even though the driver that recorded it is still alive."""
    record = eos.CommitRecord(tmp_path)
    committer = eos.Committer(record, NS, "g", 1.0)

    def broken(*args, **kwargs):
        raise RuntimeError("connection pool exploded")
    monkeypatch.setattr(committer, "_end", broken)
    with pytest.raises(RuntimeError, match="exploded"):
        committer.commit([eos.HalfMessages("att", 0)], 0)
    entry = record.load(0)
    assert entry is not None and entry["state"] == eos.UNRESOLVED and entry["attempts"] == ["att"]
    assert eos.decide(record, "0:att") is S.COMMIT_MESSAGE
