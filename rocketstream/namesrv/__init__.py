"""A RocketMQ name server (``NamesrvController``): brokers register over the remoting protocol,
clients ask it for routes. Imports only ``remoting`` (and ``codec`` through it) — no store."""

from rocketstream.namesrv.controller import NamesrvConfig, NamesrvController
from rocketstream.namesrv.route_info import RouteInfoManager

__all__ = ["NamesrvConfig", "NamesrvController", "RouteInfoManager"]
