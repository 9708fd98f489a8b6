"""Namespaces as the Java client has them (``NamespaceUtil``, ``ClientConfig.namespace``): a resource
``R`` of namespace ``ns`` is ``ns%R`` on the wire and in the broker; retry and DLQ topics keep their
prefix in front (``%RETRY%ns%group``, ``%DLQ%ns%group``); system topics and groups are never wrapped.
Delivered messages, routes and results are unwrapped back to ``R``.

The rules follow ``NamespaceUtil`` of RocketMQ 4.9.8 exactly: a system resource is what
``TopicValidator.isSystemTopic`` (a fixed set of names, or the ``rmq_sys_`` prefix) or
``MixAll.isSysConsumerGroup`` (the ``CID_RMQ_SYS_`` prefix) says it is; ``wrapNamespace`` leaves a resource
already in the namespace alone; ``withoutNamespace(resource, namespace)`` strips only this namespace and
never touches a system resource.

These are the pure rules; the clients apply them (``namespace=`` on producers, consumers and admin calls),
and the Spark source/sink and the CLI through their ``namespace`` option.
"""

from __future__ import annotations

from rocketstream.errors import OptionError

__all__ = ["wrap", "unwrap", "check_namespace", "is_system_resource", "SEPARATOR"]

SEPARATOR = "%"                      # NamespaceUtil.NAMESPACE_SEPARATOR
RETRY_PREFIX = "%RETRY%"             # MixAll.RETRY_GROUP_TOPIC_PREFIX
DLQ_PREFIX = "%DLQ%"                 # MixAll.DLQ_GROUP_TOPIC_PREFIX
# TopicValidator.SYSTEM_TOPIC_SET (4.9.8): exact names
SYSTEM_TOPICS = frozenset({"TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
                           "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                           "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"})
SYSTEM_TOPIC_PREFIX = "rmq_sys_"     # TopicValidator.SYSTEM_TOPIC_PREFIX
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"  # MixAll.CID_RMQ_SYS_PREFIX (MixAll.isSysConsumerGroup)


def check_namespace(namespace: str | None, field: str = "namespace") -> str | None:
    """``namespace`` as given, or None for none/empty; a name with ``%`` (the separator) is an OptionError."""
    if namespace is None or namespace == "":
        return None
    if not isinstance(namespace, str) or SEPARATOR in namespace or not namespace.strip() \
            or namespace != namespace.strip():
        raise OptionError(field, "must be a name without '%' or surrounding blanks", namespace)
    return namespace


def is_system_resource(resource: str) -> bool:
    """``NamespaceUtil.isSystemResource``: a system topic or a system consumer group."""
    return bool(resource) and (resource in SYSTEM_TOPICS or resource.startswith(SYSTEM_TOPIC_PREFIX)
                               or resource.startswith(SYSTEM_GROUP_PREFIX))


def _split(resource: str) -> tuple[str, str]:
    """(the retry or DLQ prefix or "", the rest): ``isRetryTopic`` / ``isDLQTopic`` / ``withOutRetryAndDLQ``."""
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if resource.startswith(prefix):
            return prefix, resource[len(prefix):]
    return "", resource


def wrap(namespace: str | None, resource: str) -> str:
    """``NamespaceUtil.wrapNamespace``: ``resource`` in ``namespace`` (unchanged without one, for system
    resources, and when already wrapped)."""
    if not namespace or not resource or is_system_resource(resource):
        return resource
    prefix, inner = _split(resource)
    if inner.startswith(namespace + SEPARATOR):   # isAlreadyWithNamespace
        return resource
    return prefix + namespace + SEPARATOR + inner


def unwrap(namespace: str | None, resource: str) -> str:
    """``NamespaceUtil.withoutNamespace(resource, namespace)``: ``resource`` with ``namespace`` taken off
    (retry/DLQ prefix kept); a resource of another namespace or none, or a system resource, is returned
    unchanged."""
    if not namespace or not resource:
        return resource
    prefix, inner = _split(resource)
    if not inner.startswith(namespace + SEPARATOR) or is_system_resource(resource):
        return resource
    # withoutNamespace(resource): everything after the first separator (the namespace has none)
    return prefix + inner[len(namespace) + 1:]
