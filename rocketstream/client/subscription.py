"""Tag subscription expressions (``FilterAPI.buildSubscriptionData``): ``"*"`` or ``"TagA || TagB"``.

Filtering happens in two stages, as in RocketMQ: the broker keeps consume-queue units whose
``tagsCode`` is one of the subscribed tags' Java hashes (:attr:`SubscriptionData.codes`; cheap, lets
hash collisions through), then the client keeps messages whose ``TAGS`` string is one of the
subscribed :attr:`SubscriptionData.tags`. A message is delivered when both pass (the local reader does
both in ``store/read/bulk_read.py``).

SQL92 subscriptions (``expressionType=SQL92``, :meth:`SubscriptionData.parse_sql92`) are compiled here with
:mod:`rocketstream.codec.sql92` (a parse error is a FilterExpressionError at ``subscribe``, before any broker
is asked), evaluated by the broker (``enablePropertyFilter``) and again by the client on the messages it
receives (:meth:`SubscriptionData.filter_messages`; RocketMQ's Java client trusts the broker here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from rocketstream.client._java import java_trim
from rocketstream.codec.sql92 import SqlFilter, compile_sql92
from rocketstream.codec.tags import java_hash
from rocketstream.errors import OptionError


class _HasProperties(Protocol):
    @property
    def properties(self) -> Mapping[str, str]: ...


M = TypeVar("M", bound=_HasProperties)

SUB_ALL = "*"
TAG_SEPARATOR = "||"


@dataclass(frozen=True)
class SubscriptionData:
    sub_all: bool
    tags: frozenset[str]
    codes: frozenset[int]  # Java String.hashCode (signed int32) of each tag
    sub_string: str = SUB_ALL  # the expression as given ("*" when sub_all)
    sql: SqlFilter | None = None  # a SQL92 subscription's compiled filter (parse_sql92)

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

    @classmethod
    def parse_sql92(cls, expression: str | None, option: str = "expression") -> SubscriptionData:
        """A SQL92 subscription: the expression compiled (FilterExpressionError naming the position when it
        does not parse; OptionError when empty)."""
        if not expression or not expression.strip():
            raise OptionError(option, "a SQL92 expression must not be empty", expression)
        return cls(False, frozenset(), frozenset(), expression, compile_sql92(expression))

    def filter_messages(self, msgs: Sequence[M]) -> list[M]:
        """The messages whose properties the SQL92 filter matches (all of them for a TAG subscription)."""
        sql = self.sql
        if sql is None:
            return list(msgs)
        return [m for m in msgs if sql.matches(m.properties)]
