"""Java ``String`` semantics the RocketMQ client relies on, restated for Python strings.

Allocation and tag filtering must give exactly what the Java client gives, and three of its
``String`` behaviours differ from Python's ``str``:

* ``compareTo`` orders by UTF-16 code unit, Python by code point (they disagree once a string holds
  characters outside the BMP next to characters in U+E000..U+FFFF);
* ``trim`` strips every char <= U+0020 (controls included), ``str.strip`` strips Unicode whitespace;
* ``split(regex)`` drops trailing empty strings (so ``"a@b@".split("@")`` has two parts).
"""

from __future__ import annotations

import re

# Every code unit Java's String.trim() removes from both ends.
_JAVA_TRIM_CHARS = "".join(chr(c) for c in range(0x21))


def utf16_key(s: str) -> bytes:
    """Sort key ordering strings like Java ``String.compareTo``.

    Comparing UTF-16BE bytes compares code units lexicographically with a shorter prefix first,
    which is exactly compareTo's order. ``surrogatepass`` keeps lone surrogates comparable.
    """
    return s.encode("utf-16-be", "surrogatepass")


def java_trim(s: str) -> str:
    """``String.trim()``: strip chars <= U+0020 from both ends (not Unicode whitespace)."""
    return s.strip(_JAVA_TRIM_CHARS)


def java_split(s: str, literal: str) -> list[str]:
    """``String.split(Pattern.quote(literal))`` with limit 0: trailing empty strings removed.

    No match returns ``[s]`` (so ``""`` gives ``[""]``); a string made only of separators gives ``[]``.
    """
    if literal not in s:
        return [s]
    parts = re.split(re.escape(literal), s)
    while parts and parts[-1] == "":
        parts.pop()
    return parts

