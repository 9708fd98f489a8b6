"""The secured-cluster options of the ``rocketmq`` source and sink, with RocketMQ's own names:

* ``accessKey``, ``secretKey``, ``securityToken``: an ACL 1.0 account (:class:`~rocketstream.client.Credentials`,
  what a Java client passes as ``AclClientRPCHook(new SessionCredentials(ak, sk[, token]))``);
* ``tls.enable``, ``tls.client.trustCertPath``, ``tls.client.certPath``, ``tls.client.keyPath``,
  ``tls.client.keyPassword``, ``tls.test.mode.enable`` (``TlsSystemConfig``'s names, read by
  :meth:`~rocketstream.client.TlsConfig.from_properties`);
* ``namespace``: topics and the consumer group are ``namespace%name`` on the wire (``NamespaceUtil``); rows
  and offsets keep the user's names.

They apply to network mode only (a store directory has no account). Secrets never leave this object as
text: :class:`SecuredOptions`'s repr shows the access key and whether TLS and a namespace are set, never
the secret key, the token or the key password; the objects it holds hide them the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rocketstream.client.credentials import Credentials
from rocketstream.client.namespace import check_namespace
from rocketstream.client.namespace import unwrap as _unwrap
from rocketstream.client.namespace import wrap as _wrap
from rocketstream.client.tls import TLS_PROPERTIES, TlsConfig
from rocketstream.errors import OptionError

ACCESS_KEY = "accessKey"
SECRET_KEY = "secretKey"
SECURITY_TOKEN = "securityToken"
NAMESPACE = "namespace"
TLS_ENABLE = "tls.enable"
TLS_OPTIONS: tuple[str, ...] = (TLS_ENABLE, *TLS_PROPERTIES)
SECURED_OPTIONS: tuple[str, ...] = (ACCESS_KEY, SECRET_KEY, SECURITY_TOKEN, NAMESPACE, *TLS_OPTIONS)
# options whose values are secrets: never shown, not even in an OptionError about them
SECRET_OPTIONS = (SECRET_KEY, SECURITY_TOKEN, "tls.client.keyPassword")
_CANONICAL = {k.lower(): k for k in SECURED_OPTIONS}
_TLS_FIELD_OPTION = {f: prop for prop, f in TLS_PROPERTIES.items()}


@dataclass(frozen=True)
class SecuredOptions:
    """How a query's clients reach a secured cluster; picklable (executors sign their own pulls and sends)."""

    credentials: Credentials | None = None
    tls: TlsConfig | None = None
    namespace: str | None = None

    def wrap(self, resource: str) -> str:
        """``resource`` (a topic or group) as the broker knows it (``NamespaceUtil.wrapNamespace``)."""
        return _wrap(self.namespace, resource)

    def unwrap(self, resource: str) -> str:
        """A broker's name of a resource as the user wrote it (``NamespaceUtil.withoutNamespace``)."""
        return _unwrap(self.namespace, resource)

    def __repr__(self) -> str:
        return f"SecuredOptions(credentials={self.credentials!r}, tls={self.tls!r}, namespace={self.namespace!r})"

    __str__ = __repr__


NOT_SECURED = SecuredOptions()


def is_secured_option(key: str) -> bool:
    return str(key).lower() in _CANONICAL


def parse_secured(options: Mapping[str, str], *, network: bool) -> SecuredOptions:
    """The secured-cluster options among ``options`` (keys in any case; other keys are ignored here).
    Each is an :class:`OptionError` naming it when wrong; a secret's value is never part of the error."""
    given: dict[str, str] = {}
    for key, value in options.items():
        canon = _CANONICAL.get(str(key).lower())
        if canon is not None:
            given[canon] = "" if value is None else str(value)
    if not given:
        return NOT_SECURED
    if not network:
        raise OptionError(next(iter(given)), "applies to network mode only (option 'nameServer'): a store "
                                             "directory is read without an account or a connection")
    credentials = None
    if ACCESS_KEY in given or SECRET_KEY in given or SECURITY_TOKEN in given:
        ak, sk = given.get(ACCESS_KEY, "").strip(), given.get(SECRET_KEY, "")
        if not ak:
            raise OptionError(ACCESS_KEY, f"is required with '{SECRET_KEY}' / '{SECURITY_TOKEN}' (the ACL account)")
        if not sk:
            raise OptionError(SECRET_KEY, f"is required with '{ACCESS_KEY}' (the account's secret key)")
        token = given.get(SECURITY_TOKEN)
        if token is not None and not token:
            raise OptionError(SECURITY_TOKEN, "is empty; leave it out when the account has no token")
        credentials = Credentials(ak, sk, token)
    try:
        tls = TlsConfig.from_properties({k: v for k, v in given.items() if k in TLS_OPTIONS})
    except OptionError as exc:   # name the option as the user wrote it (tls.client.trustCertPath, not the field)
        prop = _TLS_FIELD_OPTION.get(exc.option, exc.option)
        shown = None if prop in SECRET_OPTIONS else exc.value
        raise OptionError(prop, str(exc).split(": ", 1)[-1].removesuffix(f" (got {exc.value!r})"), shown) from None
    namespace = check_namespace(given.get(NAMESPACE), NAMESPACE) if NAMESPACE in given else None
    if NAMESPACE in given and namespace is None:
        raise OptionError(NAMESPACE, "is empty; leave it out for no namespace")
    return SecuredOptions(credentials, tls, namespace)


__all__ = ["ACCESS_KEY", "NAMESPACE", "NOT_SECURED", "SECRET_KEY", "SECRET_OPTIONS", "SECURED_OPTIONS",
           "SECURITY_TOKEN", "SecuredOptions", "TLS_OPTIONS", "is_secured_option", "parse_secured"]
