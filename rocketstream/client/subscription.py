"""Tag subscription expressions (spec 9.1): ``"*"`` or ``"TagA || TagB"``.

Filtering happens in two stages, as in RocketMQ: the broker keeps consume-queue units whose
``tagsCode`` is one of the subscribed tags' Java hashes (:meth:`SubscriptionData.matches`, cheap,
lets hash collisions through), then the client keeps messages whose ``TAGS`` string is one of the
subscribed tags (:meth:`SubscriptionData.matches_tag`). A message is delivered when both pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rocketstream.client._java import java_trim
from rocketstream.errors import OptionError
from rocketstream.store.format import java_hash

SUB_ALL = "*"
TAG_SEPARATOR = "||"


@dataclass(frozen=True)
class SubscriptionData:
    sub_all: bool
    tags: frozenset[str]
    codes: frozenset[int]  # Java String.hashCode (signed int32) of each tag
    sub_string: str = SUB_ALL  # the expression as given ("*" when sub_all)

    @classmethod
    def parse(cls, sub_expression: str | None) -> SubscriptionData:
        """FilterAPI.buildSubscriptionData for expression type TAG.

        Only ``None``, ``""`` and exactly ``"*"`` mean "all"; ``"TagA||*"`` subscribes to the tags
        ``TagA`` and ``*``. Pieces are trimmed the Java way and empty pieces are dropped, so an
        expression of separators and blanks yields no tag at all: see :attr:`is_empty`.
        """
        if not sub_expression or sub_expression == SUB_ALL:
            return cls(True, frozenset(), frozenset(), SUB_ALL)
        tags = {java_trim(piece) for piece in sub_expression.split(TAG_SEPARATOR)} - {""}
        return cls(False, frozenset(tags), frozenset(java_hash(t) for t in tags), sub_expression)

    @classmethod
    def parse_option(cls, sub_expression: str | None, option: str = "subExpression") -> SubscriptionData:
        """:meth:`parse`, raising OptionError for an expression that names no tag (e.g. ``"||"``;
        the Java client throws "subString split error" for some of these and matches nothing for
        the others)."""
        sub = cls.parse(sub_expression)
        if sub.is_empty:
            raise OptionError(
                option, "names no tag; use '*' for all messages or 'TagA || TagB'", sub_expression
            )
        return sub

    @property
    def is_empty(self) -> bool:
        """True when the expression is not "all" yet names no tag: it can never match."""
        return not self.sub_all and not self.tags

    def matches(self, tags_code: int | None) -> bool:
        """Broker stage: a consume-queue unit's tagsCode (int64; None = unknown) passes."""
        if self.sub_all or tags_code is None:
            return True
        return _as_int32(tags_code) in self.codes

    def matches_tag(self, tag: str | None) -> bool:
        """Client stage: the message's TAGS property passes (no tag set = no client filter)."""
        if not self.tags:
            return True
        return tag is not None and tag in self.tags

    def code_mask(self, tags_codes: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`matches` over an array of CQ tagsCode values (bool mask)."""
        codes = np.asarray(tags_codes)
        if self.sub_all:
            return np.ones(codes.shape, dtype=bool)
        as_int32 = codes.astype(np.int64).astype(np.int32)  # Java (int) cast keeps the low 32 bits
        return np.isin(as_int32, np.fromiter(self.codes, dtype=np.int32, count=len(self.codes)))


def _as_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value
