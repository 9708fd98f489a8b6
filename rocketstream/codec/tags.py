"""Java ``String.hashCode``, the consume-queue tags code and delay-level maths
(``MessageExtBrokerInner.tagsString2tagsCode``, ``CommitLog.checkMessageAndReturnSize``'s delay branch,
``ScheduleMessageService.parseDelayLevel``)."""

from __future__ import annotations

import re
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from rocketstream.codec.constants import (
    DELAY_LEVELS_MS,
    EXT_ADDRESS_MAX,
    PROPERTY_DELAY,
    PROPERTY_TAGS,
    SCHEDULE_TOPIC,
)
from rocketstream.errors import CorruptStoreError, StoreConfigError

_JAVA_INT = re.compile(r"[+-]?[0-9]+")


@lru_cache(maxsize=4096)
def java_hash(s: str) -> int:
    """Java ``String.hashCode``: over UTF-16 code units, wrapping to a signed int32."""
    if s.isascii():
        units: Iterable[int] = s.encode("ascii")
    else:
        units = array("H", s.encode("utf-16-le" if sys.byteorder == "little" else "utf-16-be", "surrogatepass"))
    h = 0
    for unit in units:
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x80000000 else h


def is_ext_address(tags_code: int) -> bool:
    """True when a CQ unit's tagsCode is a ConsumeQueueExt address (``ConsumeQueueExt.isExtAddr``)."""
    return tags_code <= EXT_ADDRESS_MAX


def tags_code(tags: str | None) -> int:
    """Consume-queue tags code of a normal message: 0 without tags, else Java hash (sign-extended)."""
    return java_hash(tags) if tags else 0


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``messageDelayLevel`` ("1s 5s ... 2h") to milliseconds per level (index = level - 1)."""
    units = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    levels = []
    for item in text.split():
        if item[-1:] not in units or not item[:-1].isdigit():
            raise StoreConfigError(f"messageDelayLevel: bad level {item!r} in {text!r} (expected e.g. '1s 5m 2h')")
        levels.append(int(item[:-1]) * units[item[-1]])
    return tuple(levels)


def cq_tags_code(
    topic: str,
    properties: Mapping[str, str],
    store_timestamp: int,
    *,
    delay_levels: Sequence[int] | Mapping[int, int] = DELAY_LEVELS_MS,
    path: object = None,
    offset: int | None = None,
) -> int:
    """The tagsCode a dispatcher writes into the CQ unit of this record (``CommitLog.checkMessageAndReturnSize``:
    the tags hash, or the delivery time for a delayed message).

    For SCHEDULE_TOPIC_XXXX with a DELAY property it is the delivery time: store time + delay of the
    level (level clamped to the highest; +1000 ms when the level has no delay configured).
    """
    if topic == SCHEDULE_TOPIC:
        raw = properties.get(PROPERTY_DELAY)
        if raw is not None:
            if not _JAVA_INT.fullmatch(raw) or not -(2**31) <= int(raw) < 2**31:
                raise CorruptStoreError(f"DELAY property {raw!r} of a {SCHEDULE_TOPIC} record is not an int32",
                                        path=path, offset=offset)
            if isinstance(delay_levels, Mapping):
                max_level = max(delay_levels, default=0)
                level = min(int(raw), max_level)
                delay = delay_levels.get(level)
            else:
                level = min(int(raw), len(delay_levels))
                delay = delay_levels[level - 1] if level > 0 else None
            if level > 0:
                return store_timestamp + (1000 if delay is None else delay)
    return tags_code(properties.get(PROPERTY_TAGS))

