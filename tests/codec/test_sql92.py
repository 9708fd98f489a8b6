"""rocketstream.codec.sql92: RocketMQ 4.9.8's SelectorParser grammar, its parse-time checks and the
evaluator's semantics (the real broker agrees on these: tests/client/test_sql92_brokers.py asks it)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstream.codec.record import decode_record, encode_record
from rocketstream.codec.sql92 import JavaLong, compile_sql92, is_tag_type, record_properties
from rocketstream.errors import CorruptStoreError, FilterExpressionError

# --- parsing ---------------------------------------------------------------------------------------------
ACCEPTED = [
    ("a = 1", "(a = 1)"),
    ("a=1 AND b='x' OR c <> 2", "(((a = 1) AND (b = 'x')) OR (NOT (c = 2)))"),
    ("a = 1 OR b = 2 AND c = 3", "((a = 1) OR ((b = 2) AND (c = 3)))"),      # AND binds tighter
    ("a BETWEEN 1 AND 5", "((a >= 1) AND (a <= 5))"),
    ("a NOT BETWEEN -1 AND 2L", "((a < (-1)) OR (a > 2))"),                   # 2L fits an int: Integer
    ("a IN ('x', 'it''s')", "(a IN ('x', 'it''s'))"),
    ("a not in ('x')", "(a NOT IN ('x'))"),                                  # keywords in any case
    ("a IS NULL", "(a IS NULL)"),
    ("a IS NOT NULL", "(NOT (a IS NULL))"),
    ("NOT a = 1", "((NOT a) = 1)"),                                          # NOT binds tighter than =
    ("NOT (a = 1)", "(NOT (a = 1))"),
    ("TRUE", "TRUE"),
    ("NULL", "NULL"),
    ("a", "a"),                                                              # a property as a condition
    ("a = 1 b = 2", "(a = 1)"),                                              # the rest is never read
    ("a = 1 ) ( #", "(a = 1)"),
    ("a > 3000000000", "(a > 3000000000L)"),                                 # beyond an int: a Long
    ("a > .5 AND b < 5. AND c >= 1e3 AND d <= 2.5E-3", None),
    ("a = 1 -- a comment\n", "(a = 1)"),
    ("/* c */ a /* d */ = 1", "(a = 1)"),
    ("$x_1 = +1", "($x_1 = 1)"),
    ("a = - -1", "(a = (-(-1)))"),
    ("1 = TRUE", "(1 = TRUE)"),                                               # only TRUE = <non-boolean> is refused
    ("(a = 1)", "(a = 1)"),
    ("a CONTAINS 'x'", "a"),            # no CONTAINS in 4.9.8: the property alone, then the parse stops
]


@pytest.mark.parametrize("text, rendered", ACCEPTED)
def test_accepted_expressions_parse_as_rocketmq_groups_them(text: str, rendered: str | None) -> None:
    f = compile_sql92(text)
    if rendered is not None:
        assert f.sql() == rendered
    assert compile_sql92(f.sql()).sql() == f.sql()


REFUSED = [
    ("", 0, "expected a literal"),
    ("a = NULL", 2, "'NULL' cannot be compared"),
    ("NULL = a", 5, "'NULL' cannot be compared"),
    ("TRUE = 1", 5, "cannot be compared with"),
    ("a > 'x'", 2, "cannot be compared"),
    ("a > TRUE", 2, "cannot be compared"),
    ("(a = 1) > 2", 8, "cannot be compared"),
    ("a BETWEEN 5 AND 1", 2, "must be less than or equal"),
    ("a BETWEEN NULL AND 1", 2, "can not be NULL"),
    ("a > 0.0", 4, "Double.MIN_VALUE"),                       # RocketMQ refuses 0.0 (createFloat)
    ("a > 9223372036854775808", 4, "long range"),
    ("'x' IN ('a')", 4, "expected a property for IN"),
    ("a IN ()", 6, "'string' literal"),
    ("a IN (1)", 6, "'string' literal"),
    ("a IS 1", 5, "'NOT'"),
    ("a NOT LIKE 'x'", 6, "BETWEEN or IN"),
    ("a ! 1", 2, "lexical error"),
    ("a = 'open", 4, "lexical error"),
    ("a = 1 AND", 9, "expected a literal"),
    ("a = --1\n", 8, "expected a literal"),                  # "--" up to a newline is a comment
    ("(a = 1", 6, "expected ')'"),
    ("'abc'", 0, "will not result in a boolean"),
    ("1 + 2", 0, "will not result in a boolean"),
    ("-a", 0, "will not result in a boolean"),
    ("a = 1 AND 'x'", 10, "will not result in a boolean"),
    ("a = 1 #", 6, "lexical error"),                         # the token after the selector is read
]


@pytest.mark.parametrize("text, position, message", REFUSED)
def test_refused_expressions_name_the_position(text: str, position: int, message: str) -> None:
    with pytest.raises(FilterExpressionError) as info:
        compile_sql92(text)
    assert info.value.expression == text
    assert info.value.position == position
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_contains_startswith_endswith_are_not_operators_of_4_9_8() -> None:
    # they came with RocketMQ 5.x; in 4.9.8 the parse stops before them and what precedes is the selector
    assert compile_sql92("a = 'x' CONTAINS 'y'").sql() == "(a = 'x')"
    assert compile_sql92("a STARTSWITH 'x'").matches({"a": "xy"}) is False
    with pytest.raises(FilterExpressionError, match="will not result in a boolean"):
        compile_sql92("'x' ENDSWITH 'y'")


def test_is_tag_type() -> None:
    assert is_tag_type(None) and is_tag_type("") and is_tag_type("TAG")
    assert not is_tag_type("SQL92") and not is_tag_type("tag")   # ExpressionType.isTagType is case-sensitive


# --- evaluation -------------------------------------------------------------------------------------------
EVALUATED = [
    # (expression, properties, expected value: True / False / None = unknown or a Java evaluation error)
    ("a = 1", {"a": "1"}, True),
    ("a = 1", {"a": "01"}, True),            # Integer.valueOf("01")
    ("a = 1", {"a": "+1"}, True),
    ("a = 1", {"a": " 1"}, None),            # Integer.valueOf does not trim: NumberFormatException
    ("a = 1", {"a": "1.0"}, None),
    ("a = 1", {}, None),                     # a missing property is NULL
    ("a = 1.0", {"a": "1"}, True),           # Double.valueOf
    ("a = 1.0", {"a": " 1 "}, True),         # Double.valueOf trims
    ("a = 1.5", {"a": "1.5f"}, True),        # and takes a float suffix
    ("a > 5", {"a": "6"}, True),
    ("a > 5", {"a": "5.5"}, None),           # Integer.valueOf("5.5") fails: the message does not match
    ("a > 5.0", {"a": "5.5"}, True),
    ("a > 2147483647", {"a": "2147483648"}, None),   # beyond an int
    ("a > 2147483648", {"a": "2147483649"}, True),   # the Long literal converts with Long.valueOf
    ("a > b", {"a": "10", "b": "9"}, True),  # two strings compare as doubles
    ("a > b", {"a": "x", "b": "9"}, None),
    ("a = b", {"a": "x", "b": "x"}, True),
    ("a = b", {}, True),                     # both missing: null == null (RocketMQ's doCreateEqual)
    ("a <> 1", {}, None),
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'x'", {"a": "X"}, False),
    ("a <> 'x'", {"a": "y"}, True),
    ("a = TRUE", {"a": "true"}, True),       # Boolean.valueOf, case-insensitive
    ("a = TRUE", {"a": "yes"}, False),
    ("TRUE = a", {"a": "true"}, None),       # RocketMQ casts the Boolean to String: ClassCastException
    ("a", {"a": "true"}, False),             # a property as a condition is never TRUE (values are strings)
    ("a", {}, None),
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": "1"}, False),
    ("a IS NOT NULL", {"a": "1"}, True),
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a IN ('x', 'y')", {"a": "z"}, False),
    ("a NOT IN ('x', 'y')", {"a": "z"}, True),
    ("a NOT IN ('x')", {}, None),
    ("a BETWEEN 1 AND 3", {"a": "3"}, True),
    ("a BETWEEN 1 AND 3", {"a": "4"}, False),
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
    ("a = 1 OR b = 2", {"b": "2"}, True),    # NULL OR TRUE
    ("a = 1 OR b = 2", {"b": "3"}, None),    # NULL OR FALSE
    ("a = 1 AND b = 2", {"b": "3"}, False),  # NULL AND FALSE
    ("a = 1 AND b = 2", {"b": "2"}, None),
    ("a = 1 OR b = 2", {"a": "1", "b": "x"}, True),   # short circuit: the right side is not evaluated
    ("a = 1 OR b = 2", {"a": "x", "b": "2"}, None),   # the left side's error ends the evaluation
    ("NOT (a = 1)", {}, None),
    ("NOT a = 1", {"a": "1"}, False),        # (NOT a) = 1: Boolean vs Integer compares as -1
    ("-a = 1", {"a": "-1"}, None),           # negating a string is NULL
    ("a = -1", {"a": "-1"}, True),
    ("a > -2147483648", {"a": "0"}, True),   # -(2147483648L): a Long
    ("TAGS = 'TagA'", {"TAGS": "TagA"}, True),
    ("a = 1 = TRUE", {"a": "1"}, True),      # (a = 1) = TRUE
    ("a = 'NaN' OR a > 1.5", {"a": "NaN"}, True),     # Double.compare: NaN above everything
    ("a = 0.5", {"a": "0x1p-1"}, True),      # a hexadecimal double
    ("a = 1", {"a": "١"}, True),             # Integer.valueOf takes Unicode digits
    ("a = 1.0", {"a": "١.0"}, None),         # Double.valueOf does not
    ("NULL", {}, None),
    ("FALSE OR TRUE", {}, True),
]


@pytest.mark.parametrize("text, props, expected", EVALUATED)
def test_evaluation_follows_rocketmqs_evaluator(text: str, props: dict[str, str], expected: bool | None) -> None:
    f = compile_sql92(text)
    assert f.evaluate(props) is expected
    assert f.matches(props) is (expected is True)


def test_constant_types_are_java_integer_long_and_double() -> None:
    assert type(compile_sql92("a = 5").root.right.value) is int            # type: ignore[attr-defined]
    assert type(compile_sql92("a = 5000000000").root.right.value) is JavaLong  # type: ignore[attr-defined]
    assert type(compile_sql92("a = 5.0").root.right.value) is float        # type: ignore[attr-defined]


# --- hypothesis: generated expressions render, parse back to the same tree and evaluate the same -----------
NAMES = st.sampled_from(["a", "b", "TAGS", "x_1"])
VALUES = st.sampled_from(["1", "2", "-3", "1.5", "x", "true", "NaN", " 2", "2147483648", "y'z"])
PROPS = st.dictionaries(NAMES, VALUES, max_size=4)
NUMBER = st.one_of(st.integers(-(2**40), 2**40).map(str),
                   st.floats(1e-300, 1e300, allow_nan=False).map(repr))
STRING = st.text(alphabet="ab' %_", max_size=4).map(lambda s: "'" + s.replace("'", "''") + "'")


def _operand() -> st.SearchStrategy[str]:
    return st.one_of(NAMES, NUMBER)


def _leaf() -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(lambda a, op, b: f"{a} {op} {b}", _operand(), st.sampled_from(["=", "<>", ">", ">=", "<", "<="]),
                  _operand()),
        st.builds(lambda a, s: f"{a} = {s}", NAMES, STRING),
        st.builds(lambda a, n, items: f"{a} {'NOT ' if n else ''}IN ({', '.join(items)})", NAMES, st.booleans(),
                  st.lists(STRING, min_size=1, max_size=3)),
        st.builds(lambda a, n: f"{a} IS {'NOT ' if n else ''}NULL", NAMES, st.booleans()),
        st.sampled_from(["TRUE", "FALSE"]),
    )


CONDITIONS = st.recursive(_leaf(), lambda inner: st.one_of(
    st.builds(lambda a, op, b: f"({a}) {op} ({b})", inner, st.sampled_from(["AND", "OR", "and", "Or"]), inner),
    st.builds(lambda a: f"NOT ({a})", inner)), max_leaves=6)


@settings(max_examples=150, deadline=None)
@given(CONDITIONS, PROPS)
def test_rendered_expressions_parse_back_to_the_same_filter(text: str, props: dict[str, str]) -> None:
    f = compile_sql92(text)
    again = compile_sql92(f.sql())
    assert again.sql() == f.sql()
    assert again.evaluate(props) is f.evaluate(props)
    assert f.evaluate(props) in (True, False, None)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_any_text_either_compiles_or_raises_the_typed_error(text: str) -> None:
    try:
        f = compile_sql92(text)
    except FilterExpressionError as exc:
        assert exc.expression == text
        assert exc.position is None or 0 <= exc.position <= len(text)
    else:
        assert f.evaluate({}) in (True, False, None)


# --- the properties of a stored record ------------------------------------------------------------------------
@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize("topic", ["T", "T" * 200])   # MAGIC_V1 (1-byte topic length) and V2 (2 bytes)
def test_record_properties_reads_only_the_properties(topic: str, v6: bool) -> None:
    host = ("::1", 10911) if v6 else ("127.0.0.1", 10911)
    props = {"a": "1", "TAGS": "TagA", "UNIQ_KEY": "K"}
    raw = encode_record(topic=topic, queue_id=0, body=b"x" * 50, properties=props, queue_offset=3,
                        physical_offset=100, sys_flag=0, born_timestamp=1, born_host=host, store_timestamp=2,
                        store_host=host)
    assert record_properties(raw) == props == decode_record(raw).properties
    empty = encode_record(topic=topic, queue_id=0, body=b"", properties={}, queue_offset=0, physical_offset=0,
                          sys_flag=0, born_timestamp=1, born_host=host, store_timestamp=2, store_host=host)
    assert record_properties(empty) == {}
    with pytest.raises(CorruptStoreError, match="run past") as info:
        record_properties(raw[:-3], offset=100)
    assert info.value.offset == 100
    with pytest.raises(CorruptStoreError):
        record_properties(raw[:30])
