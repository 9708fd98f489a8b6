"""Committing a query's offsets to the consumer group's offset store: the one place that decides what is sent.

A planner commits every trigger, mostly the same offsets (an idle stream plans a trigger every few
milliseconds). :class:`OffsetCommits` keeps, for one query:

* the offsets it last committed: the same offsets again send nothing at all;
* per broker, what the broker acknowledged and within which session (``BrokerView.commit_session``: a
  network view's connection): queues whose offset was acknowledged are not sent again while the session
  is the same and less than :data:`FULL_COMMIT_S` has passed since every queue was last sent. A new session
  (a broker restarted on a new connection may have lost what it had not persisted;
  ``ConsumerOffsetManager.persist`` runs every 5 s) or a failed commit means everything is sent next time;
* where a commit is full (every queue sent), 4.9.8's first-commit race: ``ConsumerOffsetManager.commitOffset``
  creates a group's table for a topic with a get, then a put (no putIfAbsent), so first commits handled at
  once by the broker's threads can each create one and all but the last are lost (seen: 2 of 4 queues read
  back 0). Where the table may be new, one update per topic goes first, alone (a wave of its own).

BROADCASTING offsets live with the client (RocketMQ's LocalFileOffsetStore), one file rewrite per commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from rocketstream.errors import RocketStreamError
from rocketstream.spark.broker_view import BrokerView, view_of
from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.spark.offsets import QueueOffsets
from rocketstream.spark.options import RocketMQOptions
from rocketstream.spark.positions import broadcast_store

log = logging.getLogger(__name__)

# Every queue's offset is sent again at least this often (the Java consumer's persistConsumerOffsetInterval,
# 5 s by default, sends its whole table), so a table changed behind our back converges to the query's.
FULL_COMMIT_S = 5.0

Views = Mapping[str, BrokerView]
Waves = list[dict[str, dict[int, int]]]


@dataclass
class _Acked:
    """What one broker acknowledged ((topic, queueId) -> offset), within which session, and when every
    queue was last sent."""

    session: object
    full_at: float
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)


class OffsetCommits:
    """The offsets one query committed, and what each broker acknowledged (see the module doc)."""

    def __init__(self) -> None:
        self._last: QueueOffsets | None = None
        self._acked: dict[str, _Acked] = {}

    def commit(self, options: RocketMQOptions, views: Views, offsets: Mapping[QueueKey, int], *,
               absent_ok: bool = False) -> None:
        """Write ``offsets`` for the query's group: to each broker's table (CLUSTERING; every broker is
        known before any is written) or to the client's offsets.json (BROADCASTING). Negative offsets are
        refused. Offsets equal to the last committed ones send nothing. A broker without a view is an error
        (StoreError naming it), unless ``absent_ok``: then it is out of the routes for now, and its offsets
        are written with the first commit after it is back."""
        if not offsets:
            return
        offsets = QueueOffsets(offsets)   # no copy of a QueueOffsets (a planner's arrays stay arrays)
        if self._last is not None and offsets == self._last:
            return
        per_broker = offsets.by_broker()
        bad = {str(QueueKey(topic, broker, qid)): o for broker, topics in per_broker.items()
               for topic, queues in topics.items() for qid, o in queues.items() if o < 0}
        if bad:
            raise RocketStreamError(f"cannot commit negative offsets for group {options.consumer_group!r}: {bad}")
        if options.broadcasting:
            broadcast_store(options, read_only=False).commit(options.consumer_group, offsets)
        else:
            # a broker out of the routes (stopped or restarting) has no view: its offsets stay in the
            # checkpoint, and reach its table with the first commit after it is back
            if not absent_ok:
                for broker in per_broker:
                    view_of(views, broker)   # every broker is known before any is written
            for broker, by_topic in per_broker.items():
                if broker in views:
                    self._send(options.consumer_group, broker, view_of(views, broker), by_topic)
                else:
                    log.info("group %s: broker %s is not in the routes; its offsets are committed when it is back",
                             options.consumer_group, broker)
                    self._acked.pop(broker, None)
            if any(broker not in views for broker in per_broker):
                return   # not all written: the same offsets are sent again next time
        self._last = offsets

    def _send(self, group: str, broker: str, view: BrokerView, offsets: Mapping[str, Mapping[int, int]]) -> None:
        session = view.commit_session()
        now = time.monotonic()
        acked = self._acked.pop(broker, None)   # until the broker answered every update
        if acked is None or acked.session is not session or now - acked.full_at >= FULL_COMMIT_S:
            acked = _Acked(session, now)
            waves = first_alone(offsets)
        else:
            known = acked.offsets
            todo = {topic: changed for topic, queues in offsets.items()
                    if (changed := {q: o for q, o in queues.items() if known.get((topic, q)) != o})}
            waves = [todo] if todo else []
        if waves:
            view.commit_offsets(group, waves)
        acked.offsets.update(((topic, q), o) for wave in waves for topic, queues in wave.items()
                             for q, o in queues.items())
        self._acked[broker] = acked


def first_alone(offsets: Mapping[str, Mapping[int, int]]) -> Waves:
    """A full commit in waves: the first queue of every topic, then the rest (4.9.8's first-commit race)."""
    firsts: dict[str, dict[int, int]] = {}
    rest: dict[str, dict[int, int]] = {}
    for topic, queues in offsets.items():
        for q, o in queues.items():
            (rest.setdefault(topic, {}) if topic in firsts else firsts.setdefault(topic, {}))[q] = o
    return [wave for wave in (firsts, rest) if wave]


def commit_offsets(options: RocketMQOptions, views: Views, offsets: Mapping[QueueKey, int]) -> None:
    """A one-off commit of ``offsets`` (everything sent): :meth:`OffsetCommits.commit` of a new query."""
    OffsetCommits().commit(options, views, offsets)


__all__ = ["FULL_COMMIT_S", "OffsetCommits", "commit_offsets", "first_alone"]
