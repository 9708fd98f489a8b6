"""``Credentials``: the ACL 1.0 account a client signs its requests with (``SessionCredentials`` of
``rocketmq-acl``; the signing itself is :mod:`rocketstream.remoting.acl_signing`).

``Credentials(access_key, secret_key, security_token=None)`` is what a Java client passes as
``new AclClientRPCHook(new SessionCredentials(ak, sk[, token]))``. Give it as ``credentials=`` to a producer
or consumer (or :class:`~rocketstream.client.api.MQClientAPI`): every request it sends then carries
``AccessKey``, ``Signature`` (and ``SecurityToken``) extFields.

Secrets stay out of text: ``repr``/``str`` show the access key (a broker names it in its own refusals:
"Check signature failed for accessKey=...") and never the secret key or the token.

Pickling is deliberate and carries the secret: Spark ships a reader, with the credentials it was given,
to its executors, which must sign their own requests. A pickle of ``Credentials`` is therefore as secret as
the key itself (Spark's own shipping of the options that hold the key is the same); ``__reduce__`` makes it
explicit and rebuilds through the constructor, so a pickle is checked as a new object would be.
"""

from __future__ import annotations

from typing import Any

from rocketstream.errors import OptionError

__all__ = ["Credentials"]


class Credentials:
    """An ACL account: ``access_key``, ``secret_key`` and an optional ``security_token`` (non-empty
    strings). Immutable; equal when all three are equal."""

    __slots__ = ("access_key", "secret_key", "security_token")

    access_key: str
    secret_key: str
    security_token: str | None

    def __init__(self, access_key: str, secret_key: str, security_token: str | None = None) -> None:
        if not isinstance(access_key, str) or not access_key:
            raise OptionError("access_key", "must be a non-empty string", access_key)
        # the secret's and the token's values are never shown: only what is wrong with them
        if not isinstance(secret_key, str) or not secret_key:
            raise OptionError("secret_key", "must be a non-empty string, not "
                                            + (type(secret_key).__name__ if secret_key else repr(secret_key)))
        if security_token is not None and (not isinstance(security_token, str) or not security_token):
            raise OptionError("security_token", "must be None or a non-empty string, not "
                                                + (type(security_token).__name__ if security_token
                                                   else repr(security_token)))
        object.__setattr__(self, "access_key", access_key)
        object.__setattr__(self, "secret_key", secret_key)
        object.__setattr__(self, "security_token", security_token)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Credentials are immutable: cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Credentials are immutable: cannot delete {name}")

    def __repr__(self) -> str:
        token = "" if self.security_token is None else ", security_token=<hidden>"
        return f"Credentials(access_key={self.access_key!r}, secret_key=<hidden>{token})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Credentials):
            return NotImplemented
        return (self.access_key, self.secret_key, self.security_token) == (
            other.access_key, other.secret_key, other.security_token)

    def __hash__(self) -> int:
        return hash((Credentials, self.access_key, self.secret_key, self.security_token))

    def __reduce__(self) -> tuple[type[Credentials], tuple[str, str, str | None]]:
        return Credentials, (self.access_key, self.secret_key, self.security_token)
