"""Which topics and brokers a query reads, as locations: the one place that knows local mode from network mode.

Everything else plans and reads through :class:`~rocketstream.spark.broker_view.BrokerView`s that these
locations open, and never asks which kind it holds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path

from rocketstream.errors import OptionError
from rocketstream.spark import options as opt
from rocketstream.spark.broker_view import BrokerLocation, BrokerView, open_views
from rocketstream.spark.local_view import LocalBroker
from rocketstream.spark.options import RocketMQOptions, topics_matching


def broker_locations(options: RocketMQOptions, topics: Sequence[str] | None = None) -> tuple[BrokerLocation, ...]:
    """The brokers to read. Network mode: every broker with a readable queue of ``topics`` (default: the
    options' topics) in the name server's routes. Local mode: an unnamed ``load(path)`` store is called by
    conf/broker.conf's brokerName when it is the configured default store, else by its directory's name."""
    if options.name_server is not None:
        from rocketstream.spark.network.view import resolve_network_brokers

        return resolve_network_brokers(
            options.name_server, options.topics if topics is None else topics, options.consumer_group,
            request_timeout_s=options.request_timeout_ms / 1000, pull_timeout_s=options.pull_timeout_ms / 1000,
            pull_batch_size=options.pull_batch_size, pull_retries=options.pull_retries, secured=options.secured)
    return tuple(LocalBroker(name or _default_broker_name(root), str(root), options.broker_addr)
                 for name, root in options.brokers)


def query_topics(options: RocketMQOptions, views: Mapping[str, BrokerView] | None = None) -> tuple[str, ...]:
    """The topics a query reads now: the ``topic`` option's, or those ``topicPattern`` matches among the name
    server's topics (network mode) or the stores' topics (local mode; ``views`` when the caller has them
    open). With a ``namespace`` the pattern sees only that namespace's topics, by the user's names
    (``ns%Orders`` is matched as ``Orders``; other namespaces' topics and topics outside any namespace are
    not there), as a Java client in a namespace sees them (``NamespaceUtil.withoutNamespace``). A pattern
    that matches nothing is an OptionError listing the topics there are."""
    pattern = options.topic_pattern
    if pattern is None:
        return options.topics
    excluded: list[str] = []
    if options.name_server is not None:
        from rocketstream.spark.network.routes import name_server_topics

        secured = options.secured
        names, excluded = name_server_topics(options.name_server, options.request_timeout_ms / 1000, secured)
        where = f"name server {options.name_server}"
        if secured.namespace is not None:
            # ns%T only: a retry/DLQ topic (%RETRY%ns%g) is never matched by a pattern anyway
            names = [secured.unwrap(n) for n in names if n.startswith(secured.namespace + "%")]
            where += f", namespace {secured.namespace}"
    else:
        with ExitStack() as stack:
            if views is None:
                views = stack.enter_context(open_views(broker_locations(options)))
            names = sorted({t for v in views.values() for t in v.topics()})
            excluded = list(views)  # a real broker's store holds a topic named after its broker
        where = "the stores"
    topics = topics_matching(pattern, names, excluded)
    if not topics:
        shown = ", ".join(topics_matching(_ANY, names, excluded)) or "none"
        raise OptionError(opt.TOPIC_PATTERN, f"matches no topic of {where} (retry, dead-letter and system topics "
                                             f"only when named literally); topics: {shown}", pattern.pattern)
    return topics


def query_topics_and_brokers(options: RocketMQOptions) -> tuple[tuple[str, ...], tuple[BrokerLocation, ...]]:
    """:func:`query_topics` and the :func:`broker_locations` of those topics."""
    if options.name_server is not None:
        topics = query_topics(options)
        return topics, broker_locations(options, topics)
    locations = broker_locations(options)
    if options.topic_pattern is None:
        return options.topics, locations
    with open_views(locations) as views:
        return query_topics(options, views), locations


def brokers_can_change(options: RocketMQOptions) -> bool:
    """Whether the query's brokers may change while it runs: a name server's routes do (brokers join, leave
    and come back); the store directories of local mode are the ones the options name, so a broker of a
    checkpoint that is not among them is an error, not a broker that is away."""
    return options.name_server is not None


def topics_can_change(options: RocketMQOptions) -> bool:
    """Whether the query's topics may change while it runs: those of a ``topicPattern`` do (topics created
    or deleted); a ``topic`` list is fixed."""
    return options.topic_pattern is not None


def _default_broker_name(root: Path) -> str:
    from rocketstream.store import default_broker_name

    return default_broker_name(root)


_ANY = re.compile(".*", re.S)

__all__ = ["broker_locations", "brokers_can_change", "query_topics", "query_topics_and_brokers",
           "topics_can_change"]
