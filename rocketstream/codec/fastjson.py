"""fastjson 1.x's JSON dialect, as RocketMQ writes its offset files (spec section 7).

fastjson's pretty printer is not JSON: integer map keys are bare and the closing brace of such a map sits
on its own line (``{0:250,1:248\\n\\t\\t}``), and a map keyed by objects writes each key as a whole
pretty-printed object. :func:`parse_fastjson` reads that dialect (tolerantly: whitespace anywhere, quoted
or bare keys, object and array keys) and :func:`dump_fastjson` reproduces the printer's bytes.

Errors are :class:`OffsetFileError` with a 0-based character position (a byte position when the input
is not valid UTF-8); nothing else escapes, whatever the input.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import NoReturn, cast

from rocketstream.errors import OffsetFileError

__all__ = ["FrozenObject", "FastjsonParser", "decode_text", "parse_fastjson", "dump_fastjson"]

_MAX_DEPTH = 128  # far deeper than any offset file; keeps hostile input from exhausting the stack

# --------------------------------------------------------------------------------------------- parser

_WS = frozenset(" \t\n\r\f\v")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_STRING_RUN = re.compile(r'[^"\\]*')
_HEX = frozenset("0123456789abcdefABCDEF")
# fastjson's reader also accepts \' and \xHH; both are harmless to accept.
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "'": "'", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_LITERALS = (("true", True), ("false", False), ("null", None))


class FrozenObject(Mapping[object, object]):
    """A JSON object used as a map key (``offsets.json`` keys are MessageQueue objects); hashable."""

    __slots__ = ("_d", "_hash")

    def __init__(self, items: Mapping[object, object]) -> None:
        self._d = {k: _freeze(v) for k, v in items.items()}
        self._hash = hash(frozenset(self._d.items()))

    def __getitem__(self, key: object) -> object:
        return self._d[key]

    def __iter__(self) -> Iterator[object]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"FrozenObject({self._d!r})"


def _freeze(value: object) -> object:
    if isinstance(value, Mapping) and not isinstance(value, FrozenObject):
        return FrozenObject(value)
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


class FastjsonParser:
    """Recursive descent over fastjson's dialect; records where every object entry starts."""

    def __init__(self, text: str, path: object) -> None:
        self.t = text
        self.n = len(text)
        self.path = path
        # (id(object), key) -> (key position, value position); used to point errors at entries
        self.positions: dict[tuple[int, object], tuple[int, int]] = {}

    def fail(self, message: str, pos: int) -> NoReturn:
        raise OffsetFileError(message, path=self.path, position=pos)

    def ws(self, i: int) -> int:
        t, n = self.t, self.n
        while i < n and t[i] in _WS:
            i += 1
        return i

    def document(self) -> object:
        i = self.ws(1 if self.t.startswith("\ufeff") else 0)
        if i >= self.n:
            self.fail("empty document", i)
        value, i = self.value(i, 0)
        i = self.ws(i)
        if i != self.n:
            self.fail("unexpected text after the end of the document", i)
        return value

    def value(self, i: int, depth: int) -> tuple[object, int]:
        if i >= self.n:
            self.fail("unexpected end of input, expected a value", i)
        c = self.t[i]
        if c == "{":
            return self.obj(i, depth + 1)
        if c == "[":
            return self.array(i, depth + 1)
        if c == '"':
            return self.string(i)
        if c in "-0123456789":
            return self.number(i)
        for word, val in _LITERALS:
            if self.t.startswith(word, i):
                return val, i + len(word)
        self.fail(f"unexpected character {c!r}, expected a value", i)

    def key(self, i: int, depth: int) -> tuple[object, int]:
        if i >= self.n:
            self.fail("unexpected end of input, expected an object key", i)
        c = self.t[i]
        if c == '"':
            return self.string(i)
        if c in "-0123456789":
            return self.number(i)
        if c == "{" or c == "[":  # object keys: how fastjson writes a Map<MessageQueue, Long>
            value, end = self.value(i, depth)
            return _freeze(value), end
        self.fail(f"unexpected character {c!r}, expected an object key", i)

    def obj(self, i: int, depth: int) -> tuple[dict[object, object], int]:
        if depth > _MAX_DEPTH:
            self.fail(f"nesting deeper than {_MAX_DEPTH} levels", i)
        t, start = self.t, i
        result: dict[object, object] = {}
        i = self.ws(i + 1)
        if i < self.n and t[i] == "}":
            return result, i + 1
        while True:
            key_pos = i
            key, i = self.key(i, depth)
            i = self.ws(i)
            if i >= self.n or t[i] != ":":
                self.fail("expected ':' after an object key", i)
            i = self.ws(i + 1)
            value_pos = i
            value, i = self.value(i, depth)
            result[key] = value  # a repeated key: the later entry wins, as in fastjson
            self.positions[(id(result), key)] = (key_pos, value_pos)
            i = self.ws(i)
            if i >= self.n:
                self.fail(f"unexpected end of input inside the object opened at character {start}", i)
            if t[i] == "}":
                return result, i + 1
            if t[i] != ",":
                self.fail("expected ',' or '}' in an object", i)
            i = self.ws(i + 1)

    def array(self, i: int, depth: int) -> tuple[list[object], int]:
        if depth > _MAX_DEPTH:
            self.fail(f"nesting deeper than {_MAX_DEPTH} levels", i)
        t, start = self.t, i
        result: list[object] = []
        i = self.ws(i + 1)
        if i < self.n and t[i] == "]":
            return result, i + 1
        while True:
            value, i = self.value(i, depth)
            result.append(value)
            i = self.ws(i)
            if i >= self.n:
                self.fail(f"unexpected end of input inside the array opened at character {start}", i)
            if t[i] == "]":
                return result, i + 1
            if t[i] != ",":
                self.fail("expected ',' or ']' in an array", i)
            i = self.ws(i + 1)

    def number(self, i: int) -> tuple[int | float, int]:
        m = _NUMBER.match(self.t, i)
        if m is None:
            self.fail("malformed number", i)
        s = m.group()
        try:
            value = float(s) if any(c in s for c in ".eE") else int(s)
        except ValueError:  # Python refuses int() of > 4300 digits
            self.fail("number too long", i)
        return value, m.end()

    def hex_at(self, i: int, width: int) -> int | None:
        digits = self.t[i : i + width]
        if len(digits) != width or not all(c in _HEX for c in digits):
            return None
        return int(digits, 16)

    def string(self, i: int) -> tuple[str, int]:
        t, n, start = self.t, self.n, i
        parts: list[str] = []
        i += 1
        while True:
            m = _STRING_RUN.match(t, i)
            assert m is not None   # [^"\\]* matches at every position, if only the empty string
            parts.append(m.group())
            i = m.end()
            if i >= n:
                self.fail(f"unterminated string opened at character {start}", i)
            if t[i] == '"':
                return "".join(parts), i + 1
            esc = t[i + 1] if i + 1 < n else ""
            if esc in _ESCAPES:
                parts.append(_ESCAPES[esc])
                i += 2
            elif esc in ("u", "x"):
                width = 4 if esc == "u" else 2
                code = self.hex_at(i + 2, width)
                if code is None:
                    self.fail(f"malformed \\{esc} escape", i)
                i += 2 + width
                if 0xD800 <= code < 0xDC00 and t.startswith("\\u", i):
                    low = self.hex_at(i + 2, 4)
                    if low is not None and 0xDC00 <= low < 0xE000:  # a surrogate pair is one character
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        i += 6
                parts.append(chr(code))
            elif esc == "":
                self.fail(f"unterminated string opened at character {start}", n)
            else:
                self.fail(f"unknown escape \\{esc}", i)


def decode_text(text: str | bytes, path: object) -> str:
    if isinstance(text, str):
        return text
    try:
        return bytes(text).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OffsetFileError(f"not valid UTF-8 (byte {exc.start})", path=path, position=exc.start) from exc


def parse_fastjson(text: str | bytes, *, path: object = None) -> object:
    """Parse fastjson's dialect: JSON plus bare numeric keys and object/array keys (as FrozenObject/tuple).

    Returns dict/list/str/int/float/bool/None. Any malformed input raises OffsetFileError(path, position).
    """
    return FastjsonParser(decode_text(text, path), path).document()


# -------------------------------------------------------------------------------------------- printer

# lone surrogates are escaped too so that any Python str survives a UTF-8 round trip
_ESCAPE_RE = re.compile(r'[\x00-\x1f"\\\ud800-\udfff]')
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _quote(s: str) -> str:
    return '"' + _ESCAPE_RE.sub(lambda m: _SHORT.get(m.group(), f"\\u{ord(m.group()):04X}"), s) + '"'


def _write(value: object, level: int, out: list[str]) -> None:
    if isinstance(value, Mapping):
        _write_map(value, level, out)
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(int(value)))
    elif isinstance(value, float):
        out.append(repr(value))
    elif isinstance(value, str):
        out.append(_quote(value))
    elif value is None:
        out.append("null")
    else:  # lists and tuples: fastjson prints arrays inline even in pretty mode
        out.append("[")
        # anything else that is not iterable fails here with Python's own TypeError, as it always did
        for j, item in enumerate(cast(Iterable[object], value)):
            if j:
                out.append(",")
            _write(item, level, out)
        out.append("]")


_INT = {int}


def _write_map(m: Mapping[object, object], level: int, out: list[str]) -> None:
    if not m:
        out.append("{}")
        return
    if set(map(type, m)) == _INT and set(map(type, m.values())) == _INT:
        # int -> int (a consume-offset table's queues): keys follow directly, so the map is one run
        out.append("{" + ",".join([f"{k}:{v}" for k, v in m.items()]) + "\n" + "\t" * level + "}")
        return
    inner = "\n" + "\t" * (level + 1)
    out.append("{")
    for j, (key, value) in enumerate(m.items()):
        if j:
            out.append(",")
        if isinstance(key, str):  # string keys start on a new line; other keys follow directly
            out.append(inner)
            out.append(_quote(key))
        else:
            _write(key, level + 1, out)
        out.append(":")
        _write(value, level + 1, out)
    out.append("\n" + "\t" * level + "}")


def dump_fastjson(value: object) -> str:
    """Print ``value`` as fastjson's PrettyFormat does (TAB indent, bare non-string keys), in the
    mappings' iteration order; no trailing newline."""
    out: list[str] = []
    _write(value, 0, out)
    return "".join(out)
