"""Topic and group names as RocketMQ allows them: the rules every name that arrives from the wire is
checked against before the broker or the name server keeps anything under it.

* Topics: ``TopicValidator.validateTopic`` (4.9.8): not blank, only ``[%|a-zA-Z0-9_-]`` (Java's
  ``Matcher.matches()``: the whole name, so ``"abc\\n"`` is refused; Python's ``re.match`` with ``$``
  would take it), at most 127 characters (``TOPIC_MAX_LENGTH``; a V1 record's topic length is a signed
  byte, spec/rocketmq-store-format.md §1).
* Groups: ``Validators.checkGroup`` (4.9.8 client): not blank, at most 255 characters
  (``CHARACTER_MAX_LENGTH``), the same characters.
* A group's ``%RETRY%<group>`` / ``%DLQ%<group>`` topics are topics: a 4.9.8 broker stores them in V1
  records, so they too are at most 127 characters (:func:`derived_topic_problem`). A 5.x broker may register
  longer ones (up to the prefix + 255, V2 records): :func:`registered_topic_problem` is the name server's rule.

Remarks quote at most :data:`QUOTE_MAX` characters of a name: a refused name may be megabytes long.
"""

from __future__ import annotations

import re

__all__ = ["TOPIC_MAX_LENGTH", "GROUP_MAX_LENGTH", "VALID_PATTERN", "RETRY_GROUP_TOPIC_PREFIX",
           "DLQ_GROUP_TOPIC_PREFIX", "QUOTE_MAX", "quote_name", "topic_problem", "group_problem",
           "derived_topic_problem", "registered_topic_problem"]

TOPIC_MAX_LENGTH = 127                 # TopicValidator.TOPIC_MAX_LENGTH
GROUP_MAX_LENGTH = 255                 # Validators.CHARACTER_MAX_LENGTH
VALID_PATTERN = "^[%|a-zA-Z0-9_-]+$"   # TopicValidator.VALID_PATTERN_STR, as the remarks quote it
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"   # MixAll.RETRY_GROUP_TOPIC_PREFIX
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"       # MixAll.DLQ_GROUP_TOPIC_PREFIX
QUOTE_MAX = 80
_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")


def quote_name(name: str) -> str:
    """``name`` for a remark or a log line: at most QUOTE_MAX characters of it (repr), and its length
    when it is cut."""
    if len(name) <= QUOTE_MAX:
        return repr(name)
    return f"{name[:QUOTE_MAX]!r}... ({len(name)} characters)"


def _legal(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


def topic_problem(topic: object) -> str | None:
    """``TopicValidator.validateTopic``: None when ``topic`` is a legal topic name, else the remark the
    Java broker answers (SYSTEM_ERROR)."""
    if not isinstance(topic, str) or not topic.strip():
        return "The specified topic is blank."
    if not _legal(topic):   # Java's order: characters, then length
        return f"The specified topic contains illegal characters, allowing only {VALID_PATTERN}"
    if len(topic) > TOPIC_MAX_LENGTH:
        return "The specified topic is longer than topic max length."
    return None


def group_problem(group: object) -> str | None:
    """``Validators.checkGroup``: None when ``group`` is a legal group name, else a remark naming it."""
    if not isinstance(group, str) or not group.strip():
        return "the specified group is blank"
    if len(group) > GROUP_MAX_LENGTH:
        return f"the specified group {quote_name(group)} is longer than group max length {GROUP_MAX_LENGTH}."
    if not _legal(group):
        return (f"the specified group[{quote_name(group)}] contains illegal characters, "
                f"allowing only {VALID_PATTERN}")
    return None


def derived_topic_problem(group: object) -> str | None:
    """None when ``group`` is a legal group whose ``%RETRY%`` and ``%DLQ%`` topics are legal topics
    (so at most 127 - 7 characters), else a remark naming the group."""
    problem = group_problem(group)
    if problem is not None:
        return problem
    assert isinstance(group, str)
    longest = max(len(RETRY_GROUP_TOPIC_PREFIX), len(DLQ_GROUP_TOPIC_PREFIX)) + len(group)
    if longest > TOPIC_MAX_LENGTH:
        return (f"the retry topic {RETRY_GROUP_TOPIC_PREFIX}<group> of the group {quote_name(group)} is longer "
                f"than topic max length {TOPIC_MAX_LENGTH}")
    return None


def registered_topic_problem(topic: object) -> str | None:
    """The name server's rule for a topic in a broker's registration: :func:`topic_problem`, except that
    a retry or dead-letter topic may be as long as its prefix + a legal group (5.x brokers keep those
    in V2 records)."""
    if isinstance(topic, str):
        for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
            if topic.startswith(prefix) and len(topic) > TOPIC_MAX_LENGTH:
                return None if group_problem(topic[len(prefix):]) is None else (
                    f"the topic {quote_name(topic)} is not {prefix} + a legal group name")
    return topic_problem(topic)
