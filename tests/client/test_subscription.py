"""Tag subscription expressions (FilterAPI.buildSubscriptionData) and the two-stage tag filter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstream.client._java import java_trim
from rocketstream.client.subscription import SubscriptionData
from rocketstream.errors import OptionError


@pytest.mark.parametrize("expr", [None, "", "*"])
def test_null_empty_and_star_subscribe_to_all(expr):
    sub = SubscriptionData.parse(expr)
    assert sub.sub_all and sub.tags == frozenset() and sub.codes == frozenset() and sub.sub_string == "*"
    assert not sub.is_empty


def test_spec_example_tags_and_java_hash_codes():
    sub = SubscriptionData.parse("TagA || TagB")
    assert not sub.sub_all
    assert sub.tags == {"TagA", "TagB"} and sub.codes == {2598919, 2598920}


def test_star_inside_a_list_is_a_tag_not_all():
    sub = SubscriptionData.parse("TagA||*")
    assert not sub.sub_all and sub.tags == {"TagA", "*"} and 42 in sub.codes


def test_padded_star_is_a_tag_not_all():
    # Only exactly "*" means all; " * " is split, trimmed, and subscribes to the tag "*".
    sub = SubscriptionData.parse(" * ")
    assert not sub.sub_all and sub.tags == {"*"}


@pytest.mark.parametrize(
    "expr,tags",
    [
        ("a||||b", {"a", "b"}),           # empty piece between separators dropped
        ("a||", {"a"}),                   # trailing separator
        ("||a", {"a"}),                   # leading separator
        ("a|||b", {"a", "|b"}),           # split is on the literal "||", leftmost first
        ("a|b", {"a|b"}),                 # a single bar is part of the tag
        (" Tag A ||Tag\tB", {"Tag A", "Tag\tB"}),  # whitespace inside a tag is kept
        ("\x01a\x1f||b\x00", {"a", "b"}),  # Java trim strips every char <= U+0020
        ("\u00a0a\u00a0", {"\u00a0a\u00a0"}),  # ... but not Unicode whitespace
        ("a||a", {"a"}),
    ],
)
def test_split_trim_and_drop_empty_pieces(expr, tags):
    assert SubscriptionData.parse(expr).tags == tags


@pytest.mark.parametrize("expr", ["||", "||||", " || ", "\t"])
def test_expression_of_only_separators_and_blanks_is_empty(expr):
    sub = SubscriptionData.parse(expr)
    assert sub.is_empty and not sub.sub_all
    assert not sub.tags and not sub.codes
    with pytest.raises(OptionError, match="subExpression"):
        SubscriptionData.parse_option(expr)


def test_parse_option_names_the_option_given():
    with pytest.raises(OptionError, match="'tagFilter'"):
        SubscriptionData.parse_option("||", option="tagFilter")
    assert SubscriptionData.parse_option("TagA").tags == {"TagA"}


def test_codes_are_java_hashes_of_the_tags():
    assert SubscriptionData.parse("TagA").codes == {2598919}
    # "Aa" and "BB" share a Java hash: the CQ stage cannot tell them apart.
    assert SubscriptionData.parse("Aa").codes == SubscriptionData.parse("BB").codes
    assert SubscriptionData.parse("polygenelubricants").codes == {-(1 << 31)}  # Integer.MIN_VALUE
    assert SubscriptionData.parse("*").codes == frozenset() and SubscriptionData.parse("*").sub_all


@given(st.lists(st.text(min_size=1, max_size=6).filter(lambda t: "||" not in t), min_size=1, max_size=5))
def test_joined_tags_parse_back_to_their_trimmed_set(tags):
    expr = "||".join(tags)
    expected = {java_trim(t) for t in tags} - {""}
    if expr == "*":
        return
    sub = SubscriptionData.parse(expr)
    # a tag ending in "|" next to a separator shifts the split point; only check clean joins
    if any(t.endswith("|") or t.startswith("|") for t in tags):
        return
    assert sub.tags == expected
