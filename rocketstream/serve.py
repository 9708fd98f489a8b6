"""The server commands' process: ``rocketstream namesrv``, ``broker`` and ``serve`` run until SIGTERM/SIGINT.

``serve`` is a name server and a broker in one process, the broker registered with that name server
(unless broker.conf's ``namesrvAddr`` names others). Composing the two is the command line's job: the
broker package imports nothing from the name server's (tests/test_layers.py).

Order, as on one machine running RocketMQ's ``mqnamesrv`` and then ``mqbroker``: the name server starts
first, so the broker's first REGISTER_BROKER finds it; on the signal the broker stops first, so its
UNREGISTER_BROKER reaches a name server that still listens, then the name server stops. Each prints its
ready line once it serves, worded as the Java one (``NamesrvStartup``: "The Name Server boot success.
serializeType=JSON", ``BrokerStartup``: "The broker[name, addr] boot success. serializeType=JSON and name
server is ..."), on the ``rocketstream.namesrv`` / ``rocketstream.broker`` loggers, and a line when it has
stopped. A signal that arrives while they start is kept: they stop as soon as they have started.

With both, the broker.conf's ``tls.server.*`` settings (broker/config.py) serve the name server's port too,
unless the name server's config has its own; the broker's registration follows its ``tls.enable``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocketstream.broker import BrokerConfig, BrokerController
    from rocketstream.namesrv import NamesrvConfig, NamesrvController

__all__ = ["run_until_signal"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

broker_log = logging.getLogger("rocketstream.broker")
namesrv_log = logging.getLogger("rocketstream.namesrv")


async def run_until_signal(*, namesrv: NamesrvConfig | None = None, broker: BrokerConfig | None = None) -> None:
    """Start the name server and/or the broker configured, wait for SIGTERM or SIGINT, stop them (the broker
    first). With both and no ``namesrvAddr`` in ``broker``, the broker registers with this name server
    (its bound address: a port 0 is the one the OS gave). Each controller is imported only when it runs:
    ``rocketstream namesrv`` loads no broker and no store module."""
    if namesrv is None and broker is None:
        raise TypeError("run_until_signal needs a name server config, a broker config or both")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    ns: NamesrvController | None = None
    br: BrokerController | None = None
    try:
        if namesrv is not None:
            from rocketstream.namesrv import NamesrvController

            if broker is not None and namesrv.tls is None and broker.tls_server is not None:
                # one process, one broker.conf: its tls.server.* settings serve both ports
                namesrv = replace(namesrv, tls=broker.tls_server)
            ns = await NamesrvController(namesrv).start()
            namesrv_log.info("The Name Server boot success. serializeType=JSON, listening on %s", ns.address)
            if broker is not None and not broker.namesrv_addr:
                broker = replace(broker, namesrv_addr=ns.address)
        if broker is not None:
            from rocketstream.broker import BrokerController

            br = await BrokerController(broker).start()
            broker_log.info("The broker[%s, %s] boot success. serializeType=JSON and name server is %s (store %s)",
                            br.config.broker_name, br.broker_addr, br.config.namesrv_addr, br.store.root)
        await stop.wait()
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        try:
            if br is not None:
                await br.stop()
                broker_log.info("The broker[%s, %s] shutdown OK", br.config.broker_name, br.broker_addr)
        finally:
            if ns is not None:
                await ns.stop()
                namesrv_log.info("The Name Server on %s stopped", ns.address)
