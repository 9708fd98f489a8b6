"""Message properties as stored: ``name\\x01value\\x02`` pairs in UTF-8, decoded the way Java decodes
them (``MessageDecoder.string2messageProperties`` over ``new String(bytes, UTF_8)``)."""

from __future__ import annotations

import codecs
from collections.abc import Mapping

from rocketstream.errors import OptionError


def encode_properties(props: Mapping[str, str | None]) -> bytes:
    """``name\\x01value\\x02`` per entry (every entry ends with \\x02), UTF-8; None values skipped."""
    items = [(k, v) for k, v in props.items() if v is not None]
    text = "".join([f"{k}\x01{v}\x02" for k, v in items])
    # A separator inside a name or value would silently change what a reader decodes.
    if text.count("\x01") != len(items) or text.count("\x02") != len(items):
        raise OptionError("properties", "names and values must not contain \\x01 or \\x02", dict(props))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise OptionError("properties", f"not encodable as UTF-8: {exc}") from exc


def decode_properties(raw: object, *, path: object = None, offset: int | None = None) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties(new String(raw, UTF_8))``; never fails.

    The bytes are decoded as Java does (:func:`decode_java_utf8`), then split on \\x02 and each
    segment at its first \\x01; segments with an empty name or value are dropped; a final segment
    without \\x02 counts like any other (4.9.1-5.1.4 brokers write no trailing \\x02, older and
    5.2+ ones do); a later duplicate name wins. ``path``/``offset`` are accepted for callers that
    pass them and unused: no property bytes are an error."""
    del path, offset
    out: dict[str, str] = {}
    for segment in decode_java_utf8(raw).split("\x02"):
        name, _, value = segment.partition("\x01")
        if name and value:
            out[name] = value
    return out


def _java_utf8_replace(exc: UnicodeError) -> tuple[str, int]:
    """Error handler giving the U+FFFD that Java's UTF-8 decoder (``new String(bytes, UTF_8)``,
    JDK 17) gives for a malformed sequence.

    Python replaces each maximal valid prefix of a sequence with one U+FFFD, and so does Java, except
    for an encoded UTF-16 surrogate (ED A0..BF ..): Python stops after ED (ED only continues with
    80..9F) and replaces ED, A0..BF and the third byte separately; Java reads the sequence as one
    three-byte character, finds a surrogate and replaces the whole of it — the first two bytes
    alone when the third is not a continuation byte or the input ends. Checked against the JDK
    (tests/store/test_foreign_bytes.py runs ``new String(b, UTF_8)`` on 20,000 malformed inputs).
    No replaced sequence ever includes an ASCII byte, so 0x01/0x02 survive as separators.
    """
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    raw, start = exc.object, exc.start
    if raw[start] == 0xED and start + 1 < len(raw) and 0xA0 <= raw[start + 1] <= 0xBF:
        third = start + 2 < len(raw) and 0x80 <= raw[start + 2] <= 0xBF
        return "\ufffd", start + (3 if third else 2)
    return "\ufffd", exc.end


codecs.register_error("rocketstream.java_utf8", _java_utf8_replace)


def decode_java_utf8(raw: object) -> str:
    """The string Java's ``new String(raw, StandardCharsets.UTF_8)`` builds: never fails, each
    malformed sequence becomes U+FFFD exactly where and as often as Java puts one."""
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError:
        return bytes(raw).decode("utf-8", "rocketstream.java_utf8")


def java_utf8_bytes(raw: object) -> bytes:
    """UTF-8 of :func:`decode_java_utf8` (the bytes themselves when they are valid UTF-8)."""
    return decode_java_utf8(raw).encode("utf-8")

