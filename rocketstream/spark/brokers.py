"""Which brokers a query reads, as locations: the one place that knows local mode from network mode.

Everything else plans and reads through :class:`~rocketstream.spark.broker_view.BrokerView`s that these
locations open, and never asks which kind it holds.
"""

from __future__ import annotations

from pathlib import Path

from rocketstream.spark.broker_view import BrokerLocation
from rocketstream.spark.local_view import LocalBroker
from rocketstream.spark.options import RocketMQOptions


def broker_locations(options: RocketMQOptions) -> tuple[BrokerLocation, ...]:
    """The brokers to read. Network mode: every broker with a readable queue of the topics in the name
    server's routes. Local mode: an unnamed ``load(path)`` store is called by conf/broker.conf's brokerName
    when it is the configured default store, else by its directory's name."""
    if options.name_server is not None:
        from rocketstream.spark.network.view import resolve_network_brokers

        return resolve_network_brokers(options.name_server, options.topics, options.consumer_group,
                                       options.secured)
    return tuple(LocalBroker(name or _default_broker_name(root), str(root), options.broker_addr)
                 for name, root in options.brokers)


def brokers_can_change(options: RocketMQOptions) -> bool:
    """Whether the query's brokers may change while it runs: a name server's routes do (brokers join, leave
    and come back); the store directories of local mode are the ones the options name, so a broker of a
    checkpoint that is not among them is an error, not a broker that is away."""
    return options.name_server is not None


def _default_broker_name(root: Path) -> str:
    from rocketstream.store import default_broker_name

    return default_broker_name(root)


__all__ = ["broker_locations", "brokers_can_change"]
