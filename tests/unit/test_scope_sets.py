"""Scope sets: the sort order, normalizing, merging, union and intersection.

Every case of ``taskcluster-lib-scopes``' ``test/normalize_test.js`` and ``test/sets_test.js``,
under their titles. Upstream shuffles its inputs 50 times per case; here a seeded shuffle does
the same, and since these functions accept any order, merging and union are also fed shuffled.
"""

from __future__ import annotations

import itertools
import random

import pytest

from coordinator.domain.scopes import (
    HeldScopes,
    merge_scope_sets,
    normalize_scope_set,
    scope_compare,
    scope_intersection,
    scope_union,
)

SHUFFLES = 50

TOTAL_ORDERS = {
    "simple example of total order": ["abc*", "abc", "abc%d"],
    "stars": [
        *("*", "", "**", "***", "****"),
        *("aaa*", "aaa", "aaa**", "aaa***", "aaa****", "aaa*****"),
    ],
    "all character combos": [
        *("x*", "x"),
        *("x%*", "x%", "x%%", "x%a"),
        *("x**", "x*%", "x*a"),
        *("xa*", "xa", "xa%", "xaa"),
    ],
}


@pytest.mark.parametrize("scopes", TOTAL_ORDERS.values(), ids=TOTAL_ORDERS.keys())
def test_scope_comparing(scopes: list[str]) -> None:
    for (i, a), (j, b) in itertools.permutations(enumerate(scopes), 2):
        assert (scope_compare(a) < scope_compare(b)) == (i < j), f"{a!r} vs {b!r}"


SORTED_ROLE_IDS = [
    *("*", "a*", "a", "aa", "aaa", "aab", "ab", "abb*", "abb", "abbc", "ca"),
    *("caa", "cab*", "cab", "cc*"),
]

SORTS = {
    "sort scopes test-12,test-2,...": (
        [
            *("test-12", "test-2", "test-11", "test-1", "test-1*"),
            *("test-13", "test-3", "test-10", "test-*"),
        ],
        [
            *("test-*", "test-1*", "test-1", "test-10", "test-11"),
            *("test-12", "test-13", "test-2", "test-3"),
        ],
    ),
    "sort scopes test*a,test*b,test*,test,testb": (
        ["test*a", "test*b", "test*", "test", "testb"],
        ["test*", "test", "test*a", "test*b", "testb"],
    ),
    "sort scopes abc,abc*,abc*d,ab,abcd": (
        ["abc", "abc*", "abc*d", "ab", "abcd"],
        ["ab", "abc*", "abc", "abc*d", "abcd"],
    ),
    "sort scopes (,*,": (["(", "*", ""], ["*", "", "("]),
    "sort scopes ab(,ab*,aa": (["ab(", "ab*", "aa"], ["aa", "ab*", "ab("]),
    "big list": (SORTED_ROLE_IDS, SORTED_ROLE_IDS),
}


@pytest.mark.parametrize(("scopes", "expected"), SORTS.values(), ids=SORTS.keys())
def test_scope_sorting(scopes: list[str], expected: list[str]) -> None:
    shuffler = random.Random(0)
    scopes = list(scopes)
    for _ in range(SHUFFLES):
        shuffler.shuffle(scopes)
        assert sorted(scopes, key=scope_compare) == expected


NORMALIZE = {
    "empty set": ([], ()),
    "already normalized": (["a*", "b*"], ("a*", "b*")),
    "not normalized": (["abc", "abx*", "ab*", "b", "b*"], ("ab*", "b*")),
    "not normalized, contains duplicates": (
        ["abc", "abx*", "ab*", "b", "b*", "abc*"],
        ("ab*", "b*"),
    ),
    "not normalized, contains lots of duplicates": (
        ["abc", "abx*", "ab*", "b", "b*", "abc*", "b*", "b*", "b*", "b*"],
        ("ab*", "b*"),
    ),
}


@pytest.mark.parametrize(("scopes", "expected"), NORMALIZE.values(), ids=NORMALIZE.keys())
def test_normalize_scope_set(scopes: list[str], expected: tuple[str, ...]) -> None:
    assert normalize_scope_set(sorted(scopes, key=scope_compare)) == expected
    assert normalize_scope_set(reversed(scopes)) == expected  # needs no sorting first


def test_normalize_scope_set_matches_its_definition_on_random_sets() -> None:
    """Normalized: sorted, and no scope of the set grants another (a property test over a small
    alphabet where ``*`` appears anywhere, so ``a*b`` and ``a**`` are exercised)."""
    generator = random.Random(1)
    alphabet = "ab*"
    for _ in range(500):
        scopes = [
            "".join(generator.choice(alphabet) for _ in range(generator.randint(0, 4)))
            for _ in range(generator.randint(0, 8))
        ]
        normalized = normalize_scope_set(scopes)
        assert list(normalized) == sorted(set(normalized), key=scope_compare)
        for scope in normalized:
            assert not HeldScopes(s for s in normalized if s != scope).grants(scope), scopes
        held = HeldScopes(normalized)
        assert all(held.grants(scope) for scope in scopes), scopes


MERGES = [
    ("simple sort", ["a", "b", "c"], [], ("a", "b", "c")),
    ("simple sort w. star", ["a*", "b", "c"], [], ("a*", "b", "c")),
    (
        "complex sort",
        [*(f"assume:tr-{i}" for i in (0, 1, 10, 2, 3, 4, 5, 6, 7, 8, 9)), "special-scope"],
        [],
        (*(f"assume:tr-{i}" for i in (0, 1, 10, 2, 3, 4, 5, 6, 7, 8, 9)), "special-scope"),
    ),
    ("can normalize", ["b*", "ab", "aa", "a", "a*"], [], ("a*", "b*")),
    ("can normalize (no a)", ["b*", "ab", "aa", "a*"], [], ("a*", "b*")),
    (
        "sanity check (1)",
        ["assume:tr-10", "assume:tr-9", "special-scope"],
        [],
        ("assume:tr-10", "assume:tr-9", "special-scope"),
    ),
    (
        "sanity check (2)",
        [],
        ["assume:tr-10", "assume:tr-9", "special-scope"],
        ("assume:tr-10", "assume:tr-9", "special-scope"),
    ),
    (
        "can normalize two",
        ["b*", "ab", "aa", "a*", "c", "ca", "da*"],
        ["b*", "ab", "aa", "a*", "abc", "ab*", "ca", "daa"],
        ("a*", "b*", "c", "ca", "da*"),
    ),
]


@pytest.mark.parametrize(
    ("scopes_a", "scopes_b", "expected"), [m[1:] for m in MERGES], ids=[m[0] for m in MERGES]
)
def test_merge_scope_sets(
    scopes_a: list[str], scopes_b: list[str], expected: tuple[str, ...]
) -> None:
    assert (
        merge_scope_sets(sorted(scopes_a, key=scope_compare), sorted(scopes_b, key=scope_compare))
        == expected
    )
    shuffler = random.Random(2)
    scopes_a, scopes_b = list(scopes_a), list(scopes_b)
    for _ in range(SHUFFLES):
        shuffler.shuffle(scopes_a)
        shuffler.shuffle(scopes_b)
        assert merge_scope_sets(scopes_a, scopes_b) == expected


UNIONS = {
    "same, normalized scopeset": (
        ["abc", "d*", "xyzb*"],
        ["abc", "d*", "xyzb*"],
        ["abc", "d*", "xyzb*"],
    ),
    "same, non-normalized scopeset": (
        ["abc", "a*", "d*", "xyzb*"],
        ["abc", "a*", "d*", "xyzb*"],
        ["a*", "d*", "xyzb*"],
    ),
    "non-overlapping scopesets": (["a*"], ["b*"], ["a*", "b*"]),
    "overlapping scopesets": (["a*"], ["abc", "d"], ["a*", "d"]),
    "two non-overlapping, non-normalized scopesets": (
        ["a", "a*", "abc", "abc*"],
        ["def", "d*", "defg*"],
        ["a*", "d*"],
    ),
}


@pytest.mark.parametrize(("first", "second", "expected"), UNIONS.values(), ids=UNIONS.keys())
def test_scope_union(first: list[str], second: list[str], expected: list[str]) -> None:
    assert scope_union(first, second) == tuple(expected)
    assert scope_union(second, first) == tuple(expected)


INTERSECTIONS = [
    ("single exact match, [string]", ["foo:bar"], ["foo:bar"], ["foo:bar"]),
    ("empty [string] in scopesets", ["foo:bar"], [""], []),
    ("prefix", ["foo:bar"], ["foo:*"], ["foo:bar"]),
    ("star not at end", ["foo:bar:bing"], ["foo:*:bing"], []),
    ("star at beginning", ["foo:bar"], ["*:bar"], []),
    ("prefix with no star", ["foo:bar"], ["foo:"], []),
    ("star but not prefix (1)", ["foo:bar:*"], ["bar:bing"], []),
    ("star but not prefix (2)", ["bar:*"], ["foo:bar:bing"], []),
    ("disjunction", ["bar:*"], ["foo:x", "bar:x"], ["bar:x"]),
    ("conjuction", ["bar:y", "foo:x"], ["bar:*", "foo:x"], ["bar:y", "foo:x"]),
    ("empty pattern", [""], ["foo:bar"], []),
    ("empty patterns", [], ["foo:bar"], []),
    ("bare star", ["foo:bar", "bar:bing"], ["*"], ["foo:bar", "bar:bing"]),
    ("empty conjunction in scopesets", ["foo:bar"], [], []),
]


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [i[1:] for i in INTERSECTIONS],
    ids=[i[0] for i in INTERSECTIONS],
)
def test_scope_intersection(first: list[str], second: list[str], expected: list[str]) -> None:
    assert sorted(scope_intersection(first, second)) == sorted(expected)
    assert sorted(scope_intersection(second, first)) == sorted(expected)


def test_scope_intersection_is_normalized() -> None:
    """Upstream would answer ``["a*", "ab"]``; both sets hold ``a*``, which says it all."""
    assert scope_intersection(["a*", "ab"], ["a*"]) == ("a*",)
    assert scope_intersection(["b", "a"], ["*"]) == ("a", "b")
