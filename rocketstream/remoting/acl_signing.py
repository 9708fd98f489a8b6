"""ACL 1.0 request signatures (the ``rocketmq-acl`` client hook), shared by the client that signs and the
broker that checks.

``AclClientRPCHook.doBeforeRequest`` (4.9.8), run by ``NettyRemotingClient`` before every request it sends
(``invokeSync``, ``invokeAsync``, ``invokeOneway``; to brokers and name servers alike), does this:

1. a ``TreeMap`` (``SortedMap``) of ``AccessKey``, ``SecurityToken`` when the credentials have one, and every
   non-null custom-header field (by name, ``String.valueOf``: what ``makeCustomHeaderToNet`` sends as
   extFields);
2. ``AclUtils.combineRequestContent``: the map's values (not its keys) in key order, ``Signature`` left
   out, concatenated, as UTF-8, then the body bytes;
3. ``AclUtils.calSignature`` / ``AclSigner.calSignature``: Base64(HmacSHA1(key = the secret key as UTF-8,
   that content));
4. adds ``Signature``, ``AccessKey`` (and ``SecurityToken``) to the extFields.

Key order is Java's ``String.compareTo``: UTF-16 code units, which differs from Python's code-point order
only for characters outside the BMP. Java's UTF-8 encoder writes an unpaired surrogate as ``?``.

The broker (``PlainAccessValidator.parse``) recomputes the content over the extFields it received minus
``Signature`` (and minus ``_UNIQUE_KEY_QUERY``: see ``rocketstream.broker.acl``), so what counts is that
the signed map equals the extFields as sent: :func:`sign_fields` signs the fields themselves.

Pure functions (hashlib, hmac, base64): no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping

__all__ = ["ACCESS_KEY", "SIGNATURE", "SECURITY_TOKEN", "java_sorted", "java_utf8", "signing_content",
           "calc_signature", "sign_fields"]

# SessionCredentials
ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"


def _utf16_key(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def java_sorted(keys: Iterable[str]) -> list[str]:
    """Keys in Java ``String.compareTo`` order (UTF-16 code units; differs from Python's code-point order
    only around characters outside the BMP, so keys without any sort as Python sorts them: every request
    is signed, and header names are ASCII)."""
    keys = list(keys)
    joined = "".join(keys)
    if joined.isascii() or max(joined, default="") < "\U00010000":
        return sorted(keys)
    return sorted(keys, key=_utf16_key)


def java_utf8(s: str) -> bytes:
    """``String.getBytes(UTF_8)``: an unpaired surrogate becomes '?'."""
    return s.encode("utf-8", "replace")


def signing_content(fields: Mapping[str, str], body: bytes | None,
                    exclude: Iterable[str] = (SIGNATURE,)) -> bytes:
    """``AclUtils.combineRequestContent``: the values of ``fields`` sorted by key (``exclude`` left out),
    concatenated, as UTF-8, then the body."""
    skip = set(exclude)
    text = "".join(fields[k] for k in java_sorted(fields) if k not in skip and fields[k] is not None)
    return java_utf8(text) + (body or b"")


def calc_signature(content: bytes, secret_key: str) -> str:
    """``AclSigner.calSignature``: Base64(HmacSHA1(UTF-8 secret key, content))."""
    return base64.b64encode(hmac.digest(java_utf8(secret_key), content, hashlib.sha1)).decode("ascii")


def sign_fields(fields: dict[str, str], body: bytes | None, access_key: str, secret_key: str,
                security_token: str | None = None) -> dict[str, str]:
    """What ``AclClientRPCHook.doBeforeRequest`` does to a request's extFields (in place, returned):
    add AccessKey (and SecurityToken), then Signature over all of them and the body."""
    fields[ACCESS_KEY] = access_key
    if security_token is not None:
        fields[SECURITY_TOKEN] = security_token
    fields[SIGNATURE] = calc_signature(signing_content(fields, body), secret_key)
    return fields
