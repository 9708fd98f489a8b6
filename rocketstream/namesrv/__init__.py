"""A RocketMQ name server (``NamesrvController``): brokers register over the remoting protocol,
clients ask it for routes. Imports only ``remoting`` and ``codec`` (+ ``errors``, ``fsutil``) — no store, no
broker. ``rocketstream namesrv`` and ``serve`` run it (rocketstream/serve.py)."""

from rocketstream.namesrv.controller import NamesrvConfig, NamesrvController
from rocketstream.namesrv.route_info import RouteInfoManager

__all__ = ["NamesrvConfig", "NamesrvController", "RouteInfoManager"]
