"""The broker's plain ACL, as RocketMQ 4.9.8 applies it (``aclEnable=true``; off by default).

What a 4.9.8 broker does with ``aclEnable=true`` (``BrokerController.initialAcl``): a server RPC hook runs
``PlainAccessValidator.parse`` and ``PlainPermissionManager.validate`` before every request; an
``AclException`` thrown there becomes, in ``NettyRemotingAbstract.processRequestCommand``, a
``SYSTEM_ERROR`` (1) response whose remark is ``RemotingHelper.exceptionSimpleDesc(e)``: the exception's
``toString()``, ", ", and its first stack frame. Measured against the real 4.9.8 broker (wrong secret)::

    code 1, remark "org.apache.rocketmq.acl.common.AclException: Check signature failed for
    accessKey=RocketMQ, org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:684)"

:class:`AclHook` answers with exactly these codes and remarks (the line numbers are those of the 4.9.8
sources the distribution in ``../shared/rocketmq-4.9.8`` was built from). A oneway request that is
refused gets no answer from Java; the hook still returns the response and the caller must drop it for a
oneway request (and must not dispatch it).

**Signature** (``AclClientRPCHook.doBeforeRequest``, ``AclUtils.combineRequestContent``,
``AclSigner.calSignature``): the client adds ``AccessKey`` (and ``SecurityToken`` when it has one) to
the request's extFields, sorts *all* extFields by key (``TreeMap``: Java ``String.compareTo``, i.e.
UTF-16 code units), concatenates the values (not the keys), encodes that as UTF-8, appends the body bytes,
and sends ``Signature`` = Base64(HmacSHA1(UTF-8 secret key, content)). The broker
(``PlainAccessValidator.parse``) recomputes it over the extFields it received minus ``Signature`` and
minus ``_UNIQUE_KEY_QUERY`` (``MixAll.UNIQUE_MSG_QUERY_FLAG``; the client does sign that one, so a 4.9.8
client's query by unique key fails the check on a 4.9.8 broker, and here too).

**Resources per request code, as 4.9.8** (``PlainAccessValidator.parse``): SEND_MESSAGE 10 ``topic`` PUB, or
for a ``%RETRY%`` topic the retry topic of ``group`` SUB (the V1 header has no ``group``: nothing is
checked); SEND_MESSAGE_V2 310 the same with ``b``/``a``; CONSUMER_SEND_MSG_BACK 36 ``%RETRY%group`` SUB;
PULL_MESSAGE 11 ``topic`` SUB and ``%RETRY%consumerGroup`` SUB; QUERY_MESSAGE 12 ``topic`` SUB;
HEART_BEAT 34 every consumer's ``%RETRY%groupName`` and subscribed topic SUB (from the JSON body);
UNREGISTER_CLIENT 35, GET_CONSUMER_LIST_BY_GROUP 38 ``%RETRY%consumerGroup`` SUB;
UPDATE_CONSUMER_OFFSET 15 ``%RETRY%consumerGroup`` and ``topic`` SUB. Every other code needs only a valid
signature in 4.9.8, except the admin codes 17, 25, 215, 200, 207 (``Permission.ADMIN_CODE``), which also
need an ``admin: true`` account.

**Beyond 4.9.8** (4.9.8 lets any signed account through these): every code the broker serves that names a
topic or group checks it (:data:`EXTRA_RESOURCES`): the lite pull 361 as the pull 11; the batch send 320
as 310; a send to a ``%RETRY%`` topic also checks that topic itself (as a group: 4.9.8 checks only the
group the header names, so a V1 send, or a V2 send naming another group, wrote into any group's retry
topic); offsets, queue bounds, search by time, locks (41/42: the body's group and every queue's topic),
the client-config check 46, topic and consume statistics, the offset reset and status codes 222/223,
the consumer running info 307 and QUERY_CONSUME_QUEUE 321 check their ``topic`` SUB and group SUB.
VIEW_MESSAGE_BY_ID 33 and CONSUMER_SEND_MSG_BACK 36 name a commit-log offset, not a topic: the message's
own topic is known only after the lookup, so their processors call :func:`refuse_unless` with it (SUB)
before they return or copy the record. END_TRANSACTION 37 (unchecked by 4.9.8) needs PUB on the topic the
half message it ends was sent to (its REAL_TOPIC), checked the same way before anything is committed.
Broker-wide codes (every topic's or group's configuration or
offsets, the broker's config and runtime figures, producer connections, a message pushed to a consumer)
need an admin account (:data:`BROKER_ADMIN_CODES`). A refusal looks as 4.9.8's: SYSTEM_ERROR and the
``AclException`` remark, whichever check made it.

**Decision** (``PlainPermissionManager.validate``/``checkPerm``): a client address matching
``globalWhiteRemoteAddresses`` passes; else the request needs an ``AccessKey`` that is configured; an
address matching the account's ``whiteRemoteAddress`` passes without signature; else the signature must
match; a PUB to ``RMQ_SYS_TRACE_TOPIC`` passes; admin codes need ``admin``; each resource is checked
against the account's ``topicPerms``/``groupPerms`` (groups as ``%RETRY%<group>``), or else its
``defaultTopicPerm``/``defaultGroupPerm`` (absent: DENY), in Java ``HashMap`` iteration order (that order
decides which refusal the remark names when several resources are refused).

**Where the file is** (RocketMQ reads ``${ROCKETMQ_HOME}/conf/plain_acl.yml``, or the path in the system
property ``rocketmq.acl.plain.file`` relative to ``ROCKETMQ_HOME``). Our broker has no ROCKETMQ_HOME; its
home is its store root, so:

1. ``aclPlainFile`` in broker.conf (``BrokerConfig.acl_plain_file``) when set; a relative path is relative
   to the store root (``storePathRootDir``);
2. else ``<storePathRootDir>/conf/plain_acl.yml``.

A missing or unloadable file at start raises :class:`AclConfigError` (Java creates an empty file and
refuses every request). The file is checked for changes (mtime, size, inode) at most every
``watch_interval_s`` (5 s, ``AclFileWatchService.WATCH_INTERVAL``) when requests arrive, and reloaded; a
changed file that does not load is logged and the previous rules stay in force (as in Java). The
multi-file ``conf/acl/`` directory of 4.9.8 is not read.

Stricter than Java at load time (Java silently accepts these): an unknown permission string (Java: DENY),
an access key defined twice (Java: the first wins), an IP pattern Java would accept but never match.
IPv6 range patterns are supported only with every segment before the range written out (no ``::``).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml  # type: ignore[import-untyped]  # PyYAML ships no type information

from rocketstream import codec
from rocketstream.errors import AclConfigError, BodyError, CorruptStoreError, RocketStreamError
from rocketstream.remoting import json_body
from rocketstream.remoting.acl_signing import (  # the signature recipe, shared with the client
    ACCESS_KEY,
    SECURITY_TOKEN,
    SIGNATURE,
    calc_signature,
    java_sorted,
    sign_fields,
    signing_content,
)
from rocketstream.remoting.codes import RequestCode, ResponseCode
from rocketstream.remoting.command import RemotingCommand

__all__ = [
    "ACL_FILE_NAME", "Perm", "ADMIN_CODES", "AclAccount", "AclRules", "AccessDenied", "AccessRequest",
    "PlainPermissionManager", "AclHook", "register", "load_acl_file", "resolve_acl_file", "parse_request",
    "signing_content", "calc_signature", "sign_fields", "java_sorted", "BROKER_ADMIN_CODES", "JAVA_RESOURCE_CODES",
    "EXTRA_RESOURCES", "DEFERRED_CODES", "refuse_unless", "record_topic",
]

log = logging.getLogger("rocketstream.broker.acl")

ACL_FILE_NAME = "plain_acl.yml"

# MixAll / TopicValidator names (SessionCredentials' are in rocketstream.remoting.acl_signing)
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
RETRY_PREFIX = "%RETRY%"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
MIN_KEY_LENGTH = 6          # AclConstants.ACCESS_KEY_MIN_LENGTH / SECRET_KEY_MIN_LENGTH ("longer than 6")
WATCH_INTERVAL_S = 5.0      # AclFileWatchService.WATCH_INTERVAL


class Perm:
    """``Permission``: bit flags of a resource permission."""
    DENY = 1
    ANY = 1 << 1
    PUB = 1 << 2
    SUB = 1 << 3

    NAMES = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}

    @staticmethod
    def check(needed: int, owned: int) -> bool:
        """``Permission.checkPermission``."""
        if owned & Perm.DENY:
            return False
        if needed & Perm.ANY:
            return bool(owned & (Perm.PUB | Perm.SUB))
        return bool(needed & owned)


# Permission.ADMIN_CODE
ADMIN_CODES = frozenset({RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.UPDATE_BROKER_CONFIG,
                         RequestCode.DELETE_TOPIC_IN_BROKER, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                         RequestCode.DELETE_SUBSCRIPTIONGROUP})

# ours: Permission.ADMIN_CODE plus the broker-wide codes (module docstring)
BROKER_ADMIN_CODES = ADMIN_CODES | frozenset({
    RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_BROKER_CONFIG, RequestCode.GET_BROKER_RUNTIME_INFO,
    RequestCode.GET_ALL_CONSUMER_OFFSET, RequestCode.GET_ALL_DELAY_OFFSET, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
    RequestCode.GET_PRODUCER_CONNECTION_LIST, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER,
    RequestCode.CONSUME_MESSAGE_DIRECTLY, RequestCode.GET_BROKER_CONSUME_STATS})

LITE_PULL_MESSAGE = RequestCode.LITE_PULL_MESSAGE   # 5.x lite-pull consumers; pull.py serves it as 11

# the first stack frame of each AclException a 4.9.8 broker throws (RemotingHelper.exceptionSimpleDesc)
_EXC = "org.apache.rocketmq.acl.common.AclException"
_PPM = "org.apache.rocketmq.acl.plain.PlainPermissionManager"
FRAME_NO_ACCESS_KEY = f"{_PPM}.validate(PlainPermissionManager.java:664)"
FRAME_UNKNOWN_ACCESS_KEY = f"{_PPM}.validate(PlainPermissionManager.java:668)"
FRAME_SIGNATURE = f"{_PPM}.validate(PlainPermissionManager.java:684)"
FRAME_ADMIN = f"{_PPM}.checkPerm(PlainPermissionManager.java:581)"
FRAME_DEFAULT_PERM = f"{_PPM}.checkPerm(PlainPermissionManager.java:606)"
FRAME_RESOURCE_PERM = f"{_PPM}.checkPerm(PlainPermissionManager.java:611)"
FRAME_PARSE = "org.apache.rocketmq.acl.plain.PlainAccessValidator.parse(PlainAccessValidator.java:134)"


class AccessDenied(RocketStreamError):
    """A request the ACL refuses. ``message`` is the ``AclException`` message (None: none, as for a
    wrapped NullPointerException without one), ``frame`` the Java frame that threw it; ``remark`` is what
    a 4.9.8 broker writes in its SYSTEM_ERROR response."""

    def __init__(self, message: str | None, frame: str) -> None:
        self.message = message
        self.frame = frame
        text = _EXC if message is None else f"{_EXC}: {message}"
        self.remark = f"{text}, {frame}"
        super().__init__(self.remark)


# ------------------------------------------------------------------------------------------ addresses
def _split(s: str, sep: str) -> list[str]:
    """commons-lang ``StringUtils.split(s, sep)`` for a one-character separator: empty tokens dropped."""
    return [t for t in s.split(sep) if t]


def _ipv4(s: str) -> bool:
    try:
        ipaddress.IPv4Address(s)
    except ValueError:
        return False
    return True


def _ipv6(s: str) -> ipaddress.IPv6Address | None:
    try:
        return ipaddress.IPv6Address(s)
    except ValueError:
        return None


class AddressRule:
    """``RemoteAddressStrategy``: does a client IP match a white-list entry."""

    text: str = ""

    def match(self, ip: str | None) -> bool:
        raise NotImplementedError


class _Never(AddressRule):        # BlankRemoteAddressStrategy: no entry
    def match(self, ip: str | None) -> bool:
        return False


class _Always(AddressRule):       # NullRemoteAddressStrategy: "*", "*.*.*.*", "*:*:*:*:*:*:*:*"
    def match(self, ip: str | None) -> bool:
        return True


class _OneOf(AddressRule):        # OneRemoteAddressStrategy / MultipleRemoteAddressStrategy
    def __init__(self, addresses: list[str], where: Callable[[str], AclConfigError]) -> None:
        self.v4: set[str] = set()
        self.v6: set[ipaddress.IPv6Address] = set()
        for a in addresses:
            if _ipv4(a):
                self.v4.add(a)
            elif (v6 := _ipv6(a)) is not None:
                self.v6.add(v6)
            else:
                raise where(f"not an IPv4 or IPv6 address: {a!r}")

    def match(self, ip: str | None) -> bool:
        if ip is None:
            return False
        if ip in self.v4:
            return True
        v6 = _ipv6(ip)
        return v6 is not None and v6 in self.v6


class _Range4(AddressRule):       # RangeRemoteAddressStrategy, IPv4: a.b.c.*, a.b.*.*, a.b.c.x-y, a.x-y.*.* ...
    def __init__(self, pattern: str, where: Callable[[str], AclConfigError]) -> None:
        parts = _split(pattern, ".")
        if len(parts) != 4:
            raise where(f"IPv4 pattern {pattern!r} does not have 4 parts")
        for idx in (1, 2, 3):
            value = parts[idx].strip()
            if value == "*":
                self.start, self.end = 0, 255
            elif "-" in value:
                bounds = _split(value, "-")
                if value.startswith("-") or len(bounds) != 2 or not all(b.isdigit() for b in bounds):
                    raise where(f"bad range {value!r} in {pattern!r}")
                self.start, self.end = int(bounds[0]), int(bounds[1])
                if not (0 <= self.start <= self.end <= 255) or self.end == 0:
                    raise where(f"bad range {value!r} in {pattern!r}")
            else:
                continue
            self.index = idx
            break
        else:
            raise where(f"IPv4 pattern {pattern!r} has no '*' or 'a-b' part after the first")
        head = [p.strip() for p in parts[:self.index]]
        if not all(p.isdigit() and int(p) <= 255 for p in head):
            raise where(f"IPv4 pattern {pattern!r}: {'.'.join(head)} is not an address prefix")
        self.head = ".".join(head) + "."

    def match(self, ip: str | None) -> bool:
        if ip is None or not _ipv4(ip) or not ip.startswith(self.head):
            return False
        last = ip.rfind(".")
        if self.index == 3:
            value = ip[len(self.head):]
        elif self.index == 2:
            value = ip[len(self.head):last]
        else:
            value = ip[len(self.head):ip.rfind(".", 0, last)]
        return value.isdigit() and self.start <= int(value) <= self.end


class _Range6(AddressRule):       # RangeRemoteAddressStrategy, IPv6 with the prefix written out
    def __init__(self, pattern: str, where: Callable[[str], AclConfigError]) -> None:
        segs = pattern.split(":")
        for i, seg in enumerate(segs):
            seg = seg.strip()
            if seg == "*" or "-" in seg:
                self.index = i
                break
        else:
            raise where(f"IPv6 pattern {pattern!r} has no '*' or 'a-b' segment")
        if self.index == 0 or len(segs) > 8 or any(s.strip() != "*" for s in segs[self.index + 1:]):
            raise where(f"IPv6 pattern {pattern!r}: only 'h:h:...:range[:*...]' with the prefix written out "
                        "is supported")
        try:
            self.head = [int(s, 16) for s in segs[:self.index]]
            if any(not (0 <= h <= 0xFFFF) or len(s) > 4 for h, s in zip(self.head, segs[:self.index], strict=True)):
                raise ValueError(pattern)
            seg = segs[self.index].strip()
            if seg == "*":
                self.start, self.end = 0, 0xFFFF
            else:
                bounds = _split(seg, "-")
                if seg.startswith("-") or len(bounds) != 2:
                    raise ValueError(seg)
                self.start, self.end = int(bounds[0], 16), int(bounds[1], 16)
                if not (0 <= self.start <= self.end <= 0xFFFF):
                    raise ValueError(seg)
        except ValueError:
            raise where(f"bad IPv6 pattern {pattern!r}") from None

    def match(self, ip: str | None) -> bool:
        v6 = _ipv6(ip) if ip is not None else None
        if v6 is None:
            return False
        words = [int(w, 16) for w in v6.exploded.split(":")]
        return words[:self.index] == self.head and self.start <= words[self.index] <= self.end


def address_rule(text: str | None, where: Callable[[str], AclConfigError]) -> AddressRule:
    """``RemoteAddressStrategyFactory.getRemoteAddressStrategy``."""
    rule: AddressRule
    if text is None or not text.strip():
        rule = _Never()
    elif text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        rule = _Always()
    elif text.endswith("}"):
        # "192.168.1.{1,2,3}" / "1:2:3:4:5:6:7:{8,9}"
        sep = ":" if ":" in text else "."
        parts = _split(text, sep)
        if (sep == "." and len(parts) < 4) or not parts[-1].startswith("{"):
            raise where(f"bad address list {text!r}")
        prefix = text[:text.index("{")]
        rule = _OneOf([prefix + p for p in _split(parts[-1][1:-1], ",")], where)
    elif "," in text:
        rule = _OneOf(_split(text, ","), where)
    elif "*" in text or "-" in text:
        rule = _Range6(text, where) if ":" in text else _Range4(text, where)
    else:
        rule = _OneOf([text], where)
    rule.text = text or ""
    return rule


# ------------------------------------------------------------------------------------------ the file
@dataclass(frozen=True)
class AclAccount:
    """One ``accounts`` entry (``PlainAccessConfig`` -> ``PlainAccessResource``)."""
    access_key: str
    secret_key: str = field(repr=False)
    white: AddressRule
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    resource_perms: Mapping[str, int]    # topic -> perm; a group as %RETRY%<group> -> perm


@dataclass(frozen=True)
class AclRules:
    """A loaded ``plain_acl.yml``."""
    path: Path
    global_white: tuple[AddressRule, ...]
    accounts: Mapping[str, AclAccount]


def _perm(value: object, where: Callable[[str], AclConfigError]) -> int:
    """``Permission.parsePermFromString`` (absent -> DENY), but an unknown string is an error."""
    if value is None:
        return Perm.DENY
    if not isinstance(value, str) or value.strip() not in Perm.NAMES:
        raise where(f"permission must be one of {', '.join(Perm.NAMES)}, got {value!r}")
    return Perm.NAMES[value.strip()]


def _key_text(value: object) -> str | None:
    """fastjson's String conversion of a YAML scalar (``secretKey: 12345678`` is an int in YAML)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _bool(value: object, where: Callable[[str], AclConfigError]) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise where(f"must be true or false, got {value!r}")


def _string_list(value: object, where: Callable[[str], AclConfigError]) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise where(f"must be a list, got {type(value).__name__}")
    out = []
    for item in value:
        text = _key_text(item)
        if text is None:
            raise where(f"entries must be strings, got {item!r}")
        out.append(text)
    return out


def _account(doc: object, path: Path, name: str, seen: set[str]) -> AclAccount:
    def err(field_name: str) -> Callable[[str], AclConfigError]:
        return lambda msg: AclConfigError(msg, path=path, field=f"{name}.{field_name}" if field_name else name)

    if not isinstance(doc, dict):
        raise err("")(f"an account must be a mapping, got {type(doc).__name__}")
    keys: dict[str, str] = {}
    for fname in ("accessKey", "secretKey"):
        raw = doc.get(fname)
        text = _key_text(raw)
        if raw is None:
            raise err(fname)("is missing")
        if text is None:   # a secret's value stays out of the message, whatever its type
            shown = type(raw).__name__ if fname == "secretKey" else repr(raw)
            raise err(fname)(f"must be a string, got {shown}")
        if len(text) <= MIN_KEY_LENGTH:   # PlainPermissionManager.checkPlainAccessConfig
            raise err(fname)(f"must be longer than {MIN_KEY_LENGTH} characters")
        keys[fname] = text
    if keys["accessKey"] in seen:
        raise err("accessKey")(f"access key {keys['accessKey']!r} is defined twice")
    seen.add(keys["accessKey"])
    white = doc.get("whiteRemoteAddress")
    if white is not None and not isinstance(white, str):
        raise err("whiteRemoteAddress")(f"must be a string, got {white!r}")
    perms: dict[str, int] = {}
    # Permission.parseResourcePerms: groups first (as %RETRY%<group>), then topics
    for fname, is_topic in (("groupPerms", False), ("topicPerms", True)):
        for i, entry in enumerate(_string_list(doc.get(fname), err(fname))):
            items = _split(entry, "=")
            if len(items) != 2 or not items[0].strip():
                raise err(f"{fname}[{i}]")(f"expected 'name=PERM' (e.g. topicA=PUB|SUB), got {entry!r}")
            res = items[0].strip()
            perms[res if is_topic else RETRY_PREFIX + res] = _perm(items[1], err(f"{fname}[{i}]"))
    return AclAccount(
        access_key=keys["accessKey"], secret_key=keys["secretKey"],
        white=address_rule(white, err("whiteRemoteAddress")),
        admin=_bool(doc.get("admin"), err("admin")),
        default_topic_perm=_perm(doc.get("defaultTopicPerm"), err("defaultTopicPerm")),
        default_group_perm=_perm(doc.get("defaultGroupPerm"), err("defaultGroupPerm")),
        resource_perms=perms)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What is wrong and where (line, column), without the quoted text of the file."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or type(exc).__name__
        return f"{problem}{where}"
    return type(exc).__name__


def load_acl_file(path: Path | str) -> AclRules:
    """Read and check a ``plain_acl.yml``; anything wrong raises AclConfigError naming the file/field."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise AclConfigError("ACL file not found (aclEnable=true needs it; see rocketstream.broker.acl)",
                             path=path) from None
    except OSError as exc:
        raise AclConfigError(f"ACL file cannot be read: {exc}", path=path) from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # PyYAML's message quotes the line at fault, which may be a secretKey line: only the problem and
        # where it is, and not chained (a traceback would print the original message)
        raise AclConfigError(f"not valid YAML: {_yaml_problem(exc)}", path=path) from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise AclConfigError(f"the top level must be a mapping, got {type(doc).__name__}", path=path)

    def top(field_name: str) -> Callable[[str], AclConfigError]:
        return lambda msg: AclConfigError(msg, path=path, field=field_name)

    white = tuple(address_rule(a, top(f"globalWhiteRemoteAddresses[{i}]"))
                  for i, a in enumerate(_string_list(doc.get("globalWhiteRemoteAddresses"),
                                                     top("globalWhiteRemoteAddresses"))))
    accounts_doc = doc.get("accounts")
    if accounts_doc is None:
        accounts_doc = []
    if not isinstance(accounts_doc, list):
        raise top("accounts")(f"must be a list, got {type(accounts_doc).__name__}")
    seen: set[str] = set()
    accounts = [_account(a, path, f"accounts[{i}]", seen) for i, a in enumerate(accounts_doc)]
    return AclRules(path=path, global_white=white, accounts={a.access_key: a for a in accounts})


class _AclSettings(Protocol):
    store_path_root_dir: Any
    acl_plain_file: str | None


def resolve_acl_file(config: _AclSettings) -> Path:
    """Where the broker reads its ACL file (see the module docstring)."""
    root = Path(config.store_path_root_dir)
    explicit = config.acl_plain_file
    if explicit:
        p = Path(os.path.expanduser(str(explicit)))
        return p if p.is_absolute() else root / p
    return root / "conf" / ACL_FILE_NAME


# ------------------------------------------------------------------------------------------ requests
def _java_hash(s: str) -> int:
    """``String.hashCode`` (over UTF-16 code units), as an unsigned 32-bit value."""
    h = 0
    units = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


def java_hashmap_order(keys: list[str]) -> list[str]:
    """The iteration order of a ``java.util.HashMap<String, ?>`` filled with ``keys`` in this order
    (default capacity 16, load factor 0.75; bins kept in insertion order; treeified bins not modelled)."""
    cap = 16
    while len(keys) > cap * 3 // 4:
        cap *= 2

    def bucket(k: str) -> int:
        h = _java_hash(k)
        return (h ^ (h >> 16)) & (cap - 1)

    return [k for _, _, k in sorted((bucket(k), i, k) for i, k in enumerate(keys))]


@dataclass
class AccessRequest:
    """``PlainAccessResource`` as ``PlainAccessValidator.parse`` builds it from a request."""
    code: int
    remote_ip: str | None
    access_key: str | None = None
    signature: str | None = None
    security_token: str | None = field(default=None, repr=False)
    resources: dict[str, int] = field(default_factory=dict)   # insertion order, as put into the HashMap
    content: bytes | None = field(default=None, repr=False)    # holds the SecurityToken's value

    def add(self, resource: str | None, perm: int) -> None:
        if resource is not None:
            self.resources[resource] = perm


def _retry(group: str | None) -> str | None:
    return None if group is None else RETRY_PREFIX + group


def _is_retry(topic: str | None) -> bool:
    return topic is not None and topic.startswith(RETRY_PREFIX)


def _heartbeat_resources(body: bytes | None, req: AccessRequest) -> None:
    """HEART_BEAT: ``HeartbeatData.decode(body)``; each consumer's retry topic and subscribed topics."""
    if body is None:   # new String(null, UTF_8) on Java 17
        raise AccessDenied('Cannot read the array length because "bytes" is null', FRAME_PARSE)
    text = body.decode("utf-8", "replace")
    if not text.strip() or text.strip() == "null":   # JSON.parseObject gives null, then getConsumerDataSet()
        raise AccessDenied('Cannot invoke "org.apache.rocketmq.common.protocol.heartbeat.HeartbeatData.'
                           'getConsumerDataSet()" because "heartbeatData" is null', FRAME_PARSE)
    try:
        doc = json_body.loads(text, what="heartbeat body")
    except BodyError as exc:
        raise AccessDenied(str(exc), FRAME_PARSE) from exc
    if not isinstance(doc, Mapping):
        raise AccessDenied(f"heartbeat body is a JSON {type(doc).__name__}, not an object", FRAME_PARSE)
    consumers = doc.get("consumerDataSet") or []
    if not isinstance(consumers, (list, tuple)):
        raise AccessDenied("heartbeat body: consumerDataSet is not an array", FRAME_PARSE)
    for c in consumers:
        if not isinstance(c, Mapping):
            raise AccessDenied("heartbeat body: a consumerDataSet entry is not an object", FRAME_PARSE)
        req.add(_retry(_scalar(c.get("groupName"))), Perm.SUB)
        subs = c.get("subscriptionDataSet") or []
        if not isinstance(subs, (list, tuple)):
            raise AccessDenied("heartbeat body: subscriptionDataSet is not an array", FRAME_PARSE)
        for s in subs:
            if not isinstance(s, Mapping):
                raise AccessDenied("heartbeat body: a subscriptionDataSet entry is not an object", FRAME_PARSE)
            req.add(_scalar(s.get("topic")), Perm.SUB)


def _scalar(v: object) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    raise AccessDenied(f"heartbeat body: expected a string, got {type(v).__name__}", FRAME_PARSE)


def _add_send(req: AccessRequest, topic: str | None, group: str | None) -> None:
    """SEND_MESSAGE / V2 as ``PlainAccessValidator.parse``: a ``%RETRY%`` topic checks the named group's
    retry topic, any other topic PUB."""
    if _is_retry(topic):
        req.add(_retry(group), Perm.SUB)
    else:
        req.add(topic, Perm.PUB)


def _add_retry_topic_itself(req: AccessRequest, topic: str | None) -> None:
    """Ours: a send to ``%RETRY%X`` writes into group X's retry topic whatever group the header names."""
    if _is_retry(topic):
        req.add(topic, Perm.SUB)


def _json_object(body: bytes | None, what: str) -> Mapping[str, Any]:
    """A request body the hook must read to know the resources; unreadable: refused (as heartbeats)."""
    try:
        doc = json_body.loads(body or b"", what=what)
    except BodyError as exc:
        raise AccessDenied(str(exc), FRAME_PARSE) from exc
    if not isinstance(doc, Mapping):
        raise AccessDenied(f"{what} is a JSON {type(doc).__name__}, not an object", FRAME_PARSE)
    return doc


def _body_str(value: object, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise AccessDenied(f"{what} is a JSON {type(value).__name__}, not a string", FRAME_PARSE)


def _lock_resources(ext: Mapping[str, str], body: bytes | None, req: AccessRequest) -> None:
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: ``LockBatchRequestBody`` {consumerGroup, clientId, mqSet}."""
    doc = _json_object(body, "LockBatchRequestBody")
    req.add(_retry(_body_str(doc.get("consumerGroup"), "LockBatchRequestBody.consumerGroup")), Perm.SUB)
    mqs = doc.get("mqSet") or []
    if not isinstance(mqs, (list, tuple)):
        raise AccessDenied("LockBatchRequestBody.mqSet is not an array", FRAME_PARSE)
    for mq in mqs:
        if not isinstance(mq, Mapping):
            raise AccessDenied("LockBatchRequestBody.mqSet holds a value that is not an object", FRAME_PARSE)
        req.add(_body_str(mq.get("topic"), "LockBatchRequestBody.mqSet[].topic"), Perm.SUB)


def _check_client_resources(ext: Mapping[str, str], body: bytes | None, req: AccessRequest) -> None:
    """CHECK_CLIENT_CONFIG: ``CheckClientRequestBody`` {clientId, group, subscriptionData{topic, ...}}."""
    doc = _json_object(body, "CheckClientRequestBody")
    req.add(_retry(_body_str(doc.get("group"), "CheckClientRequestBody.group")), Perm.SUB)
    sub = doc.get("subscriptionData")
    if sub is not None:
        if not isinstance(sub, Mapping):
            raise AccessDenied("CheckClientRequestBody.subscriptionData is not an object", FRAME_PARSE)
        req.add(_body_str(sub.get("topic"), "CheckClientRequestBody.subscriptionData.topic"), Perm.SUB)


def _header(topic: str | None = None, group: str | None = None
            ) -> Callable[[Mapping[str, str], bytes | None, AccessRequest], None]:
    """A code whose header names the topic (SUB) and/or the consumer group (its retry topic, SUB)."""
    def add(ext: Mapping[str, str], body: bytes | None, req: AccessRequest) -> None:
        if topic is not None:
            req.add(ext.get(topic), Perm.SUB)
        if group is not None:
            req.add(_retry(ext.get(group)), Perm.SUB)
    return add


def _lite_pull(ext: Mapping[str, str], body: bytes | None, req: AccessRequest) -> None:
    req.add(ext.get("topic"), Perm.SUB)
    req.add(_retry(ext.get("consumerGroup")), Perm.SUB)


def _batch_send(ext: Mapping[str, str], body: bytes | None, req: AccessRequest) -> None:
    _add_send(req, ext.get("b"), ext.get("a"))
    _add_retry_topic_itself(req, ext.get("b"))


# the codes 4.9.8's PlainAccessValidator.parse reads resources for
JAVA_RESOURCE_CODES = frozenset({
    RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.CONSUMER_SEND_MSG_BACK,
    RequestCode.PULL_MESSAGE, RequestCode.QUERY_MESSAGE, RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP, RequestCode.UPDATE_CONSUMER_OFFSET})

# ours: the resources of the codes 4.9.8 does not check (module docstring)
EXTRA_RESOURCES: Mapping[int, Callable[[Mapping[str, str], bytes | None, AccessRequest], None]] = {
    LITE_PULL_MESSAGE: _lite_pull,
    RequestCode.SEND_BATCH_MESSAGE: _batch_send,
    RequestCode.QUERY_CONSUMER_OFFSET: _header(topic="topic", group="consumerGroup"),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _header(topic="topic"),
    RequestCode.GET_MAX_OFFSET: _header(topic="topic"),
    RequestCode.GET_MIN_OFFSET: _header(topic="topic"),
    RequestCode.GET_EARLIEST_MSG_STORETIME: _header(topic="topic"),
    RequestCode.LOCK_BATCH_MQ: _lock_resources,
    RequestCode.UNLOCK_BATCH_MQ: _lock_resources,
    RequestCode.CHECK_CLIENT_CONFIG: _check_client_resources,
    RequestCode.GET_TOPIC_STATS_INFO: _header(topic="topic"),
    RequestCode.GET_CONSUMER_CONNECTION_LIST: _header(group="consumerGroup"),
    RequestCode.GET_CONSUME_STATS: _header(topic="topic", group="consumerGroup"),
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: _header(topic="topic", group="group"),
    RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: _header(topic="topic", group="group"),
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: _header(topic="topic"),
    RequestCode.GET_CONSUMER_RUNNING_INFO: _header(group="consumerGroup"),
    RequestCode.QUERY_CONSUME_QUEUE: _header(topic="topic", group="consumerGroup"),
}

# codes whose resource is the topic of the message they look up: checked by their processor
# (refuse_unless) once the message is found; the hook checks what their header names
DEFERRED_CODES = frozenset({RequestCode.VIEW_MESSAGE_BY_ID, RequestCode.CONSUMER_SEND_MSG_BACK,
                            RequestCode.END_TRANSACTION})


def parse_request(request: RemotingCommand, remote_addr: str | None) -> AccessRequest:
    """``PlainAccessValidator.parse``: the client IP, the credentials, the resources the request touches
    and the signed content. A body that cannot be read raises AccessDenied (as Java's AclException)."""
    ip = remote_addr[:remote_addr.rfind(":")] if remote_addr is not None and ":" in remote_addr else remote_addr
    req = AccessRequest(code=request.code, remote_ip=ip)
    ext = request.ext_fields
    if ext is None:
        return req
    req.access_key = ext.get(ACCESS_KEY)
    req.signature = ext.get(SIGNATURE)
    req.security_token = ext.get(SECURITY_TOKEN)
    code = request.code
    if code == RequestCode.SEND_MESSAGE:
        _add_send(req, ext.get("topic"), ext.get("group"))
        _add_retry_topic_itself(req, ext.get("topic"))      # ours
    elif code == RequestCode.SEND_MESSAGE_V2:
        _add_send(req, ext.get("b"), ext.get("a"))
        _add_retry_topic_itself(req, ext.get("b"))          # ours
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        req.add(_retry(ext.get("group")), Perm.SUB)
    elif code == RequestCode.PULL_MESSAGE:
        req.add(ext.get("topic"), Perm.SUB)
        req.add(_retry(ext.get("consumerGroup")), Perm.SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        req.add(ext.get("topic"), Perm.SUB)
    elif code == RequestCode.HEART_BEAT:
        _heartbeat_resources(request.body, req)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        # decodeCommandCustomHeader logs (does not throw) a missing @CFNotNull field: consumerGroup may be null
        req.add(_retry(ext.get("consumerGroup")), Perm.SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        req.add(_retry(ext.get("consumerGroup")), Perm.SUB)
        req.add(ext.get("topic"), Perm.SUB)
    elif (extra := EXTRA_RESOURCES.get(code)) is not None:
        extra(ext, request.body, req)
    req.content = signing_content(ext, request.body, exclude=(SIGNATURE, UNIQUE_MSG_QUERY_FLAG))
    return req


def _printable(resource: str, is_group: bool) -> str:
    """``PlainAccessResource.printStr``."""
    return f"group:{resource[len(RETRY_PREFIX):]}" if is_group else f"topic:{resource}"


def check_perm(req: AccessRequest, account: AclAccount) -> None:
    """``PlainPermissionManager.checkPerm``."""
    if req.code in BROKER_ADMIN_CODES and not account.admin:
        raise AccessDenied(f"Need admin permission for request code={req.code}, but accessKey="
                           f"{account.access_key} is not", FRAME_ADMIN)
    if not req.resources:
        return
    # an admin with no topicPerms/groupPerms at all (ownedPermMap == null) may do anything
    if not account.resource_perms and account.admin:
        return
    for resource in java_hashmap_order(list(req.resources)):
        needed = req.resources[resource]
        is_group = _is_retry(resource)
        owned = account.resource_perms.get(resource)
        if owned is None:
            if not Perm.check(needed, account.default_group_perm if is_group else account.default_topic_perm):
                raise AccessDenied(f"No default permission for {_printable(resource, is_group)}",
                                   FRAME_DEFAULT_PERM)
        elif not Perm.check(needed, owned):
            raise AccessDenied(f"No default permission for {_printable(resource, is_group)}", FRAME_RESOURCE_PERM)


def validate(rules: AclRules, req: AccessRequest) -> None:
    """``PlainPermissionManager.validate``: returns when allowed, raises AccessDenied otherwise."""
    if any(rule.match(req.remote_ip) for rule in rules.global_white):
        return
    if req.access_key is None:
        raise AccessDenied("No accessKey is configured", FRAME_NO_ACCESS_KEY)
    account = rules.accounts.get(req.access_key)
    if account is None:
        raise AccessDenied(f"No acl config for {req.access_key}", FRAME_UNKNOWN_ACCESS_KEY)
    if account.white.match(req.remote_ip):
        return
    expected = calc_signature(req.content or b"", account.secret_key)
    if req.signature is None or not hmac.compare_digest(expected, req.signature):
        raise AccessDenied(f"Check signature failed for accessKey={req.access_key}", FRAME_SIGNATURE)
    if req.resources.get(TRACE_TOPIC) == Perm.PUB:
        return
    check_perm(req, account)


# ------------------------------------------------------------------------------------------ the manager
def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class PlainPermissionManager:
    """The rules of one ACL file, reloaded when the file changes (``AclFileWatchService``: checked at
    most every ``watch_interval_s``, lazily, from :meth:`validate`)."""

    def __init__(self, path: Path | str, *, watch_interval_s: float = WATCH_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.watch_interval_s = watch_interval_s
        self._clock = clock
        self._stamp = _stamp(self.path)
        self.rules = load_acl_file(self.path)
        self._checked_at = clock()
        self._failed_stamp: tuple[int, int, int] | None = None
        self._missing_logged = False
        self.reloads = 0

    def maybe_reload(self) -> bool:
        """Reload if the file changed since the last load; True when new rules are in force."""
        now = self._clock()
        if now - self._checked_at < self.watch_interval_s:
            return False
        self._checked_at = now
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return False
        if stamp is None:
            if not self._missing_logged:
                log.error("ACL file %s disappeared; the rules loaded before stay in force", self.path)
                self._missing_logged = True
            return False
        self._missing_logged = False
        if stamp == self._failed_stamp:
            return False
        try:
            rules = load_acl_file(self.path)
        except AclConfigError as exc:
            log.error("ACL file changed but does not load, the rules loaded before stay in force: %s", exc)
            self._failed_stamp = stamp
            return False
        self.rules, self._stamp, self._failed_stamp = rules, stamp, None
        self.reloads += 1
        log.info("ACL file %s reloaded: %d accounts, %d global white-list entries", self.path,
                 len(rules.accounts), len(rules.global_white))
        return True

    def check(self, request: RemotingCommand, remote_addr: str | None,
              found: Mapping[str, int] | None = None) -> None:
        """Raise AccessDenied unless the rules allow ``request`` from ``remote_addr`` ("ip:port");
        ``found``: resources known only after a lookup (a message's topic), checked with the others."""
        self.maybe_reload()
        req = parse_request(request, remote_addr)
        for resource, perm in (found or {}).items():
            req.add(resource, perm)
        validate(self.rules, req)


class _Controller(Protocol):
    config: Any
    request_hooks: list[Callable[[Any, RemotingCommand], RemotingCommand | None]]


class AclHook:
    """The broker's request hook: ``hook(channel, request)`` returns None when the ACL allows the
    request, else the SYSTEM_ERROR response a 4.9.8 broker sends (for a oneway request the caller must
    drop it). ``config`` needs ``store_path_root_dir`` and may have ``acl_plain_file``."""

    def __init__(self, config: _AclSettings, *, watch_interval_s: float = WATCH_INTERVAL_S) -> None:
        self.path = resolve_acl_file(config)
        self.manager = PlainPermissionManager(self.path, watch_interval_s=watch_interval_s)
        log.info("ACL enabled: %s (%d accounts)", self.path, len(self.manager.rules.accounts))

    def __call__(self, channel: Any, request: RemotingCommand) -> RemotingCommand | None:
        return self.refusal(channel, request)

    def refusal(self, channel: Any, request: RemotingCommand,
                found: Mapping[str, int] | None = None) -> RemotingCommand | None:
        """None when the ACL allows ``request`` (with the resources ``found`` by its processor), else
        the SYSTEM_ERROR response with the ``AclException`` remark."""
        addr = getattr(channel, "addr", None)
        try:
            self.manager.check(request, addr, found)
        except AccessDenied as denied:
            log.warning("ACL refused request code %d from %s: %s", request.code, addr, denied.remark)
            return request.response(ResponseCode.SYSTEM_ERROR, denied.remark)
        return None


def refuse_unless(controller: Any, channel: Any, request: RemotingCommand,
                  found: Callable[[], Mapping[str, int]]) -> RemotingCommand | None:
    """For a processor that learns a resource of ``request`` only by looking it up (the topic of the
    message VIEW_MESSAGE_BY_ID returns, or CONSUMER_SEND_MSG_BACK copies): None when the broker has no
    ACL or the ACL allows the request with the resources ``found()`` gives (called only with an ACL),
    else the refusal to answer instead. The request is checked again as a whole (signature included).
    ``controller.request_hooks`` holds the :class:`AclHook` when there is one (a processor's test double
    without ``request_hooks`` has no ACL)."""
    for hook in getattr(controller, "request_hooks", ()):
        if isinstance(hook, AclHook):
            try:
                resources = found()
            except AccessDenied as denied:
                log.warning("ACL refused request code %d from %s: %s", request.code,
                            getattr(channel, "addr", None), denied.remark)
                return request.response(ResponseCode.SYSTEM_ERROR, denied.remark)
            return hook.refusal(channel, request, resources)
    return None


def record_topic(raw: bytes | memoryview, commit_log_offset: int) -> str:
    """The topic of a stored record (for :func:`refuse_unless`); a record whose topic cannot be read
    raises AccessDenied (no topic, no permission)."""
    try:
        rec = codec.decode_record(raw, check_crc=False)
    except CorruptStoreError as exc:
        raise AccessDenied(f"the topic of the message at commit-log offset {commit_log_offset} cannot be read: "
                           f"{exc}", FRAME_PARSE) from exc
    if rec is None:
        raise AccessDenied(f"no message at commit-log offset {commit_log_offset}", FRAME_PARSE)
    return rec.topic


def register(controller: _Controller) -> None:
    """Append the ACL hook to ``controller.request_hooks`` when ``controller.config.acl_enable``."""
    if getattr(controller.config, "acl_enable", False):
        controller.request_hooks.append(AclHook(controller.config))
