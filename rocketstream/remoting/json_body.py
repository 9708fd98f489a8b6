"""fastjson's dialect for remoting bodies (``RemotingSerializable.encode/decode``; docs/remoting-protocol.md):
a tolerant reader and a compact writer.

The reader is the project's fastjson module (``rocketstream.codec.fastjson``); this is the one place
remoting imports it.

The writer reproduces ``JSON.toJSONString(obj)`` (``RemotingSerializable.encode``) for the bodies we
write: no whitespace, mapping keys sorted (bean properties are sorted by fastjson; maps as with
``SerializerFeature.MapSortField``), ``None`` omitted from mappings (fastjson skips null properties),
non-string map keys bare (``{0:"127.0.0.1:10911"}``). ``standard=True`` is the
``BrowserCompatible`` form ``DefaultRequestProcessor.getRouteInfoByTopic`` uses for peers that ask
for standard JSON: every key quoted and non-ASCII written as ``\\uXXXX``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from rocketstream.codec import fastjson as _fastjson
from rocketstream.errors import BodyError, OffsetFileError

__all__ = ["loads", "dumps", "dumps_pretty"]


def loads(data: bytes | str, *, what: str = "body", addr: str | None = None) -> object:
    """Parse fastjson's dialect (bare numeric keys, object keys); malformed input raises BodyError."""
    try:
        return _fastjson.parse_fastjson(data)
    except OffsetFileError as exc:
        raise BodyError(f"{what} is not valid JSON: {exc}", addr=addr) from exc


_ESCAPE = re.compile(r'[\x00-\x1f"\\\u2028\u2029\ud800-\udfff]')
_ESCAPE_BROWSER = re.compile(r'[\x00-\x1f"\\\u007f-\uffff]')
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _quote(s: str, browser: bool) -> str:
    pattern = _ESCAPE_BROWSER if browser else _ESCAPE
    return '"' + pattern.sub(lambda m: _SHORT.get(m.group(), f"\\u{ord(m.group()):04X}"), s) + '"'


def _key_order(key: object) -> tuple:
    return (0, key) if isinstance(key, (int, float)) and not isinstance(key, bool) else (1, str(key))


def _write(value: object, browser: bool, out: list[str]) -> None:
    if isinstance(value, Mapping):
        out.append("{")
        first = True
        for key in sorted(value, key=_key_order):
            item = value[key]
            if item is None:
                continue
            if not first:
                out.append(",")
            first = False
            if isinstance(key, str):
                out.append(_quote(key, browser))
            elif browser:
                out.append(_quote(str(key), browser))
            else:
                _write(key, browser, out)
            out.append(":")
            _write(item, browser, out)
        out.append("}")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(repr(value))
    elif isinstance(value, str):
        out.append(_quote(value, browser))
    elif value is None:
        out.append("null")
    elif isinstance(value, (list, tuple, set, frozenset)):
        out.append("[")
        for j, item in enumerate(sorted(value) if isinstance(value, (set, frozenset)) else value):
            if j:
                out.append(",")
            _write(item, browser, out)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as fastjson")


def dumps(value: object, *, standard: bool = False) -> bytes:
    """UTF-8 bytes of ``value`` as fastjson writes it (see the module docstring)."""
    out: list[str] = []
    _write(value, standard, out)
    return "".join(out).encode("utf-8", "surrogatepass")


def dumps_pretty(value: object) -> str:
    """fastjson's PrettyFormat (``toJson(true)``), as config files are written."""
    return _fastjson.dump_fastjson(value)
