"""RemotingCommand and its frame codec (docs/remoting-protocol.md; ``RemotingCommand.encode/decode``,
``RocketMQSerializable.rocketMQProtocolEncode/Decode``, ``NettyDecoder``).

A frame is ``int32 length | uint8 serializeType, uint24 headerLength | header | body`` with ``length``
counting everything after itself. The header is either fastjson's JSON of the command (type 0) or
RocketMQ's binary layout (type 1); every frame is decoded by its own type byte. Anything that is not a
valid frame raises :class:`FrameError` and nothing else.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal, overload

import numpy as np
import numpy.typing as npt

from rocketstream.codec import INT16, INT32
from rocketstream.errors import FrameError, HeaderFieldError
from rocketstream.remoting.acl_signing import SECURITY_TOKEN
from rocketstream.remoting.codes import LanguageCode, Version

__all__ = [
    "RemotingCommand", "SerializeType", "MAX_FRAME_LENGTH", "RESPONSE_FLAG", "ONEWAY_FLAG",
    "encode_frame", "decode_frame", "frame_body_length", "RequestTemplate",
]

# NettyDecoder: LengthFieldBasedFrameDecoder(16777216, ...) counts the 4 length bytes too
MAX_FRAME_LENGTH = 16 * 1024 * 1024
RESPONSE_FLAG = 1 << 0   # RemotingCommand.RPC_TYPE
ONEWAY_FLAG = 1 << 1     # RemotingCommand.RPC_ONEWAY

_PREFIX = struct.Struct(">iI")
_INT32 = 2**31
_TYPE_AND_LENGTH = struct.Struct(">I")
_BIN_FIXED = struct.Struct(">hBhii")   # code, language, version, opaque, flag (rocketMQProtocolEncode)


class SerializeType:
    JSON = 0
    ROCKETMQ = 1
    NAMES = {0: "JSON", 1: "ROCKETMQ"}


@dataclass(slots=True)
class RemotingCommand:
    """One request or response. ``ext_fields`` is the custom header (``extFields``, string values);
    ``serialize_type`` is the header encoding the command arrived in / will be sent with."""

    code: int
    language: str = "PYTHON"
    version: int = Version.CURRENT
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] | None = None
    body: bytes | None = None
    serialize_type: int = SerializeType.JSON
    # A body given as buffers to be sent back to back (views of a commit-log mapping: a pull answer) instead
    # of ``body``: encode_frame copies them once, straight into the frame. Outgoing commands only.
    body_parts: Sequence[bytes | memoryview] | None = field(default=None, repr=False, compare=False)
    # A large incoming body left in the buffer it was received into, instead of ``body``: only for a
    # caller that asked for it (Channel.invoke(..., body_buffer=True)); everyone else gets ``body``.
    body_buffer: npt.NDArray[np.uint8] | None = field(default=None, repr=False, compare=False)

    # --- construction (RemotingCommand.createRequestCommand / createResponseCommand)
    @classmethod
    def request(cls, code: int, fields: dict[str, object] | None = None, body: bytes | None = None, *,
                oneway: bool = False, serialize_type: int = SerializeType.JSON) -> RemotingCommand:
        return cls(code=code, ext_fields=_stringify(fields), body=body, flag=ONEWAY_FLAG if oneway else 0,
                   serialize_type=serialize_type)

    def response(self, code: int, remark: str | None = None, *, fields: dict[str, object] | None = None,
                 body: bytes | None = None) -> RemotingCommand:
        """The response to this request: same opaque, RESPONSE flag, the request's header encoding
        (``NettyRemotingAbstract.processRequestCommand`` copies ``serializeTypeCurrentRPC``)."""
        return RemotingCommand(code=code, opaque=self.opaque, flag=RESPONSE_FLAG, remark=remark,
                               ext_fields=_stringify(fields), body=body, serialize_type=self.serialize_type)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    # --- custom header access (RemotingCommand.decodeCommandCustomHeader)
    @overload
    def field(self, name: str, *, required: Literal[True] = ...) -> str: ...
    @overload
    def field(self, name: str, *, required: bool) -> str | None: ...

    def field(self, name: str, *, required: bool = True) -> str | None:
        """The extFields value ``name``; a missing required field raises HeaderFieldError naming it
        (the Java side's ``RemotingCommandException("the custom field <name> is null")``)."""
        value = (self.ext_fields or {}).get(name)
        if value is None and required:
            raise HeaderFieldError(name, "is null")
        return value

    @overload
    def int_field(self, name: str, *, required: Literal[True] = ..., default: int | None = ...) -> int: ...
    @overload
    def int_field(self, name: str, *, required: bool, default: int) -> int: ...
    @overload
    def int_field(self, name: str, *, required: bool, default: None = ...) -> int | None: ...

    def int_field(self, name: str, *, required: bool = True, default: int | None = None) -> int | None:
        raw = self.field(name, required=required)
        if raw is None:
            return default
        try:
            return int(raw.strip())
        except ValueError:
            raise HeaderFieldError(name, f"is not a number: {raw[:64]!r}") from None

    def long_field(self, name: str) -> int:
        """A required Java ``long`` field: a number outside int64 is a HeaderFieldError naming the field."""
        value = self.int_field(name)
        if not -(1 << 63) <= value < (1 << 63):
            raise HeaderFieldError(name, f"is not an int64: {value}")
        return value

    @overload
    def bool_field(self, name: str, *, default: bool = ...) -> bool: ...
    @overload
    def bool_field(self, name: str, *, default: None) -> bool | None: ...

    def bool_field(self, name: str, *, default: bool | None = False) -> bool | None:
        """``Boolean.parseBoolean``: "true" in any case is true, anything else false; absent -> default."""
        raw = self.field(name, required=False)
        return default if raw is None else raw.lower() == "true"

    def encode(self) -> bytes:
        return encode_frame(self)

    def take_body_buffer(self) -> None:
        """Make a body left in its receive buffer the usual ``bytes`` body (one copy)."""
        if self.body_buffer is not None:
            self.body = self.body_buffer.tobytes()
            self.body_buffer = None

    def __repr__(self) -> str:
        kind = "response" if self.is_response else ("oneway" if self.is_oneway else "request")
        body = (f"{sum(len(p) for p in self.body_parts)}B" if self.body_parts is not None else
                f"{len(self.body_buffer)}B" if self.body_buffer is not None else
                "-" if self.body is None else f"{len(self.body)}B")
        ext = self.ext_fields
        if ext and SECURITY_TOKEN in ext:   # an STS token is a credential: never in a log line or an error
            ext = {**ext, SECURITY_TOKEN: "***"}
        return (f"RemotingCommand({kind} code={self.code} opaque={self.opaque} flag={self.flag} "
                f"lang={self.language} v={self.version} remark={self.remark!r} ext={ext} body={body})")



def _stringify(fields: dict[str, object] | None) -> dict[str, str] | None:
    """``makeCustomHeaderToNet``: String.valueOf of each non-null value; booleans lower case."""
    if fields is None:
        return None
    out: dict[str, str] = {}
    for k, v in fields.items():
        t = type(v)
        if t is str:
            out[k] = v   # type: ignore[assignment]   # type(v) is str
        elif t is int:
            out[k] = int.__repr__(v)
        elif v is not None:
            out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


# ------------------------------------------------------------------------------------------ encode
def _utf8(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def _json_header(cmd: RemotingCommand) -> bytes:
    # fastjson writes the bean's properties sorted by name and omits nulls (RemotingCommand.encode)
    doc: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields is not None:
        doc["extFields"] = cmd.ext_fields
    doc["flag"] = cmd.flag
    doc["language"] = cmd.language
    doc["opaque"] = cmd.opaque
    if cmd.remark is not None:
        doc["remark"] = cmd.remark
    doc["serializeTypeCurrentRPC"] = "JSON"
    doc["version"] = cmd.version
    text = _dumps_compact(doc)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:   # a lone surrogate: let JSON escape it instead
        return json.dumps(doc, separators=(",", ":")).encode("ascii")


def _make_compact_dumps() -> Callable[[dict[str, object]], str]:
    """``json.dumps(doc, ensure_ascii=False, separators=(",", ":"))`` without building a JSONEncoder per
    call (json.dumps does so for any non-default argument): the C encoder made once, no circular
    check (a header is a flat dict of str/int values and one dict of str). Same text, about half the cost."""
    try:
        from _json import encode_basestring, make_encoder
    except ImportError:   # no C accelerator: the plain call
        return lambda doc: json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    default = json.JSONEncoder().default
    encoder = make_encoder(None, default, encode_basestring, None, ":", ",", False, False, True)
    return lambda doc: "".join(encoder(doc, 0))


_dumps_compact = _make_compact_dumps()
try:   # fastjson-compatible string escaping, as _dumps_compact writes strings (ensure_ascii=False)
    from _json import encode_basestring
except ImportError:
    from json.encoder import py_encode_basestring as encode_basestring


def _binary_header(cmd: RemotingCommand) -> bytes:
    if not (-32768 <= cmd.code <= 32767) or not (-32768 <= cmd.version <= 32767):
        raise FrameError(f"code {cmd.code} / version {cmd.version} do not fit the ROCKETMQ header's int16 "
                         "(send it with a JSON header)")
    lang = _LANG_BYTE.get(cmd.language, LanguageCode.OTHER)
    parts = [_BIN_FIXED.pack(cmd.code, lang, cmd.version, _wrap32(cmd.opaque), _wrap32(cmd.flag))]
    remark = _utf8(cmd.remark) if cmd.remark else b""
    parts += [INT32.pack(len(remark)), remark]
    ext = bytearray()
    for k, v in (cmd.ext_fields or {}).items():
        if k is None or v is None:   # RocketMQSerializable.mapSerialize skips null keys and values
            continue
        kb, vb = _utf8(k), _utf8(v)
        if len(kb) > 32767:
            raise FrameError(f"extFields key longer than 32767 bytes: {k[:40]!r}...")
        ext += INT16.pack(len(kb)) + kb + INT32.pack(len(vb)) + vb
    parts += [INT32.pack(len(ext)), bytes(ext)]
    return b"".join(parts)


def _wrap32(v: int) -> int:
    return ((v + 2**31) % 2**32) - 2**31


_LANG_BYTE = {name: code for code, name in LanguageCode.names().items()}


def encode_frame(cmd: RemotingCommand) -> bytes:
    """The whole frame, length prefix included (``RemotingCommand.encode``)."""
    return b"".join(encode_frame_parts(cmd))   # one copy of the body (or of each of its parts)


def encode_frame_parts(cmd: RemotingCommand) -> list[bytes | memoryview]:
    """The frame as buffers to be written back to back: length prefix and header, then the body (or each
    of ``body_parts``, not copied)."""
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        header = _binary_header(cmd)
    elif cmd.serialize_type == SerializeType.JSON:
        header = _json_header(cmd)
    else:
        raise FrameError(f"unknown serialize type {cmd.serialize_type}")
    parts = cmd.body_parts
    if parts is None:
        parts = [cmd.body] if cmd.body else []
    length = 4 + len(header) + sum(len(p) for p in parts)
    if length + 4 > MAX_FRAME_LENGTH or len(header) > 0xFFFFFF:
        raise FrameError(f"frame of {length + 4} bytes exceeds the {MAX_FRAME_LENGTH}-byte limit "
                         f"(code {cmd.code})")
    return [_PREFIX.pack(length, (cmd.serialize_type << 24) | len(header)) + header, *parts]


class RequestTemplate:
    """:func:`encode_frame` of one request for any opaque and any values of a few of its extFields, without
    encoding the rest again: a request sent over and over with only these changing (PULL_MESSAGE's
    queueOffset and maxMsgNums, MQClientAPI.pull_tiles; SEND_MESSAGE_V2's queueId, sysFlag, bornTimestamp,
    flag and properties, MQClientAPI.send_from_thread) costs one string format instead of a JSON encode.

    :meth:`make` builds it from the command with the values of ``names`` left to :meth:`frame` (JSON headers
    only; None for anything else) and checks that the frames it makes are those :func:`encode_frame` makes,
    byte for byte. The values of ``names`` are integers, except those also in ``texts``: strings (JSON-escaped
    as fastjson's writer escapes them). A command with a body makes a template only with ``body=True``; then
    every frame carries the body given to :meth:`frame`. :meth:`frame` gives the whole frame, length prefix
    included; UnicodeEncodeError for a text value JSON cannot write as UTF-8 (a lone surrogate: encode that
    command with :func:`encode_frame`)."""

    __slots__ = ("_format", "_texts")

    def __init__(self, fmt: bytes, texts: tuple[int, ...] = ()) -> None:
        self._format = fmt
        self._texts = texts

    @classmethod
    def make(cls, cmd: RemotingCommand, names: Sequence[str], *, texts: Collection[str] = (),
             body: bool = False) -> RequestTemplate | None:
        fields = cmd.ext_fields
        if (cmd.serialize_type != SerializeType.JSON or (cmd.body and not body) or cmd.body_parts is not None
                or fields is None or not names or len(set(names)) != len(names)
                or any(name not in fields for name in names) or any(name not in names for name in texts)):
            return None
        # each value marked by a string no name can hold as written (JSON writes NUL escaped), the opaque by
        # a number that must occur once
        marks = {name: f"\x00{i}\x00" for i, name in enumerate(names)}
        opaque_mark = -2**31 + 7919
        probe = RemotingCommand(cmd.code, cmd.language, cmd.version, opaque_mark, cmd.flag, cmd.remark,
                                {k: marks.get(k, v) for k, v in fields.items()}, None, SerializeType.JSON)
        header = _json_header(probe).replace(b"%", b"%%")
        found = [_dumps_compact({"": marks[name]}).encode("utf-8")[4:-1] for name in names]
        found.append(b":%d," % opaque_mark)
        at = [header.find(mark) for mark in found]
        if any(header.count(mark) != 1 for mark in found) or at != sorted(at):
            return None   # frame() fills the values in header order: the extFields named, then the opaque
        puts = [b"%b" if name in texts else b'"%d"' for name in names] + [b":%d,"]
        for mark, put in zip(found, puts, strict=True):
            header = header.replace(mark, put, 1)
        template = cls(header, tuple(i for i, name in enumerate(names) if name in texts))
        samples = ("", "a", "%d%s%%", '"\\/\x01\x02\x7f', "é€\U0001f600", "\u2028\u2029")
        for k, value in enumerate((0, -1, 12345, 2**31 - 1, -2**31, 2**63 - 1)):   # encode_frame's bytes, or none
            values: list[int | str] = [value + i for i in range(len(names))]
            for i in template._texts:
                values[i] = samples[(k + i) % len(samples)]
            data = bytes(range(k * 7)) if body else None
            check = RemotingCommand(cmd.code, cmd.language, cmd.version, value, cmd.flag, cmd.remark,
                                    {f: str(values[names.index(f)]) if f in marks else v for f, v in fields.items()},
                                    data, SerializeType.JSON)
            if template.frame(value, *values, body=data) != encode_frame(check):
                return None
        return template

    def frame(self, opaque: int, *values: int | str, body: bytes | None = None) -> bytes:
        """The request's frame with ``opaque`` and the values of the template's extFields, in their order."""
        if self._texts:
            filled: list[int | str | bytes] = list(values)
            for i in self._texts:
                filled[i] = encode_basestring(values[i]).encode("utf-8")   # type: ignore[arg-type]  # a text slot
            header = self._format % (*filled, opaque)
        else:
            header = self._format % (*values, opaque)
        if body:
            return b"".join((_PREFIX.pack(len(header) + 4 + len(body), len(header)), header, body))
        return _PREFIX.pack(len(header) + 4, len(header)) + header


# ------------------------------------------------------------------------------------------ decode
def frame_body_length(prefix: bytes, *, max_frame: int = MAX_FRAME_LENGTH, addr: str | None = None) -> int:
    """The ``length`` field of a frame's first 4 bytes, checked against the limit (``NettyDecoder``)."""
    (length,) = INT32.unpack(prefix)
    if length < 4:
        raise FrameError(f"frame length {length} is less than the 4-byte header length field", addr=addr)
    if length + 4 > max_frame:
        raise FrameError(f"frame of {length + 4} bytes exceeds the {max_frame}-byte limit", addr=addr)
    return length


def decode_frame(data: bytes | bytearray | memoryview, *, addr: str | None = None,
                 body_apart: npt.NDArray[np.uint8] | None = None) -> RemotingCommand:
    """Decode the bytes after the length prefix (``RemotingCommand.decode``). The body is the one copy
    made of a frame's bytes (a slice; from a bytearray or memoryview too). ``body_apart``: the frame's body
    received apart (:class:`~rocketstream.remoting.transport.FrameProtocol`'s large frames): ``data`` is
    then the part before it, and the body is left in ``body_buffer``, not copied."""
    if body_apart is not None:
        cmd = decode_frame(data, addr=addr)
        if cmd.body is not None:
            raise FrameError(f"header length of a split frame does not end at its body "
                             f"({len(cmd.body)} bytes between)", addr=addr)
        cmd.body_buffer = body_apart if len(body_apart) else None
        return cmd
    if len(data) < 4:
        raise FrameError(f"frame of {len(data)} bytes has no header length field", addr=addr)
    (type_and_len,) = _TYPE_AND_LENGTH.unpack_from(data, 0)
    stype, hlen = type_and_len >> 24, type_and_len & 0xFFFFFF
    if hlen > len(data) - 4:
        raise FrameError(f"header length {hlen} exceeds the frame's {len(data) - 4} bytes", addr=addr)
    if type(data) is bytes:
        header = data[4:4 + hlen]
        body = data[4 + hlen:] or None
    else:
        view = memoryview(data)
        header = bytes(view[4:4 + hlen])
        body = bytes(view[4 + hlen:]) or None
    if stype == SerializeType.JSON:
        cmd = _decode_json_header(header, addr)
    elif stype == SerializeType.ROCKETMQ:
        cmd = _decode_binary_header(header, addr)
    else:
        raise FrameError(f"unknown serialize type {stype} (0 = JSON, 1 = ROCKETMQ)", addr=addr)
    cmd.body = body
    return cmd


def _int_member(doc: dict, key: str, default: int, addr: str | None) -> int:
    v = doc.get(key, default)
    if type(v) is int and -2**31 <= v < 2**31:   # the usual case
        return v
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise FrameError(f"JSON header member {key!r} is not an integer: {v!r:.60}", addr=addr)
    try:
        v = int(v)
    except ValueError:
        raise FrameError(f"JSON header member {key!r} is not an integer: {v!r:.60}", addr=addr) from None
    if not (-2**31 <= v < 2**31):
        raise FrameError(f"JSON header member {key!r} = {v} does not fit an int32", addr=addr)
    return v


def _scalar_text(v: object) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


# json.loads' scanner, called without json.loads' calls around it (JSONDecoder.decode's whitespace matches):
# a header fastjson wrote has no whitespace around its object; anything else goes through json.loads
_SCAN_JSON: Callable[[str, int], tuple[object, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_is_str = str.__instancecheck__   # JSON values are exact types: isinstance(v, str) is type(v) is str


def _decode_json_header(header: bytes, addr: str | None) -> RemotingCommand:
    try:
        text = header.decode("utf-8")
        doc, end = _SCAN_JSON(text, 0)
        if end != len(text):
            raise ValueError("not the whole header")
    except (UnicodeDecodeError, ValueError, RecursionError, StopIteration):
        try:   # json.loads says what is wrong (or takes the whitespace around the object)
            doc = json.loads(header.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise FrameError(f"JSON header does not parse: {exc}", addr=addr) from exc
    if not isinstance(doc, dict):
        raise FrameError(f"JSON header is a {type(doc).__name__}, not an object", addr=addr)
    if "code" not in doc:
        raise FrameError("JSON header has no 'code'", addr=addr)
    ext = doc.get("extFields")
    code, version, opaque, flag = doc.get("code"), doc.get("version", 0), doc.get("opaque", 0), doc.get("flag", 0)
    language, remark = doc.get("language"), doc.get("remark")
    if (type(code) is int and type(version) is int and type(opaque) is int and type(flag) is int
            and type(language) is str and (remark is None or type(remark) is str)
            and (ext is None or (type(ext) is dict and all(map(_is_str, ext.values()))))
            and -_INT32 <= code < _INT32 and -_INT32 <= version < _INT32 and -_INT32 <= opaque < _INT32
            and -_INT32 <= flag < _INT32):
        # what fastjson writes (RemotingCommand.encode): the checks below would change nothing
        return RemotingCommand(code, language, version, opaque, flag, remark, ext, None, SerializeType.JSON)
    if ext is not None:
        if not isinstance(ext, dict):
            raise FrameError(f"JSON header 'extFields' is a {type(ext).__name__}, not an object", addr=addr)
        if not all(type(v) is str for v in ext.values()):   # fastjson writes strings; anything else is converted
            ext = {k: t for k, v in ext.items() if (t := _scalar_text(v)) is not None}
    language = doc.get("language", "JAVA")
    if not isinstance(language, str):
        language = LanguageCode.name(language) if isinstance(language, int) else None
        language = language or "OTHER"
    remark = doc.get("remark")
    return RemotingCommand(
        code=_int_member(doc, "code", 0, addr), language=language,
        version=_int_member(doc, "version", 0, addr), opaque=_int_member(doc, "opaque", 0, addr),
        flag=_int_member(doc, "flag", 0, addr), remark=_scalar_text(remark), ext_fields=ext,
        serialize_type=SerializeType.JSON)


def _decode_binary_header(header: bytes, addr: str | None) -> RemotingCommand:
    n = len(header)
    if n < _BIN_FIXED.size + 8:
        raise FrameError(f"ROCKETMQ header of {n} bytes is shorter than its fixed 29 bytes", addr=addr)
    code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(header, 0)
    pos = _BIN_FIXED.size
    (rlen,) = INT32.unpack_from(header, pos)
    pos += 4
    if rlen < 0 or rlen > n - pos - 4:
        raise FrameError(f"ROCKETMQ header remark length {rlen} exceeds the header", addr=addr)
    remark = header[pos:pos + rlen].decode("utf-8", "replace") if rlen > 0 else None
    pos += rlen
    (elen,) = INT32.unpack_from(header, pos)
    pos += 4
    if elen < 0 or elen > n - pos:
        raise FrameError(f"ROCKETMQ header extFields length {elen} exceeds the header", addr=addr)
    ext = _decode_ext(header[pos:pos + elen], addr) if elen > 0 else None
    return RemotingCommand(code=code, language=LanguageCode.name(lang) or "OTHER", version=version,
                           opaque=opaque, flag=flag, remark=remark, ext_fields=ext,
                           serialize_type=SerializeType.ROCKETMQ)


def _decode_ext(block: bytes, addr: str | None) -> dict[str, str]:
    """``RocketMQSerializable.mapDeserialize``: int16 key length, key, int32 value length, value."""
    out: dict[str, str] = {}
    pos, n = 0, len(block)
    while pos < n:
        if n - pos < 2:
            raise FrameError("truncated extFields key length in ROCKETMQ header", addr=addr)
        (klen,) = INT16.unpack_from(block, pos)
        pos += 2
        if klen < 0 or klen > n - pos - 4:
            raise FrameError(f"extFields key length {klen} exceeds the ROCKETMQ header", addr=addr)
        key = block[pos:pos + klen].decode("utf-8", "replace")
        pos += klen
        (vlen,) = INT32.unpack_from(block, pos)
        pos += 4
        if vlen < 0 or vlen > n - pos:
            raise FrameError(f"extFields value length {vlen} of <{key[:40]}> exceeds the ROCKETMQ header",
                             addr=addr)
        out[key] = block[pos:pos + vlen].decode("utf-8", "replace")
        pos += vlen
    return out
