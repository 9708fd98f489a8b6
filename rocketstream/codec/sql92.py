"""SQL92 message filters (``expressionType=SQL92``): RocketMQ 4.9.8's ``filter`` module — the JavaCC grammar
of ``SelectorParser`` (``SelectorParser.jj``), the expression classes it builds (``ComparisonExpression``,
``LogicExpression``, ``UnaryExpression``, ``ConstantExpression``, ``PropertyExpression``) and their
evaluation against a message's properties (``MessageEvaluationContext``: the property map, ``TAGS`` and
``KEYS`` included, every value a string).

Grammar (keywords case-insensitive)::

    selector    := or                                   (nothing after it is read: "a = 1 b" selects a = 1)
    or          := and (OR and)*
    and         := equality (AND equality)*
    equality    := comparison ( "=" comparison | "<>" comparison | IS NULL | IS NOT NULL )*
    comparison  := unary ( (">" | ">=" | "<" | "<=") unary | [NOT] BETWEEN unary AND unary
                         | [NOT] IN "(" 'string' ("," 'string')* ")" )*
    unary       := "+" unary | "-" unary | NOT unary | primary
    primary     := literal | identifier | "(" or ")"
    literal     := 'string' ('' escapes a quote) | 123 | 123L | 1.5 | .5 | 1E3 | TRUE | FALSE | NULL

Literals: integers are Java ``Integer`` when they fit, else ``Long`` (beyond a long: refused); decimals are
``Double`` and must be >= ``Double.MIN_VALUE`` (so ``0.0`` is refused, as RocketMQ refuses it). Comments
``-- ...<newline>`` and ``/* ... */`` are skipped. There is no CONTAINS / STARTSWITH / ENDSWITH in 4.9.8
(they came with 5.x).

Checks made while parsing (``MQFilterException`` in RocketMQ, :class:`FilterExpressionError` here, naming the
expression and the position): ``= NULL`` (use ``IS NULL``), ``TRUE = 1``-style constant pairs, ``>``/``<``
with a string, boolean or NULL operand, ``BETWEEN`` with NULL or reversed constant bounds, ``IN`` on
anything but a property, and a selector that is not a boolean expression (``'abc'``, ``1 + ``...).

Evaluation (three-valued; a message matches only when the result is TRUE): a missing property is NULL; a
comparison with NULL is NULL (``a = b`` with both missing is TRUE, as in RocketMQ); ``IS [NOT] NULL`` is
never NULL; AND/OR short-circuit on FALSE/TRUE. Property values are strings and are converted to the
constant's type for a comparison (``Integer.valueOf`` / ``Long.valueOf`` / ``Double.valueOf`` /
``Boolean.valueOf``); ``>``/``<`` between two strings compare them as doubles. A value that does not
convert (``a > 5`` with a = "5.5" or "x") is an error in RocketMQ's evaluator, which makes the whole
message not match — even inside an OR whose other side is true.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rocketstream.codec.constants import (
    FLAG_BORNHOST_V6,
    FLAG_STOREHOST_V6,
    MAGIC_V2,
    POS_BORN_HOST,
    POS_MAGIC,
    POS_SYS_FLAG,
)
from rocketstream.codec.properties import decode_properties
from rocketstream.errors import CorruptStoreError, FilterExpressionError

__all__ = ["compile_sql92", "SqlFilter", "JavaLong", "EXPRESSION_TYPE_SQL92", "EXPRESSION_TYPE_TAG",
           "is_tag_type", "record_properties"]

EXPRESSION_TYPE_SQL92 = "SQL92"
EXPRESSION_TYPE_TAG = "TAG"
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_DOUBLE_MIN_VALUE = 5e-324          # Double.MIN_VALUE (4.9E-324)
_DOUBLE_MAX_VALUE = 1.7976931348623157e308


def is_tag_type(expression_type: str | None) -> bool:
    """``ExpressionType.isTagType``: null, empty or "TAG"."""
    return not expression_type or expression_type == EXPRESSION_TYPE_TAG


class JavaLong(int):
    """A Java ``Long`` value (a plain Python int is a Java ``Integer`` here; the two convert differently)."""

    __slots__ = ()


class _EvalError(Exception):
    """A Java RuntimeException during evaluation (NumberFormatException, ClassCastException...): the
    message does not match (``ExpressionMessageFilter.isMatchedByCommitLog`` catches it)."""


# ------------------------------------------------------------------------------------- Java value rules
def _java_int(text: str, lo: int, hi: int) -> int:
    """``Integer.valueOf`` / ``Long.valueOf``: optional sign, decimal digits (Unicode digits too), no blanks."""
    if not _JAVA_INT.fullmatch(text):
        raise _EvalError(f"NumberFormatException: For input string: {text!r}")
    v = int(text)
    if not lo <= v <= hi:
        raise _EvalError(f"NumberFormatException: For input string: {text!r}")
    return v


_JAVA_INT = re.compile(r"[+-]?\d+")
_JAVA_BLANKS = "".join(chr(c) for c in range(33))   # String.trim: every char <= ' '
_JAVA_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?)", re.ASCII)
_JAVA_HEX_DOUBLE = re.compile(r"([+-]?)0[xX]([0-9a-fA-F]*\.?[0-9a-fA-F]*)[pP]([+-]?\d+)[fFdD]?", re.ASCII)


def _java_double(text: str) -> float:
    """``Double.valueOf(String)``: leading/trailing chars <= ' ' ignored, NaN / Infinity, an optional
    f/F/d/D suffix, hexadecimal floats."""
    s = text.strip(_JAVA_BLANKS)
    m = _JAVA_DOUBLE.fullmatch(s)
    if m is not None:
        core = s.rstrip("fFdD") if m.group(1) not in ("NaN", "Infinity") else s
        return float(core.replace("Infinity", "inf"))
    h = _JAVA_HEX_DOUBLE.fullmatch(s)
    if h is not None and h.group(2) not in ("", "."):
        return float.fromhex(f"{h.group(1)}0x{h.group(2)}p{h.group(3)}")
    raise _EvalError(f"NumberFormatException: For input string: {text!r}")


_BITS = struct.Struct(">d")


def _double_bits(x: float) -> int:
    """``Double.doubleToLongBits`` (every NaN is the canonical one)."""
    return 0x7FF8000000000000 if x != x else int.from_bytes(_BITS.pack(x), "big", signed=True)


def _double_compare(a: float, b: float) -> int:
    """``Double.compare``: NaN is equal to itself and above everything, -0.0 < 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    ka, kb = _double_bits(a), _double_bits(b)
    return (ka > kb) - (ka < kb)


def _kind(v: object) -> str:
    t = type(v)
    if t is bool:
        return "B"
    if t is JavaLong:
        return "L"
    if t is int:
        return "I"
    if t is float:
        return "D"
    if t is str:
        return "S"
    raise _EvalError(f"unexpected value {v!r}")


def _same_compare(k: str, lv: object, rv: object) -> int:
    if k == "D":
        return _double_compare(lv, rv)  # type: ignore[arg-type]
    return int((lv > rv) - (lv < rv))  # type: ignore[operator]


def _java_compare(lv: object, rv: object) -> int:
    """``ComparisonExpression.__compare`` with convertStringExpressions (SelectorParser.parse sets it):
    values of different types are converted up (Integer -> Long -> Double; a String to the other side's
    type); pairs it has no rule for compare as -1."""
    lk, rk = _kind(lv), _kind(rv)
    if lk != rk:
        if lk == "B":
            if rk == "S":   # Java casts the Boolean to String here: ClassCastException
                raise _EvalError("ClassCastException: java.lang.Boolean cannot be cast to java.lang.String")
            return -1
        if lk == "I":
            if rk == "L":
                lk = "L"
            elif rk == "D":
                lv, lk = float(lv), "D"  # type: ignore[arg-type]
            elif rk == "S":
                rv = _java_int(rv, _INT_MIN, _INT_MAX)  # type: ignore[arg-type]
            else:
                return -1
        elif lk == "L":
            if rk == "I":
                pass
            elif rk == "D":
                lv, lk = float(lv), "D"  # type: ignore[arg-type]
            elif rk == "S":
                rv = _java_int(rv, _LONG_MIN, _LONG_MAX)  # type: ignore[arg-type]
            else:
                return -1
        elif lk == "D":
            if rk in ("I", "L"):
                rv = float(rv)  # type: ignore[arg-type]
            elif rk == "S":
                rv = _java_double(rv)  # type: ignore[arg-type]
            else:
                return -1
        else:   # String on the left
            if rk == "B":
                lv, lk = str(lv).lower() == "true", "B"
            elif rk == "I":
                lv, lk = _java_int(lv, _INT_MIN, _INT_MAX), "I"  # type: ignore[arg-type]
            elif rk == "L":
                lv, lk = _java_int(lv, _LONG_MIN, _LONG_MAX), "L"  # type: ignore[arg-type]
            elif rk == "D":
                lv, lk = _java_double(lv), "D"  # type: ignore[arg-type]
            else:
                return -1
    return _same_compare(lk, lv, rv)


def _render_constant(v: object) -> str:
    """``ConstantExpression.toString`` (strings quoted with '' escapes; a Long keeps an L so that it
    parses back as a Long)."""
    if v is None:
        return "NULL"
    if type(v) is bool:
        return "TRUE" if v else "FALSE"
    if type(v) is str:
        return "'" + v.replace("'", "''") + "'"
    if type(v) is JavaLong:
        return f"{int(v)}L"
    if type(v) is float:
        return repr(v).upper().replace("INF", "Infinity")
    return str(v)


# ------------------------------------------------------------------------------------- expression nodes
Props = Mapping[str, str]


class _Node:
    boolean = False       # a BooleanExpression
    constant = False      # a ConstantExpression
    prop = False          # a PropertyExpression

    def evaluate(self, props: Props) -> object:
        raise NotImplementedError

    def sql(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.sql()


class _Const(_Node):
    constant = True

    def __init__(self, value: object, boolean: bool = False) -> None:
        self.value = value
        self.boolean = boolean    # BooleanConstantExpression: TRUE, FALSE, NULL

    def evaluate(self, props: Props) -> object:
        return self.value

    def sql(self) -> str:
        return _render_constant(self.value)


class _Prop(_Node):
    prop = True

    def __init__(self, name: str) -> None:
        self.name = name

    def evaluate(self, props: Props) -> object:
        return props.get(self.name)

    def sql(self) -> str:
        return self.name


class _Negate(_Node):
    def __init__(self, right: _Node) -> None:
        self.right = right

    def evaluate(self, props: Props) -> object:
        v = self.right.evaluate(props)
        t = type(v)
        if t is int:   # Java int arithmetic wraps
            return ((-v + (1 << 31)) % (1 << 32)) - (1 << 31)  # type: ignore[operator]
        if t is JavaLong:
            return JavaLong(((-v + (1 << 63)) % (1 << 64)) - (1 << 63))  # type: ignore[operator]
        if t is float:
            return -v  # type: ignore[operator]
        return None    # null, or not a number

    def sql(self) -> str:
        return f"(-{self.right.sql()})"


class _Not(_Node):
    boolean = True

    def __init__(self, right: _Node) -> None:
        self.right = right

    def evaluate(self, props: Props) -> object:
        v = self.right.evaluate(props)
        if v is None:
            return None
        if type(v) is not bool:
            raise _EvalError(f"ClassCastException: {v!r} is not a Boolean")
        return not v

    def sql(self) -> str:
        return f"(NOT {self.right.sql()})"


class _BoolCast(_Node):
    """A property used as a condition: TRUE only for a Boolean value (never, for string properties)."""

    boolean = True

    def __init__(self, right: _Node) -> None:
        self.right = right

    def evaluate(self, props: Props) -> object:
        v = self.right.evaluate(props)
        if v is None:
            return None
        return v is True

    def sql(self) -> str:
        return self.right.sql()


class _Logic(_Node):
    boolean = True

    def __init__(self, op: str, left: _Node, right: _Node) -> None:
        self.op, self.left, self.right = op, left, right

    def evaluate(self, props: Props) -> object:
        lv = self.left.evaluate(props)
        if self.op == "OR":
            if lv is True:
                return True
            rv = self.right.evaluate(props)
            if rv is True:
                return True
        else:
            if lv is False:
                return False
            rv = self.right.evaluate(props)
            if rv is False:
                return False
        for v in (lv, rv):
            if v is not None and type(v) is not bool:
                raise _EvalError(f"ClassCastException: {v!r} is not a Boolean")
        if lv is None or rv is None:
            return None
        return self.op == "AND"

    def sql(self) -> str:
        return f"({self.left.sql()} {self.op} {self.right.sql()})"


class _Equal(_Node):
    """``doCreateEqual`` (``=``, and ``IS NULL`` with a NULL right side)."""

    boolean = True

    def __init__(self, left: _Node, right: _Node) -> None:
        self.left, self.right = left, right

    def evaluate(self, props: Props) -> object:
        lv = self.left.evaluate(props)
        rv = self.right.evaluate(props)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is None:
            return True
        return _java_compare(lv, rv) == 0

    def sql(self) -> str:
        if self.right.constant and self.right.value is None:  # type: ignore[attr-defined]
            return f"({self.left.sql()} IS NULL)"
        return f"({self.left.sql()} = {self.right.sql()})"


_ORDER: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0}


class _Order(_Node):
    boolean = True

    def __init__(self, op: str, left: _Node, right: _Node) -> None:
        self.op, self.left, self.right = op, left, right
        self.test = _ORDER[op]

    def evaluate(self, props: Props) -> object:
        lv = self.left.evaluate(props)
        if lv is None:
            return None
        rv = self.right.evaluate(props)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:   # "compare String is illegal": both as doubles
            lv, rv = _java_double(lv), _java_double(rv)
        return self.test(_java_compare(lv, rv))

    def sql(self) -> str:
        return f"({self.left.sql()} {self.op} {self.right.sql()})"


class _In(_Node):
    boolean = True

    def __init__(self, right: _Prop, items: list[str], negated: bool) -> None:
        self.right, self.items, self.negated = right, items, negated
        self.item_set = frozenset(items)

    def evaluate(self, props: Props) -> object:
        v = self.right.evaluate(props)
        if v is None or type(v) is not str:
            return None
        return (v in self.item_set) != self.negated

    def sql(self) -> str:
        items = ", ".join(_render_constant(i) for i in self.items)
        return f"({self.right.sql()} {'NOT IN' if self.negated else 'IN'} ({items}))"


# ------------------------------------------------------------------------------------- tokens
@dataclass(frozen=True)
class _Token:
    kind: str        # EOF, a keyword, DEC, FLOAT, STR, ID, or the operator itself
    text: str
    pos: int

    def describe(self) -> str:
        return "the end of the expression" if self.kind == "EOF" else repr(self.text)


_KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})
_SKIP = (re.compile(r"[ \t\n\r\f]"),
         re.compile(r"--[^\n\r]*(\r\n|\n|\r)"),
         re.compile(r"/\*[^*]*\*(\*|[^*/][^*]*\*)*/"))
_TOKENS = (("DEC", re.compile(r"0|[1-9][0-9]*[lL]?")),
           ("FLOAT", re.compile(r"[0-9]+\.[0-9]*(E[+-]?[0-9]+)?|\.[0-9]+(E[+-]?[0-9]+)?|[0-9]+E[+-]?[0-9]+",
                                re.I | re.ASCII)),
           ("STR", re.compile(r"'(''|[^'])*'", re.S)),
           ("ID", re.compile(r"[a-z_$][a-z0-9_$]*", re.I | re.ASCII)),
           ("OP", re.compile(r"<>|>=|<=|[=><(),+-]")))


class _Lexer:
    """``SelectorParserTokenManager``: longest match, the earlier definition on a tie; tokens are made
    on demand, so a lexical error after the selector's end is only seen if the parser looks there."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.buf: list[_Token] = []

    def _next(self) -> _Token:
        s, n = self.text, len(self.text)
        while True:
            if self.pos >= n:
                return _Token("EOF", "", n)
            best_kind, best_end = "", self.pos
            skip_end = self.pos
            for rx in _SKIP:
                m = rx.match(s, self.pos)
                if m is not None and m.end() > skip_end:
                    skip_end = m.end()
            for kind, rx in _TOKENS:
                m = rx.match(s, self.pos)
                if m is not None and m.end() > best_end:
                    best_kind, best_end = kind, m.end()
            if skip_end > best_end:
                self.pos = skip_end
                continue
            if not best_kind:
                raise FilterExpressionError(s, f"lexical error: unexpected character {s[self.pos]!r}", self.pos)
            text, start = s[self.pos:best_end], self.pos
            self.pos = best_end
            if best_kind == "ID" and text.upper() in _KEYWORDS:
                return _Token(text.upper(), text, start)
            return _Token(text if best_kind == "OP" else best_kind, text, start)

    def peek(self, k: int = 1) -> _Token:
        while len(self.buf) < k:
            self.buf.append(self._next())
        return self.buf[k - 1]

    def take(self) -> _Token:
        tok = self.peek()
        self.buf.pop(0)
        return tok


# ------------------------------------------------------------------------------------- parser
class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.lex = _Lexer(text)

    def error(self, message: str, tok: _Token | None) -> FilterExpressionError:
        return FilterExpressionError(self.text, message, None if tok is None else tok.pos)

    def expect(self, kind: str) -> _Token:
        tok = self.lex.take()
        if tok.kind != kind:
            what = {"STR": "a 'string' literal", "EOF": "the end"}.get(kind, repr(kind))
            raise self.error(f"expected {what}, found {tok.describe()}", tok)
        return tok

    def as_boolean(self, node: _Node, tok: _Token | None) -> _Node:
        if node.boolean:
            return node
        if node.prop:
            return _BoolCast(node)
        raise self.error(f"expression will not result in a boolean value: {node.sql()}", tok)

    def selector(self) -> _Node:
        first = self.lex.peek()
        return self.as_boolean(self.or_expr(), first)

    def or_expr(self) -> _Node:
        start = self.lex.peek()
        left = self.and_expr()
        while self.lex.peek().kind == "OR":
            self.lex.take()
            right_start = self.lex.peek()
            right = self.and_expr()
            left = _Logic("OR", self.as_boolean(left, start), self.as_boolean(right, right_start))
        return left

    def and_expr(self) -> _Node:
        start = self.lex.peek()
        left = self.equality()
        while self.lex.peek().kind == "AND":
            self.lex.take()
            right_start = self.lex.peek()
            right = self.equality()
            left = _Logic("AND", self.as_boolean(left, start), self.as_boolean(right, right_start))
        return left

    def equality(self) -> _Node:
        left = self.comparison()
        while True:
            tok = self.lex.peek()
            if tok.kind == "=":
                self.lex.take()
                left = self.create_equal(left, self.comparison(), tok)
            elif tok.kind == "<>":
                self.lex.take()
                left = _Not(self.create_equal(left, self.comparison(), tok))
            elif tok.kind == "IS":
                self.lex.take()
                if self.lex.peek().kind == "NULL":
                    self.lex.take()
                    left = _Equal(left, _Const(None, boolean=True))
                else:
                    self.expect("NOT")
                    self.expect("NULL")
                    left = _Not(_Equal(left, _Const(None, boolean=True)))
            else:
                return left

    def comparison(self) -> _Node:
        left = self.unary()
        while True:
            tok = self.lex.peek()
            k = tok.kind
            if k in _ORDER:
                self.lex.take()
                left = self.create_order(k, left, self.unary(), tok)
            elif k == "BETWEEN":
                self.lex.take()
                low = self.unary()
                self.expect("AND")
                left = self.create_between(left, low, self.unary(), tok)
            elif k == "IN":
                self.lex.take()
                left = self.create_in(left, self.string_list(), False, tok)
            elif k == "NOT":
                nxt = self.lex.peek(2).kind
                if nxt == "BETWEEN":
                    self.lex.take()
                    self.lex.take()
                    low = self.unary()
                    self.expect("AND")
                    high = self.unary()
                    left = _Logic("OR", self.create_order("<", left, low, tok), self.create_order(">", left, high, tok))
                elif nxt == "IN":
                    self.lex.take()
                    self.lex.take()
                    left = self.create_in(left, self.string_list(), True, tok)
                else:
                    raise self.error(f"expected BETWEEN or IN after NOT, found {self.lex.peek(2).describe()}",
                                     self.lex.peek(2))
            else:
                return left

    def string_list(self) -> list[str]:
        self.expect("(")
        items = [_string_value(self.expect("STR").text)]
        while self.lex.peek().kind == ",":
            self.lex.take()
            items.append(_string_value(self.expect("STR").text))
        self.expect(")")
        return items

    def unary(self) -> _Node:
        tok = self.lex.peek()
        if tok.kind == "+":
            self.lex.take()
            return self.unary()
        if tok.kind == "-":
            self.lex.take()
            return _Negate(self.unary())
        if tok.kind == "NOT":
            self.lex.take()
            nxt = self.lex.peek()
            return _Not(self.as_boolean(self.unary(), nxt))
        return self.primary()

    def primary(self) -> _Node:
        tok = self.lex.take()
        k = tok.kind
        if k == "STR":
            return _Const(_string_value(tok.text))
        if k == "DEC":
            return self.decimal(tok)
        if k == "FLOAT":
            return self.floating(tok)
        if k in ("TRUE", "FALSE", "NULL"):
            return _Const({"TRUE": True, "FALSE": False, "NULL": None}[k], boolean=True)
        if k == "ID":
            return _Prop(tok.text)
        if k == "(":
            inner = self.or_expr()
            self.expect(")")
            return inner
        raise self.error(f"expected a literal, a property or '(', found {tok.describe()}", tok)

    def decimal(self, tok: _Token) -> _Const:
        """``ConstantExpression.createFromDecimal``: Integer when it fits, else Long; beyond: refused."""
        v = int(tok.text.rstrip("lL"))
        if v > _LONG_MAX:
            raise self.error(f"number {tok.text} is out of the long range", tok)
        return _Const(v if v <= _INT_MAX else JavaLong(v))

    def floating(self, tok: _Token) -> _Const:
        """``ConstantExpression.createFloat``: a Double in [Double.MIN_VALUE, Double.MAX_VALUE]."""
        v = float(tok.text)
        if v > _DOUBLE_MAX_VALUE:
            raise self.error(f"{tok.text} is greater than {_DOUBLE_MAX_VALUE!r}", tok)
        if v < _DOUBLE_MIN_VALUE:
            raise self.error(f"{tok.text} is less than 4.9E-324 (Double.MIN_VALUE; RocketMQ refuses 0.0)", tok)
        return _Const(v)

    # --- the checks of ComparisonExpression's factories
    def create_equal(self, left: _Node, right: _Node, tok: _Token) -> _Node:
        for side in (left, right):
            if side.constant and side.value is None:  # type: ignore[attr-defined]
                raise self.error("'NULL' cannot be compared (use IS NULL)", tok)
        if left.constant and right.constant and left.boolean and not right.boolean:
            raise self.error(f"'{left.sql()}' cannot be compared with '{right.sql()}'", tok)
        return _Equal(left, right)

    def create_order(self, op: str, left: _Node, right: _Node, tok: _Token) -> _Node:
        for side in (left, right):
            if side.constant:
                v = side.value  # type: ignore[attr-defined]
                if type(v) in (int, JavaLong, float):
                    continue
                raise self.error(f"value '{side.sql()}' cannot be compared with {op}", tok)
            if side.boolean:
                raise self.error(f"value '{side.sql()}' cannot be compared with {op}", tok)
        return _Order(op, left, right)

    def create_between(self, value: _Node, low: _Node, high: _Node, tok: _Token) -> _Node:
        if low.constant and high.constant:
            lv, hv = low.value, high.value  # type: ignore[attr-defined]
            if lv is None or hv is None:
                raise self.error("illegal values of BETWEEN: values can not be NULL", tok)
            try:
                reversed_ = _java_compare(hv, lv) < 0
            except _EvalError as exc:
                raise self.error(f"illegal values of BETWEEN: {exc}", tok) from None
            if reversed_:
                raise self.error(f"illegal values of BETWEEN: left value ({low.sql()}) must be less than or equal "
                                 f"to right value ({high.sql()})", tok)
        return _Logic("AND", self.create_order(">=", value, low, tok), self.create_order("<=", value, high, tok))

    def create_in(self, left: _Node, items: list[str], negated: bool, tok: _Token) -> _Node:
        if not isinstance(left, _Prop):
            raise self.error(f"expected a property for IN, got {left.sql()}", tok)
        return _In(left, items, negated)


def _string_value(image: str) -> str:
    return image[1:-1].replace("''", "'")


# ------------------------------------------------------------------------------------- public API
@dataclass(frozen=True)
class SqlFilter:
    """A compiled SQL92 filter: :meth:`matches` on a message's properties."""

    expression: str
    root: _Node

    def evaluate(self, properties: Props) -> bool | None:
        """The expression's value: True, False or None (unknown); a Java evaluation error gives None."""
        try:
            v = self.root.evaluate(properties)
        except _EvalError:
            return None
        return v if type(v) is bool else None

    def matches(self, properties: Props) -> bool:
        """``isMatchedByCommitLog``: True only when the expression evaluates to TRUE."""
        try:
            return self.root.evaluate(properties) is True
        except _EvalError:
            return False

    def sql(self) -> str:
        """The parsed expression, fully parenthesised; it compiles back to the same expression."""
        return self.root.sql()


@functools.lru_cache(maxsize=256)
def compile_sql92(expression: str) -> SqlFilter:
    """``SelectorParser.parse`` (cached, as RocketMQ caches parses): a :class:`SqlFilter`, or
    FilterExpressionError naming the expression and the character position at fault."""
    if not isinstance(expression, str):
        raise FilterExpressionError(repr(expression), "the expression is not a string")
    parser = _Parser(expression)
    return SqlFilter(expression, parser.selector())


_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")


def record_properties(raw: bytes | memoryview, *, offset: int | None = None) -> dict[str, str]:
    """The properties of one stored record (``MessageDecoder.decodeProperties``: only the lengths before
    them are read, nothing else is decoded). CorruptStoreError (with ``offset``, the record's commit-log
    offset when known) when the lengths run past the record."""
    n = len(raw)
    try:
        magic = _I32.unpack_from(raw, POS_MAGIC)[0]
        sys_flag = _I32.unpack_from(raw, POS_SYS_FLAG)[0]
        pos = POS_BORN_HOST + (20 if sys_flag & FLAG_BORNHOST_V6 else 8) + 8   # + STORETIMESTAMP
        pos += (20 if sys_flag & FLAG_STOREHOST_V6 else 8) + 4 + 8              # + RECONSUMETIMES, PREPARED
        pos += 4 + _I32.unpack_from(raw, pos)[0]                                 # BODY
        if magic == MAGIC_V2:
            pos += 2 + _U16.unpack_from(raw, pos)[0]                             # TOPIC
        else:
            pos += 1 + raw[pos]
        plen = _U16.unpack_from(raw, pos)[0]
        pos += 2
    except (struct.error, IndexError):
        raise CorruptStoreError("record header runs past the record", offset=offset) from None
    if pos + plen > n:
        raise CorruptStoreError(f"properties ({plen} bytes at {pos}) run past the record ({n} bytes)",
                                offset=offset)
    return decode_properties(raw[pos:pos + plen]) if plen else {}
