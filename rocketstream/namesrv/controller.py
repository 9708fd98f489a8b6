"""``NamesrvController``: the remoting server with the name server's processor, the 10-second scan
for expired brokers, and broker connections closing -> routes dropped (``BrokerHousekeepingService``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

from rocketstream.namesrv.kv_config import KVConfigManager
from rocketstream.namesrv.processor import DefaultRequestProcessor
from rocketstream.namesrv.route_info import BROKER_CHANNEL_EXPIRED_S, RouteInfoManager
from rocketstream.remoting.server import SERVER_CHANNEL_MAX_IDLE_S, RemotingServer
from rocketstream.remoting.tls import ServerTlsConfig

__all__ = ["NamesrvConfig", "NamesrvController"]

log = logging.getLogger("rocketstream.namesrv")

SCAN_NOT_ACTIVE_BROKER_INTERVAL_S = 10.0   # NamesrvController.initialize: scanNotActiveBroker every 10 s


@dataclass
class NamesrvConfig:
    host: str = "127.0.0.1"
    port: int = 9876
    broker_expiry_s: float = BROKER_CHANNEL_EXPIRED_S
    scan_interval_s: float = SCAN_NOT_ACTIVE_BROKER_INTERVAL_S
    order_message_enable: bool = False          # NamesrvConfig.orderMessageEnable
    kv_config_path: Path | None = None          # NamesrvConfig.kvConfigPath (None: in memory only)
    idle_timeout_s: float | None = SERVER_CHANNEL_MAX_IDLE_S
    tls: ServerTlsConfig | None = None          # tls.server.* (remoting/tls.py); None: plain TCP


class NamesrvController:
    def __init__(self, config: NamesrvConfig | None = None) -> None:
        self.config = config or NamesrvConfig()
        self.routes = RouteInfoManager(broker_expiry_s=self.config.broker_expiry_s)
        self.kv = KVConfigManager(self.config.kv_config_path)
        self.processor = DefaultRequestProcessor(self.routes, self.kv,
                                                 order_message_enable=self.config.order_message_enable)
        self.server = RemotingServer(self.config.host, self.config.port, name="namesrv",
                                     idle_timeout_s=self.config.idle_timeout_s, tls=self.config.tls)
        self.server.default_processor = self.processor
        self.server.close_listeners.append(lambda ch: self.routes.on_channel_destroy(ch.addr, ch))
        self._scan_task: asyncio.Task | None = None

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> NamesrvController:
        self.kv.load()
        await self.server.start()
        self._scan_task = asyncio.get_running_loop().create_task(self._scan_loop())
        return self

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.scan_interval_s)
            try:
                self.routes.scan_not_active_broker()
            except Exception:   # the scan must go on; the failure is logged with its traceback
                log.exception("scanNotActiveBroker failed")

    async def stop(self) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan_task
        await self.server.stop()
