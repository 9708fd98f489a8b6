"""OffsetCommits (spark/commits.py): the one place that decides which offsets a query sends, with a view
that records what it is asked to send (the network behaviour against real brokers: test_planning.py)."""

from __future__ import annotations

import pytest

from rocketstream.errors import RocketStreamError, StoreError
from rocketstream.spark import commits
from rocketstream.spark.commits import OffsetCommits, first_alone
from rocketstream.spark.local_view import LocalBrokerView
from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.spark.options import parse_options
from spark_stores import TOPIC, fill


class RecordingView:
    """commit_session answers ``self.session``; commit_offsets records its waves (or fails when told)."""

    broker_name = "b"

    def __init__(self) -> None:
        self.session: object = object()
        self.sent: list[list[dict[str, dict[int, int]]]] = []
        self.fail = False

    def commit_session(self) -> object:
        return self.session

    def commit_offsets(self, group: str, waves) -> None:
        assert group == "g"
        if self.fail:
            raise RocketStreamError("broker said no")
        self.sent.append([{t: dict(q) for t, q in wave.items()} for wave in waves])


def _offsets(**by_topic: dict[int, int]) -> dict[QueueKey, int]:
    return {QueueKey(t, "b", q): o for t, queues in by_topic.items() for q, o in queues.items()}


@pytest.fixture
def options():
    return parse_options({"nameServer": "127.0.0.1:9876", "topic": "T,U", "consumerGroup": "g"}, streaming=True)


def test_full_then_only_changes_then_full_again_on_a_new_session_or_after_full_commit_s(options, monkeypatch):
    view, c = RecordingView(), OffsetCommits()
    views = {"b": view}
    c.commit(options, views, _offsets(T={0: 1, 1: 2, 2: 3}, U={0: 7}))
    # a full commit: the first queue of every topic alone (4.9.8's first-commit race), then the rest
    assert view.sent == [[{"T": {0: 1}, "U": {0: 7}}, {"T": {1: 2, 2: 3}}]]
    c.commit(options, views, _offsets(T={0: 1, 1: 2, 2: 3}, U={0: 7}))
    assert len(view.sent) == 1   # the same offsets: nothing sent
    c.commit(options, views, _offsets(T={0: 1, 1: 5, 2: 3}, U={0: 8}))
    assert view.sent[1:] == [[{"T": {1: 5}, "U": {0: 8}}]]   # only what changed, one wave
    view.session = object()   # a new connection: the broker may have lost what it acknowledged
    c.commit(options, views, _offsets(T={0: 1, 1: 5, 2: 4}, U={0: 8}))
    assert view.sent[2:] == [[{"T": {0: 1}, "U": {0: 8}}, {"T": {1: 5, 2: 4}}]]
    monkeypatch.setattr(commits, "FULL_COMMIT_S", 0.0)
    c.commit(options, views, _offsets(T={0: 1, 1: 5, 2: 5}, U={0: 8}))
    assert view.sent[3:] == [[{"T": {0: 1}, "U": {0: 8}}, {"T": {1: 5, 2: 5}}]]


def test_a_failed_commit_is_sent_in_full_next_time(options):
    view, c = RecordingView(), OffsetCommits()
    views = {"b": view}
    c.commit(options, views, _offsets(T={0: 1, 1: 2}))
    view.fail = True
    with pytest.raises(RocketStreamError, match="broker said no"):
        c.commit(options, views, _offsets(T={0: 1, 1: 3}))
    view.fail = False
    c.commit(options, views, _offsets(T={0: 1, 1: 3}))   # not skipped as "the same offsets"
    assert view.sent[1:] == [[{"T": {0: 1}}, {"T": {1: 3}}]]


def test_a_broker_out_of_the_routes_is_committed_when_it_is_back(options):
    """A broker of the checkpoint's offsets that left the routes has no view: the others are committed, its
    offsets wait (no 'no store root' error), and the first commit after it is back sends them in full."""
    a, c = RecordingView(), OffsetCommits()
    offsets = {QueueKey("T", "a", 0): 3, QueueKey("T", "gone", 0): 9}
    with pytest.raises(StoreError, match="gone"):   # a broker nobody said may be away: nothing written
        c.commit(options, {"a": a}, offsets)
    assert a.sent == []
    c.commit(options, {"a": a}, offsets, absent_ok=True)
    assert a.sent == [[{"T": {0: 3}}]]
    back = RecordingView()
    c.commit(options, {"a": a, "gone": back}, offsets, absent_ok=True)   # the same offsets: b had none yet
    assert back.sent == [[{"T": {0: 9}}]] and len(a.sent) == 1


def test_waves_of_a_full_commit():
    assert first_alone({}) == []
    assert first_alone({"T": {3: 1}}) == [{"T": {3: 1}}]
    assert first_alone({"T": {3: 1, 0: 2}, "U": {1: 1}}) == [{"T": {3: 1}, "U": {1: 1}}, {"T": {0: 2}}]


def test_a_local_view_writes_the_waves_as_one_file_rewrite(tmp_path, monkeypatch):
    from rocketstream.store.meta.offsets import ConsumerOffsetManager

    root = tmp_path / "broker-a"
    fill(root, 4)
    rewrites: list[dict] = []
    real = ConsumerOffsetManager.commit_many
    monkeypatch.setattr(ConsumerOffsetManager, "commit_many", lambda self, t: rewrites.append(t) or real(self, t))
    view = LocalBrokerView("broker-a", str(root))
    assert view.commit_session() is not view.commit_session()   # every local commit is complete
    view.commit_offsets("g", first_alone({TOPIC: {0: 2, 1: 3}}))
    assert rewrites == [{("g", TOPIC): {0: 2, 1: 3}}]
    assert view.query_offsets("g", TOPIC, [0, 1]) == {0: 2, 1: 3}
