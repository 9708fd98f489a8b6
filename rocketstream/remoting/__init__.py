"""RocketMQ's TCP remoting protocol on asyncio: frames, codes, connections and a server.

Imports only ``codec`` (the fastjson module, through :mod:`rocketstream.remoting.json_body`) and
``rocketstream.errors``.
"""

from rocketstream.remoting.channel import DEFAULT_TIMEOUT_S, Channel, next_opaque
from rocketstream.remoting.client import connect
from rocketstream.remoting.codes import LanguageCode, RequestCode, ResponseCode, Version, code_name
from rocketstream.remoting.command import (
    MAX_FRAME_LENGTH,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    RemotingCommand,
    SerializeType,
    decode_frame,
    encode_frame,
)
from rocketstream.remoting.server import RemotingServer

__all__ = [
    "Channel", "DEFAULT_TIMEOUT_S", "LanguageCode", "MAX_FRAME_LENGTH", "ONEWAY_FLAG", "RESPONSE_FLAG",
    "RemotingCommand", "RemotingServer", "RequestCode", "ResponseCode", "SerializeType", "Version",
    "code_name", "connect", "decode_frame", "encode_frame", "next_opaque",
]
