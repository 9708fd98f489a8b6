"""``TlsConfig``: how a client (ours, or the broker's own client side) opens TLS connections, with
RocketMQ's settings (``TlsSystemConfig``: ``tls.enable``, ``tls.test.mode.enable``, ``tls.client.*``).

``tls=True`` on a client means ``TlsConfig()``: the system's trust store, the server's certificate and host
name verified. ``TlsConfig(trust_cert_path=...)`` trusts that CA (PEM) instead; ``cert_path`` / ``key_path``
(``key_password``) present a client certificate for mutual TLS; ``verify_hostname=False`` keeps the
certificate check and drops the host name check; ``test_mode=True`` (``tls.test.mode.enable``) checks
nothing, as RocketMQ's test mode does: an explicit opt-out, never a default.

The key password is a secret: ``repr`` hides it. Pickling carries it (Spark ships a reader's settings to
its executors, as with :class:`~rocketstream.client.credentials.Credentials`).
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rocketstream.errors import OptionError
from rocketstream.remoting.tls import check_pem_paths, masked_repr

__all__ = ["TlsConfig", "TLS_PROPERTIES", "tls_config"]

# RocketMQ's property names (TlsSystemConfig) -> TlsConfig fields
TLS_PROPERTIES: dict[str, str] = {
    "tls.client.trustCertPath": "trust_cert_path",
    "tls.client.certPath": "cert_path",
    "tls.client.keyPath": "key_path",
    "tls.client.keyPassword": "key_password",
    "tls.test.mode.enable": "test_mode",
}
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def _flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise OptionError(name, "must be true or false", value)


@dataclass(frozen=True, kw_only=True)
class TlsConfig:
    """A client's TLS settings (see the module doc). Paths are PEM files; checked when the config is made."""

    trust_cert_path: str | None = None
    cert_path: str | None = None
    key_path: str | None = None
    key_password: str | None = dataclasses.field(default=None, repr=False)
    verify_hostname: bool = True
    test_mode: bool = False

    def __post_init__(self) -> None:
        check_pem_paths(self, {name: name for name in ("trust_cert_path", "cert_path", "key_path")})
        if (self.cert_path is None) != (self.key_path is None):
            raise OptionError("cert_path" if self.cert_path is None else "key_path",
                              "a client certificate needs both cert_path and key_path")
        if self.key_password is not None and not isinstance(self.key_password, str):
            raise OptionError("key_password", "must be a string or None, not " + type(self.key_password).__name__)
        for name in ("verify_hostname", "test_mode"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(name, "must be a bool", getattr(self, name))

    def __repr__(self) -> str:
        return masked_repr(self)

    __str__ = __repr__

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> TlsConfig | None:
        """From RocketMQ's names (``tls.enable`` and :data:`TLS_PROPERTIES`); None when ``tls.enable`` is
        false or absent and no other TLS property is set. An unknown ``tls.*`` name is an OptionError."""
        tls_keys = {k: v for k, v in props.items() if k.lower().startswith("tls.")}
        known = {k.lower(): k for k in (*TLS_PROPERTIES, "tls.enable")}
        fields: dict[str, Any] = {}
        enable: bool | None = None
        for key, value in tls_keys.items():
            canon = known.get(key.lower())
            if canon is None:
                raise OptionError(key, f"is not a TLS setting; valid: {', '.join(known.values())}", value)
            if canon == "tls.enable":
                enable = _flag(canon, value)
            elif canon == "tls.test.mode.enable":
                fields["test_mode"] = _flag(canon, value)
            else:
                fields[TLS_PROPERTIES[canon]] = value
        if enable is False or (enable is None and not fields):
            return None
        return cls(**fields)

    def ssl_context(self) -> ssl.SSLContext:
        """A client-side context for these settings (TLS 1.2 or newer)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.test_mode:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            if self.trust_cert_path is not None:
                ctx.load_verify_locations(cafile=self.trust_cert_path)
            else:
                ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
            ctx.check_hostname = self.verify_hostname
        if self.cert_path is not None:
            # without a password an encrypted key fails here: OpenSSL's default would ask on the terminal
            ctx.load_cert_chain(self.cert_path, self.key_path,
                                password=self.key_password if self.key_password is not None else _no_password)
        return ctx


def _no_password() -> bytes:
    return b""


def tls_config(value: TlsConfig | bool | None, field: str = "tls") -> TlsConfig | None:
    """A client's ``tls=`` keyword: None/False (plain TCP), True (:class:`TlsConfig` defaults) or a TlsConfig."""
    if value is None or value is False:
        return None
    if value is True:
        return TlsConfig()
    if isinstance(value, TlsConfig):
        return value
    raise OptionError(field, "must be True, False, None or a rocketstream.client.TlsConfig, not "
                      + type(value).__name__)
