"""Tag subscription expressions (spec 9.1) and the two-stage tag filter."""

from __future__ import annotations

import numpy as np
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
    assert not sub.matches(0) and not sub.matches(2598919)
    with pytest.raises(OptionError, match="subExpression"):
        SubscriptionData.parse_option(expr)


def test_parse_option_names_the_option_given():
    with pytest.raises(OptionError, match="'tagFilter'"):
        SubscriptionData.parse_option("||", option="tagFilter")
    assert SubscriptionData.parse_option("TagA").tags == {"TagA"}


def test_broker_stage_matches_by_code_and_lets_unknown_and_collisions_through():
    sub = SubscriptionData.parse("TagA")
    assert sub.matches(2598919)
    assert not sub.matches(2598920)
    assert sub.matches(None)  # tagsCode unknown (ext lookup failed)
    # "Aa" and "BB" share a Java hash: the CQ stage cannot tell them apart.
    assert SubscriptionData.parse("Aa").matches(SubscriptionData.parse("BB").codes.__iter__().__next__())


def test_broker_stage_casts_int64_tags_code_to_int_like_java():
    sub = SubscriptionData.parse("TagA")
    assert sub.matches(2598919 + (1 << 32))  # only the low 32 bits count
    neg = SubscriptionData.parse("polygenelubricants")  # Java hash is Integer.MIN_VALUE
    (code,) = neg.codes
    assert code == -(1 << 31) and neg.matches(code & 0xFFFFFFFF)


def test_all_matches_every_code():
    assert SubscriptionData.parse("*").matches(123456789) and SubscriptionData.parse("*").matches_tag(None)


def test_client_stage_exact_string_and_no_tags_dropped():
    sub = SubscriptionData.parse("TagA || TagB")
    assert sub.matches_tag("TagA") and sub.matches_tag("TagB")
    assert not sub.matches_tag("BB") and not sub.matches_tag("taga") and not sub.matches_tag(" TagA")
    assert not sub.matches_tag(None)  # messages without TAGS are dropped by a tag subscription


def test_code_mask_is_vectorised_matches():
    sub = SubscriptionData.parse("TagA || polygenelubricants")
    codes = np.array([2598919, 2598920, 0, 2598919 + (1 << 32), -1 << 40], dtype=np.int64)
    assert sub.code_mask(codes).tolist() == [sub.matches(int(c)) for c in codes]
    assert SubscriptionData.parse("*").code_mask(codes).all()
    assert not SubscriptionData.parse("||").code_mask(codes).any()


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
    assert all(sub.matches_tag(t) for t in expected)
