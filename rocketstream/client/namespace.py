"""Namespaces as the Java client has them (``NamespaceUtil``, ``ClientConfig.namespace``): a resource
``R`` of namespace ``ns`` is ``ns%R`` on the wire and in the broker; retry and DLQ topics keep their
prefix in front (``%RETRY%ns%group``, ``%DLQ%ns%group``); system topics and groups are never wrapped.
Delivered messages, routes and results are unwrapped back to ``R``.

These are the pure rules; the clients apply them (``namespace=`` on producers, consumers and admin calls),
and the Spark source/sink and the CLI through their ``namespace`` option.
"""

from __future__ import annotations

from rocketstream.errors import OptionError

__all__ = ["wrap", "unwrap", "check_namespace", "SEPARATOR"]

SEPARATOR = "%"                      # NamespaceUtil.NAMESPACE_SEPARATOR
RETRY_PREFIX = "%RETRY%"             # MixAll.RETRY_GROUP_TOPIC_PREFIX
DLQ_PREFIX = "%DLQ%"                 # MixAll.DLQ_GROUP_TOPIC_PREFIX
# NamespaceUtil.isSystemResource: TopicValidator's system topics and MixAll's system groups
SYSTEM_PREFIXES = ("rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC_XXXX", "TBW102", "BenchmarkTest", "OFFSET_MOVED_EVENT",
                   "SELF_TEST_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "%SYS%", "CID_RMQ_SYS_", "CID_ONSAPI_",
                   "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_ONSAPI_PULL",
                   "DEFAULT_PRODUCER", "DEFAULT_CONSUMER", "TOOLS_CONSUMER", "FILTERSRV_CONSUMER",
                   "__MONITOR_CONSUMER", "CLIENT_INNER_PRODUCER", "SELF_TEST_P_GROUP", "SELF_TEST_C_GROUP")


def check_namespace(namespace: str | None, field: str = "namespace") -> str | None:
    """``namespace`` as given, or None for none/empty; a name with ``%`` (the separator) is an OptionError."""
    if namespace is None or namespace == "":
        return None
    if not isinstance(namespace, str) or SEPARATOR in namespace or not namespace.strip() \
            or namespace != namespace.strip():
        raise OptionError(field, "must be a name without '%' or surrounding blanks", namespace)
    return namespace


def _is_system(resource: str) -> bool:
    return resource.startswith(SYSTEM_PREFIXES)


def wrap(namespace: str | None, resource: str) -> str:
    """``NamespaceUtil.wrapNamespace``: ``resource`` in ``namespace`` (unchanged without one, for system
    resources, and when already wrapped)."""
    if not namespace or not resource or _is_system(resource):
        return resource
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if resource.startswith(prefix):
            inner = resource[len(prefix):]
            return resource if inner.startswith(namespace + SEPARATOR) else prefix + namespace + SEPARATOR + inner
    if resource.startswith(namespace + SEPARATOR):
        return resource
    return namespace + SEPARATOR + resource


def unwrap(namespace: str | None, resource: str) -> str:
    """``NamespaceUtil.withoutNamespace``: ``resource`` with ``namespace`` taken off (retry/DLQ prefix kept);
    a resource of another namespace or none is returned unchanged."""
    if not namespace or not resource:
        return resource
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if resource.startswith(prefix):
            inner = resource[len(prefix):]
            if inner.startswith(namespace + SEPARATOR):
                return prefix + inner[len(namespace) + 1:]
            return resource
    if resource.startswith(namespace + SEPARATOR):
        return resource[len(namespace) + 1:]
    return resource
