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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from rocketstream.client.offset_ranges import (
    EARLIEST as EARLIEST_OFFSET,
)
from rocketstream.client.offset_ranges import (
    LATEST as LATEST_OFFSET,
)
from rocketstream.client.offset_ranges import (
    QueueKey,
    offsets_from_dict,
    offsets_to_dict,
)

OffsetJson = dict[str, dict[str, dict[str, int]]]


class QueueOffsets(Mapping[QueueKey, int]):
    """An immutable ``QueueKey -> offset`` mapping in queue order, which owns its JSON form."""

    __slots__ = ("_offsets",)

    def __init__(self, offsets: Mapping[QueueKey, int] | None = None) -> None:
        self._offsets: dict[QueueKey, int] = {q: int(o) for q, o in sorted((offsets or {}).items())}

    # ---- JSON -----------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, obj: object, *, option: str = "offset", allow_special: bool = False) -> QueueOffsets:
        """From the decoded JSON (what Spark hands a stream reader back); malformed -> OptionError naming
        ``option``. ``allow_special`` admits -2 (earliest) and -1 (latest), as users may write them."""
        return cls(offsets_from_dict(obj, option=option, allow_special=allow_special))

    @classmethod
    def from_json(cls, text: str, *, option: str = "offset", allow_special: bool = False) -> QueueOffsets:
        from rocketstream.client.offset_ranges import offsets_from_json

        return cls(offsets_from_json(text, option=option, allow_special=allow_special))

    def to_dict(self) -> OffsetJson:
        """The nested dict a stream reader returns to Spark, keys in the fixed order."""
        return offsets_to_dict(self._offsets)

    def to_json(self) -> str:
        """The string Spark stores in the checkpoint for this offset (``json.dumps`` of :meth:`to_dict`)."""
        return json.dumps(self.to_dict())

    # ---- mapping --------------------------------------------------------------------------------
    def __getitem__(self, q: QueueKey) -> int:
        return self._offsets[q]

    def __iter__(self) -> Iterator[QueueKey]:
        return iter(self._offsets)

    def __len__(self) -> int:
        return len(self._offsets)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._offsets == dict(other.items())
        return NotImplemented

    def by_broker(self) -> dict[str, dict[str, dict[int, int]]]:
        """``{brokerName: {topic: {queueId: offset}}}``: what each broker's offset table receives."""
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


StartPosition = Position | SpecificOffsets | AtTimestamp
EndPosition = Literal[Position.LATEST] | SpecificOffsets | AtTimestamp

__all__ = ["AtTimestamp", "EARLIEST", "EndPosition", "GROUP", "LATEST", "OffsetJson", "Position", "QueueOffsets",
           "SpecificOffsets", "StartPosition"]
