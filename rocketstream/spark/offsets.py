"""Offset values of the Spark source: :class:`QueueOffsets` and the typed start/end positions.

``QueueOffsets`` is the one offset value: next queue offset per queue (the exclusive end, the meaning
RocketMQ's consumerOffset.json gives an offset), with its JSON
``{"<topic>": {"<brokerName>": {"<queueId>": <next offset>}}}``. Keys come out in one fixed order (topics
and brokers by Java string order, queue ids numerically) because Spark writes ``json.dumps`` of a stream
reader's offset into the checkpoint and compares offsets as strings.

Positions say where a query starts or ends before the brokers are asked: :data:`EARLIEST`,
:data:`LATEST`, :data:`GROUP` (the consumer group's committed offsets), :class:`SpecificOffsets` (a JSON
object in which -2 means earliest and -1 latest) and :class:`AtTimestamp`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Literal

import numpy as np

from rocketstream.spark.offset_ranges import (
    EARLIEST as EARLIEST_OFFSET,
)
from rocketstream.spark.offset_ranges import (
    LATEST as LATEST_OFFSET,
)
from rocketstream.spark.offset_ranges import (
    QueueKey,
    offsets_from_dict,
    offsets_to_dict,
)

OffsetJson = dict[str, dict[str, dict[str, int]]]


def group_order(topic: str, broker: str) -> tuple[bytes, bytes, int]:
    """Sort key of a (topic, broker) group: queue order (Java string order, as ``MessageQueue.compareTo``)."""
    return QueueKey(topic, broker, 0).sort_key()


class QueueIndex:
    """The queues of a query in queue order, grouped by (topic, broker): the layout that lets a planner keep
    offsets in numpy arrays (position i is ``keys[i]``) and write their JSON without touching a key object.

    ``layout`` is ``(topic, brokerName, queue ids)`` per group, in any order; groups are kept in Java string
    order of topic then broker, queue ids ascending — the order of :class:`QueueOffsets` and of its JSON.
    """

    __slots__ = ("layout", "keys", "_groups", "_positions")

    def __init__(self, layout: Iterable[tuple[str, str, Iterable[int]]]) -> None:
        groups = sorted(((t, b, tuple(sorted(set(ids)))) for t, b, ids in layout),
                        key=lambda g: group_order(g[0], g[1]))
        self.layout: tuple[tuple[str, str, tuple[int, ...]], ...] = tuple(g for g in groups if g[2])
        keys: list[QueueKey] = []
        spans = []
        for topic, broker, ids in self.layout:
            spans.append((topic, broker, tuple(map(str, ids)), ids, len(keys), len(keys) + len(ids)))
            keys.extend(QueueKey(topic, broker, qid) for qid in ids)
        self.keys: tuple[QueueKey, ...] = tuple(keys)
        self._groups = tuple(spans)
        self._positions: dict[QueueKey, int] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QueueIndex) and (other is self or other.layout == self.layout)

    def __hash__(self) -> int:
        return hash(self.layout)

    def positions(self) -> dict[QueueKey, int]:
        if self._positions is None:
            self._positions = {q: i for i, q in enumerate(self.keys)}
        return self._positions

    def array(self, offsets: Mapping[QueueKey, int], default: np.ndarray | int = -1) -> np.ndarray:
        """``offsets`` as an int64 array in this index's order; ``default`` (a scalar or an array of this
        index's length) where a queue has none. Queues of ``offsets`` outside the index are ignored."""
        values = np.array(np.broadcast_to(default, len(self.keys)), dtype=np.int64)
        positions = self.positions()
        for q, o in offsets.items():
            i = positions.get(q)
            if i is not None:
                values[i] = o
        return values

    def mapping(self, values: np.ndarray) -> dict[QueueKey, int]:
        return dict(zip(self.keys, values.tolist(), strict=True))

    def to_dict(self, values: np.ndarray) -> OffsetJson:
        """The JSON-ready nested dict of ``values`` (what :meth:`QueueOffsets.to_dict` gives), built a whole
        (topic, broker) group at a time."""
        nested: OffsetJson = {}
        listed = values.tolist()
        for topic, broker, names, _ids, lo, hi in self._groups:
            nested.setdefault(topic, {})[broker] = dict(zip(names, listed[lo:hi], strict=True))
        return nested

    def by_broker(self, values: np.ndarray) -> dict[str, dict[str, dict[int, int]]]:
        """``{brokerName: {topic: {queueId: value}}}``."""
        result: dict[str, dict[str, dict[int, int]]] = {}
        listed = values.tolist()
        for topic, broker, _names, ids, lo, hi in self._groups:
            result.setdefault(broker, {})[topic] = dict(zip(ids, listed[lo:hi], strict=True))
        return result


class QueueOffsets(Mapping[QueueKey, int]):
    """An immutable ``QueueKey -> offset`` mapping in queue order, which owns its JSON form.

    A planner may build one from a :class:`QueueIndex` and an array (:meth:`of_array`): the mapping is then
    made only if someone asks for it, and the JSON and per-broker forms come from the arrays directly."""

    __slots__ = ("_offsets_", "_index", "_values", "_json")
    _offsets_: dict[QueueKey, int] | None
    _index: QueueIndex | None
    _values: np.ndarray | None
    _json: OffsetJson | None

    def __init__(self, offsets: Mapping[QueueKey, int] | None = None) -> None:
        if isinstance(offsets, QueueOffsets):   # immutable: share the other value's forms
            self._offsets_, self._index, self._values, self._json = (offsets._offsets_, offsets._index,
                                                                     offsets._values, offsets._json)
            return
        self._offsets_ = {q: int(o) for q, o in sorted((offsets or {}).items())}
        self._index = None
        self._values = None
        self._json = None

    @classmethod
    def of_array(cls, index: QueueIndex, values: np.ndarray) -> QueueOffsets:
        """Offsets ``values[i]`` for ``index.keys[i]`` (values copied, int64)."""
        if values.shape != (len(index),):
            raise ValueError(f"{len(index)} queues but {values.shape} values")
        self = cls.__new__(cls)
        self._offsets_, self._index, self._json = None, index, None
        self._values = np.array(values, dtype=np.int64)
        self._values.flags.writeable = False
        return self

    @property
    def _offsets(self) -> dict[QueueKey, int]:
        if self._offsets_ is None:
            assert self._index is not None and self._values is not None  # of_array sets both
            self._offsets_ = self._index.mapping(self._values)
        return self._offsets_

    def array_in(self, index: QueueIndex) -> np.ndarray | None:
        """The offsets as an array in ``index``'s order when they cover exactly its queues, else None."""
        if self._index is not None and self._index == index:
            assert self._values is not None
            return self._values
        if len(self._offsets) != len(index) or any(q not in self._offsets for q in index.keys):
            return None
        return index.array(self._offsets)

    # ---- JSON -----------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, obj: object, *, option: str = "offset", allow_special: bool = False) -> QueueOffsets:
        """From the decoded JSON (what Spark hands a stream reader back); malformed -> OptionError naming
        ``option``. ``allow_special`` admits -2 (earliest) and -1 (latest), as users may write them."""
        return cls(offsets_from_dict(obj, option=option, allow_special=allow_special))

    @classmethod
    def from_json(cls, text: str, *, option: str = "offset", allow_special: bool = False) -> QueueOffsets:
        from rocketstream.spark.offset_ranges import offsets_from_json

        return cls(offsets_from_json(text, option=option, allow_special=allow_special))

    def to_dict(self) -> OffsetJson:
        """The nested dict a stream reader returns to Spark, keys in the fixed order (a fresh copy)."""
        if self._json is None:
            if self._index is not None and self._values is not None:
                self._json = self._index.to_dict(self._values)
            else:
                self._json = offsets_to_dict(self._offsets)
        return {t: {b: dict(q) for b, q in brokers.items()} for t, brokers in self._json.items()}

    def matches(self, obj: object) -> bool:
        """Whether ``obj`` is this value's JSON (an offset Spark hands back): a dict comparison, no parsing."""
        if self._json is None:
            self.to_dict()
        return obj == self._json

    def to_json(self) -> str:
        """The string Spark stores in the checkpoint for this offset (``json.dumps`` of :meth:`to_dict`)."""
        return json.dumps(self.to_dict())

    # ---- mapping --------------------------------------------------------------------------------
    def __getitem__(self, q: QueueKey) -> int:
        return self._offsets[q]

    def __iter__(self) -> Iterator[QueueKey]:
        return iter(self._offsets)

    def __len__(self) -> int:
        if self._offsets_ is None and self._index is not None:
            return len(self._index)
        return len(self._offsets)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, QueueOffsets) and self._values is not None and other._values is not None \
                and self._index == other._index:
            return bool(np.array_equal(self._values, other._values))
        if isinstance(other, Mapping):
            return self._offsets == dict(other.items())
        return NotImplemented

    def by_broker(self) -> dict[str, dict[str, dict[int, int]]]:
        """``{brokerName: {topic: {queueId: offset}}}``: what each broker's offset table receives."""
        if self._index is not None and self._values is not None:
            return self._index.by_broker(self._values)
        result: dict[str, dict[str, dict[int, int]]] = {}
        for q, o in self._offsets.items():
            result.setdefault(q.broker_name, {}).setdefault(q.topic, {})[q.queue_id] = o
        return result

    def __repr__(self) -> str:
        return f"QueueOffsets({self.to_json()})"


# ---- positions ----------------------------------------------------------------------------------

class Position(Enum):
    """A symbolic position: the queues' min or max offset, or the consumer group's committed offsets."""

    EARLIEST = "earliest"
    LATEST = "latest"
    GROUP = "group"

    def __repr__(self) -> str:
        return self.name


EARLIEST: Literal[Position.EARLIEST] = Position.EARLIEST
LATEST: Literal[Position.LATEST] = Position.LATEST
GROUP: Literal[Position.GROUP] = Position.GROUP


@dataclass(frozen=True)
class SpecificOffsets:
    """Offsets per queue as the user wrote them: -2 (earliest) and -1 (latest) allowed; queues left out
    start at earliest (a start) or end at latest (an end)."""

    offsets: QueueOffsets

    def resolve(self, q: QueueKey, low: int, high: int, default: int) -> int:
        """The offset for ``q`` whose queue spans ``[low, high)``; ``default`` (-2/-1) when not named."""
        offset = self.offsets.get(q, default)
        return low if offset == EARLIEST_OFFSET else high if offset == LATEST_OFFSET else offset


@dataclass(frozen=True)
class AtTimestamp:
    """The first message stored at or after ``timestamp_ms`` on every queue (max offset when none is)."""

    timestamp_ms: int


@dataclass(frozen=True)
class TimestampsPerQueue:
    """A timestamp (epoch ms) per queue (``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``): each
    queue at its first message stored at or after its time; queues left out start at earliest (a start) or
    end at latest (an end), as in :class:`SpecificOffsets`."""

    timestamps: QueueOffsets


StartPosition = Position | SpecificOffsets | AtTimestamp | TimestampsPerQueue
EndPosition = Literal[Position.LATEST] | SpecificOffsets | AtTimestamp | TimestampsPerQueue

__all__ = ["AtTimestamp", "EARLIEST", "EndPosition", "GROUP", "LATEST", "OffsetJson", "Position", "QueueIndex",
           "QueueOffsets", "SpecificOffsets", "StartPosition", "TimestampsPerQueue"]
