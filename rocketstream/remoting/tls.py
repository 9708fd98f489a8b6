"""The server side of TLS (RocketMQ's ``TlsSystemConfig`` ``tls.server.*`` settings and
``NettyRemotingServer.HandshakeHandler``), and what a client needs to tell TLS failures apart.

Modes (``tls.server.mode``, :data:`TLS_MODES`), as 4.9.8's ``TlsMode``:

* ``disabled``: plain TCP only (a TLS ClientHello is not a frame: its first four bytes announce a frame far
  over the limit, and the connection is closed as any bad frame's);
* ``permissive``: TLS and plain TCP on one port. The first byte of a connection tells them apart, as
  ``HandshakeHandler`` does: a TLS record of type handshake starts with 0x16 (``HANDSHAKE_MAGIC_CODE``), a
  remoting frame with the high byte of its length (0 for every frame under 16 MiB);
* ``enforcing``: TLS only; a connection whose first byte is not 0x16 is closed without an answer, as
  ``HandshakeHandler`` closes it ("Clients intend to establish an insecure connection while this server is
  running in SSL enforcing mode").

The first byte is peeked (``MSG_PEEK``), never read, so the TLS handshake then runs on an untouched socket
(asyncio's SSL transport, ``loop.connect_accepted_socket(..., ssl=...)``: the handshake never blocks the loop,
and one that does not finish within :attr:`ServerTlsConfig.handshake_timeout_s` is cut). After it, the
connection is the same :class:`~rocketstream.remoting.transport.FrameProtocol` as a plain one, with the same
receive budgets.

Client authentication (``tls.server.need.client.auth``): ``none``, ``optional`` (a certificate is checked when
the client presents one), ``require`` (a client without a certificate signed by ``tls.server.trustCertPath``
fails the handshake). The server's key (``tls.server.keyPath``) is a PEM file: PKCS#8 as 4.9.8 takes (Netty's
``SslContextBuilder.forServer(cert, key, password)``), encrypted with ``tls.server.keyPassword`` or not; the
password is a secret and never shown (``repr``, errors, logs).
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocketstream.errors import OptionError

__all__ = ["CLIENT_AUTH", "DEFAULT_HANDSHAKE_TIMEOUT_S", "HANDSHAKE_MAGIC_CODE", "SERVER_TLS_PROPERTIES",
           "ServerTlsConfig", "TLS_MODES", "check_pem_paths", "describe_handshake_error", "masked_repr",
           "peek_first_byte"]

HANDSHAKE_MAGIC_CODE = 0x16            # NettyRemotingServer.HandshakeHandler: a TLS handshake record's type
TLS_MODES = ("disabled", "permissive", "enforcing")   # TlsMode
CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}  # ClientAuth
# Netty's SslHandler.handshakeTimeoutMillis default (10 s): a peer that stalls in the handshake is cut after it
DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0

# RocketMQ's property names (TlsSystemConfig) -> ServerTlsConfig fields
SERVER_TLS_PROPERTIES: dict[str, str] = {
    "tls.server.mode": "mode",
    "tls.server.certPath": "cert_path",
    "tls.server.keyPath": "key_path",
    "tls.server.keyPassword": "key_password",
    "tls.server.trustCertPath": "trust_cert_path",
    "tls.server.need.client.auth": "need_client_auth",
}


@dataclass(frozen=True, kw_only=True)
class ServerTlsConfig:
    """A server's TLS settings (see the module doc). ``mode`` None: ``permissive`` when a certificate and key
    are given, else ``disabled`` (4.9.8's default is permissive with a self-signed certificate it makes itself,
    which proves nothing to a client that verifies; we make none)."""

    mode: str | None = None
    cert_path: str | None = None
    key_path: str | None = None
    key_password: str | None = dataclasses.field(default=None, repr=False)
    trust_cert_path: str | None = None
    need_client_auth: str = "none"
    handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S

    def __post_init__(self) -> None:
        check_pem_paths(self, {name: _prop(name) for name in ("cert_path", "key_path", "trust_cert_path")})
        mode = self.mode
        if mode is None:
            mode = "permissive" if self.cert_path is not None and self.key_path is not None else "disabled"
        if not isinstance(mode, str) or mode.strip().lower() not in TLS_MODES:
            raise OptionError("tls.server.mode", f"must be one of {', '.join(TLS_MODES)}", self.mode)
        object.__setattr__(self, "mode", mode.strip().lower())
        auth = self.need_client_auth
        if not isinstance(auth, str) or auth.strip().lower() not in CLIENT_AUTH:
            raise OptionError("tls.server.need.client.auth", f"must be one of {', '.join(CLIENT_AUTH)}", auth)
        object.__setattr__(self, "need_client_auth", auth.strip().lower())
        if self.key_password is not None and not isinstance(self.key_password, str):
            raise OptionError("tls.server.keyPassword", "must be a string or None, not "
                              + type(self.key_password).__name__)
        if not isinstance(self.handshake_timeout_s, (int, float)) or not self.handshake_timeout_s > 0:
            raise OptionError("handshake_timeout_s", "must be a number > 0", self.handshake_timeout_s)
        if self.enabled and (self.cert_path is None or self.key_path is None):
            missing = "tls.server.certPath" if self.cert_path is None else "tls.server.keyPath"
            raise OptionError(missing, f"is needed with tls.server.mode={self.mode} (a PEM file)")

    def __repr__(self) -> str:
        return masked_repr(self)

    __str__ = __repr__

    @property
    def enabled(self) -> bool:
        """TLS is served (permissive or enforcing)."""
        return self.mode != "disabled"

    @classmethod
    def from_properties(cls, props: Mapping[str, str], **kw: object) -> ServerTlsConfig:
        """From RocketMQ's ``tls.server.*`` names (:data:`SERVER_TLS_PROPERTIES`, case-sensitive as
        ``java.util.Properties``; other keys are ignored, as a broker.conf holds many); ``kw`` sets the other
        fields."""
        fields: dict[str, object] = dict(kw)
        for key, value in props.items():
            attr = SERVER_TLS_PROPERTIES.get(key)
            if attr is not None:
                fields[attr] = value.strip() if attr != "key_password" else value
        return cls(**fields)  # type: ignore[arg-type]  # each value is a str, checked in __post_init__

    def ssl_context(self) -> ssl.SSLContext:
        """The server-side context (TLS 1.2 or newer); an unreadable certificate or key, or a wrong key
        password, is an OptionError naming the setting (never the password)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        assert self.cert_path is not None and self.key_path is not None   # __post_init__ when enabled
        try:
            # a password callback: an encrypted key without a password fails instead of prompting on a tty
            ctx.load_cert_chain(self.cert_path, self.key_path, password=lambda: (self.key_password or "").encode())
        except ssl.SSLError as exc:
            raise OptionError("tls.server.keyPath", f"certificate {self.cert_path} and key do not load "
                              f"(a PEM certificate and a PEM private key, PKCS#8 or PKCS#1, and the right "
                              f"tls.server.keyPassword): {exc.reason or exc}", self.key_path) from None
        ctx.verify_mode = CLIENT_AUTH[self.need_client_auth]
        if self.trust_cert_path is not None:
            try:
                ctx.load_verify_locations(cafile=self.trust_cert_path)
            except ssl.SSLError as exc:
                raise OptionError("tls.server.trustCertPath", f"is not a PEM certificate file: {exc.reason or exc}",
                                  self.trust_cert_path) from None
        elif ctx.verify_mode != ssl.CERT_NONE:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        return ctx


def check_pem_paths(config: object, fields: Mapping[str, str]) -> None:
    """Each of a frozen TLS config's path ``fields`` (field -> the option name errors show): None, or a
    str/Path naming an existing file (a Path is stored as str)."""
    for name, option in fields.items():
        value = getattr(config, name)
        if value is None:
            continue
        if isinstance(value, Path):
            object.__setattr__(config, name, value := str(value))
        if not isinstance(value, str) or not value:
            raise OptionError(option, "must be a path to a PEM file", value)
        if not Path(value).is_file():
            raise OptionError(option, "names no readable file", value)


def masked_repr(config: object) -> str:
    """A TLS config dataclass's repr with its ``key_password`` (a secret, ``repr=False``) shown as hidden."""
    shown = [f"{f.name}={getattr(config, f.name)!r}" for f in dataclasses.fields(config)  # type: ignore[arg-type]
             if f.repr]
    if getattr(config, "key_password", None) is not None:
        shown.append("key_password=<hidden>")
    return f"{type(config).__name__}({', '.join(shown)})"


def _prop(field_name: str) -> str:
    return next(k for k, v in SERVER_TLS_PROPERTIES.items() if v == field_name)


async def peek_first_byte(sock: socket.socket, timeout: float) -> int | None:
    """The first byte of an accepted non-blocking socket, left in the socket (``MSG_PEEK``); None at end of
    stream. TimeoutError when nothing arrives within ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            pass
        else:
            return first[0] if first else None
        ready = loop.create_future()
        fd = sock.fileno()
        loop.add_reader(fd, _set_done, ready)
        try:
            await asyncio.wait_for(ready, max(0.0, deadline - loop.time()))
        finally:
            loop.remove_reader(fd)


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def describe_handshake_error(exc: BaseException) -> str:
    """Why a TLS handshake failed, in words: the certificate check's message, the alert the peer sent, or a
    peer that closed the connection (often a server or client without TLS)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or str(exc)
        if "EOF" in str(exc) or reason in ("UNEXPECTED_EOF_WHILE_READING",):
            return "the peer closed the connection during the handshake (does it speak TLS?)"
        if reason == "WRONG_VERSION_NUMBER" or reason == "HTTP_REQUEST":
            return f"the peer does not speak TLS ({reason})"
        return reason.replace("_", " ").lower() if exc.reason else reason
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)) or getattr(exc, "errno", None) == errno.ECONNRESET:
        return "the peer closed the connection during the handshake (does it speak TLS?)"
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return "the handshake did not finish in time"
    return f"{type(exc).__name__}: {exc}"
