"""Role expansion and the checks on a role set (:mod:`coordinator.domain.roles`).

Ported from Taskcluster's ``services/auth/test``, under upstream's titles:

* ``scoperesolver_test.js``: ``buildResolver`` (expansion), ``validateRoles`` (cycles and
  invalid scopes, each tried on shuffled role orders as upstream does), and the chain and tree
  of its performance suite (the snapshot of real roles is not carried over);
* ``trie_test.js``: ``dependencyOrdering``'s independent, acyclic, cyclic and illegal rule
  sets, and ``trietestcases.js``, the cases every trie operation is checked against, also
  fuzzed against ``evalRulesRecursively``, upstream's plain statement of the semantics
  (:func:`_reference_expand` here);
* ``rolelogic_test.js``: what clients' ``expandedScopes`` include and exclude.

The trie's cases are written for bare patterns (the resolver runs them after ``assume:``); as
roles every pattern is a roleId and every input gets ``assume:``. So do the scopes the rules
grant, except those whose first character starts no pattern (``A``, ``D<..>``): such a scope
assumes nothing either way, and bare it is not swallowed by an input such as ``assume:*``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

import pytest

from coordinator.domain.clients import MAX_EXPANDED_SCOPES
from coordinator.domain.errors import InputError
from coordinator.domain.roles import RoleError, RoleExpansion, check_roles
from coordinator.domain.scopes import normalize_scope_set, scope_compare

Roles = dict[str, list[str]]


def _expand(roles: Mapping[str, Sequence[str]], scopes: Sequence[str]) -> tuple[str, ...]:
    return RoleExpansion(roles).expand(scopes)


def _sorted(scopes: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(scopes, key=scope_compare))


# --- scoperesolver_test.js: buildResolver ------------------------------------------------------

ABC: Roles = {"a": ["A"], "b": ["B"], "c": ["C"]}
STARS: Roles = {
    "a*": ["ASTAR"],
    "a*b": ["ASTARB"],
    "a*bc": ["ASTARBC"],
    "ab": ["AB"],
    "abc": ["ABC"],
    "b*": ["BSTAR"],
    "c*": ["CSTAR"],
    "ab*": ["ABSTAR"],
}

RESOLVER_CASES: list[tuple[str, Roles, list[str], list[str]]] = [
    ("scopes pass through", {}, ["a", "b", "c*"], ["a", "b", "c*"]),
    ("passed through scopes are normalized", {}, ["a*", "ab", "ac*", "a"], ["a*"]),
    (
        "assume:a* matches, a, aa, ab, a*",
        {"a": ["A"], "aa": ["AA"], "ab": ["AB"], "a*": ["ASTAR"]},
        ["assume:a*"],
        ["assume:a*", "A", "AA", "AB", "ASTAR"],
    ),
    (
        "ab* matches ab, abc",
        {"a": ["A"], "ab": ["AB"], "abc": ["ABC"]},
        ["assume:ab*"],
        ["assume:ab*", "AB", "ABC"],
    ),
    ("a gets a*", {"a*": ["ASTAR"], "ab*": ["ABSTAR"]}, ["assume:a"], ["assume:a", "ASTAR"]),
    (
        "max sets (with long scopes)",
        {
            "ab*": ["ABSTAR"],
            "aaaaaaaaaaaaa": ["long"],
            "a" * 52: ["longer"],
            "ababaabdssafsdcsdcsacwscwcscsesdsdfdsfdsfsdfsfdsdfsdfsdfsafewfsewfwsd": ["longest"],
        },
        ["assume:ab*"],
        ["assume:ab*", "ABSTAR", "longest"],
    ),
    (
        "ab gets ab*, a*",
        {"ab*": ["ABSTAR"], "a*": ["ASTAR"]},
        ["assume:ab"],
        ["assume:ab", "ABSTAR", "ASTAR"],
    ),
    (
        "a gets * and a",
        {"*": ["STAR"], "a*": ["ASTAR"]},
        ["assume:a"],
        ["assume:a", "STAR", "ASTAR"],
    ),
    (
        "a*, b*, c*",
        {"a*": ["ASTAR"], "ab*": ["ABSTAR"], "ac*": ["ACSTAR"], "d": ["D"]},
        ["assume:ab"],
        ["assume:ab", "ASTAR", "ABSTAR"],
    ),
    (
        "ab* matches a*",
        {"a*": ["ASTAR"], "aabc": ["AABC"]},
        ["assume:aa*"],
        ["assume:aa*", "ASTAR", "AABC"],
    ),
    ("* get all", ABC, ["*"], ["*"]),
    ("a* get all", ABC, ["a*"], ["a*", "A", "B", "C"]),
    ("assume* get all", ABC, ["assume*"], ["assume*", "A", "B", "C"]),
    ("assume:* get all", ABC, ["assume:*"], ["assume:*", "A", "B", "C"]),
    ("assum* get all", ABC, ["assum*"], ["assum*", "A", "B", "C"]),
    *(
        (f"{scope} get all", ABC, [scope], [scope, "A", "B", "C"])
        for scope in ("as*", "ass*", "assu*")
    ),
    # See Bug 2057491
    *(
        (f"{scope} expands nothing", ABC, [scope], [scope])
        for scope in (":*", "::*", ":a*", ":as*", ":ass*", ":assu*", ":assum*", ":assume*")
    ),
    ("assume:a works", ABC, ["assume:a"], ["assume:a", "A"]),
    (
        "exact match ab",
        {"a": ["A"], "ab": ["AB"], "abc": ["ABC"]},
        ["assume:ab"],
        ["assume:ab", "AB"],
    ),
    (
        "ab* matches ab, abc (2)",
        {"a": ["A"], "ab": ["AB"], "abc": ["ABC"]},
        ["assume:ab*"],
        ["assume:ab*", "AB", "ABC"],
    ),
    (
        "ab* matches a* (2)",
        {"a*": ["ASTAR"], "ab": ["AB"], "abc": ["ABC"]},
        ["assume:ab*"],
        ["assume:ab*", "ASTAR", "AB", "ABC"],
    ),
    (
        "ab match ab,a*",
        {"a*": ["ASTAR"], "ab": ["AB"], "abc": ["ABC"]},
        ["assume:ab"],
        ["assume:ab", "ASTAR", "AB"],
    ),
    (
        "a*b* matches a*b, a*bc",
        {"a": ["A"], **{k: v for k, v in STARS.items() if k != "a*"}},
        ["assume:a*b*"],
        ["assume:a*b*", "ASTARB", "ASTARBC"],
    ),
    ("a*b matches a*, a*b", STARS, ["assume:a*b"], ["assume:a*b", "ASTARB", "ASTAR"]),
    (
        "a*b* matches a*b, a*bc (2)",
        STARS,
        ["assume:a*b*"],
        ["assume:a*b*", "ASTARB", "ASTARBC", "ASTAR"],
    ),
    ("basic parameterized role", {"a*": ["A<..>"]}, ["assume:abc"], ["assume:abc", "Abc"]),
    (
        "basic parameterized role, matched with *",
        {"a*": ["A<..>"]},
        ["assume:abc*"],
        ["assume:abc*", "Abc*"],
    ),
    (
        "parameterized role with suffix",
        {"a*": ["A<..>X"]},
        ["assume:abc"],
        ["assume:abc", "AbcX"],
    ),
    (
        "parameterized role with suffix, matched with *",
        {"a*": ["A<..>X"]},
        ["assume:abc*"],
        ["assume:abc*", "Abc*"],
    ),
    (
        "parameterized role with suffix, matched with a shorter *",
        {"abc*": ["ABC<..>DEF"]},
        ["assume:a*"],
        ["assume:a*", "ABC*"],
    ),
]


@pytest.mark.parametrize(
    ("roles", "scopes", "expected"),
    [case[1:] for case in RESOLVER_CASES],
    ids=[case[0] for case in RESOLVER_CASES],
)
def test_build_resolver(roles: Roles, scopes: list[str], expected: list[str]) -> None:
    assert _expand(roles, scopes) == _sorted(expected)


def test_the_first_a_b_star_case_leaves_out_a() -> None:
    """The two ``a*b*`` cases differ only in the role ``a*`` (which ``assume:a*b*`` extends,
    so it is assumed) and ``a`` (which it does not cover)."""
    assert "ASTAR" in _expand(STARS, ["assume:a*b*"])
    assert "A" not in _expand({"a": ["A"]}, ["assume:a*b*"])


# --- scoperesolver_test.js: performance (chain and tree, checked for their result) --------------


def test_chain_of_500_roles() -> None:
    size = 500
    roles = {f"ch-{i}": [f"assume:ch-{i + 1}"] for i in range(size)}
    roles[f"ch-{size}"] = ["special-scope"]
    expected = [*(f"assume:ch-{i}" for i in range(size + 1)), "special-scope"]
    assert _expand(roles, ["assume:ch-0"]) == _sorted(expected)


def test_tree_of_2x3_roles() -> None:
    width, height = 2, 3
    roles: Roles = {}

    def grow(prefix: str, level: int) -> None:
        children = [f"{prefix}-{w}" for w in range(width)]
        if level != height:
            for child in children:
                grow(child, level + 1)
        roles[prefix] = [f"assume:{child}" for child in children]

    grow("t", 0)
    expected = [scope for scopes in roles.values() for scope in scopes] + ["assume:t"]
    assert len(expected) == 2 + 4 + 8 + 16 + 1
    assert _expand(roles, ["assume:t"]) == _sorted(expected)


# --- scoperesolver_test.js: validateRoles -------------------------------------------------------

Code = str | None
CYCLE = "DependencyCycleError"
INVALID = "InvalidScopeError"

VALIDATE_CASES: list[tuple[str, Roles, Code]] = [
    ("simple role", {"a": ["A"], "b": ["B"], "c": ["C"]}, None),
    ("simple role DAG", {"a": ["assume:c"], "b": ["assume:c"], "c": ["assume:e"]}, None),
    ("simple role cycle", {"a": ["assume:c"], "b": ["assume:c"], "c": ["assume:a"]}, CYCLE),
    (
        "simple prefix match role DAG",
        {"a*": ["assume:c"], "b*": ["assume:c"], "c*": ["assume:e"]},
        None,
    ),
    (
        "simple prefix match role cycle",
        {"a*": ["assume:c"], "b*": ["assume:c"], "c*": ["assume:a"]},
        CYCLE,
    ),
    ("simple parameterized role (1)", {"a*": ["assume:b"]}, None),
    ("simple parameterized role (2)", {"a*": ["assume:b*"]}, None),
    ("simple parameterized role (3)", {"a*": ["assume:b<..>"]}, None),
    ("simple parameterized role (4)", {"a*": ["assume:b<..>*"]}, None),
    ("simple parameterized role (5)", {"a*": ["assume:b<..>c"]}, None),
    ("simple parameterized role (6)", {"a*": ["assume:b<..>c*"]}, None),
    ("ambiguous kleene in parameterized role", {"a*": ["assume:b*<..>"]}, INVALID),
    ("double parameter in parameterized role (1)", {"a*": ["assume:b<..>c<..>"]}, INVALID),
    ("double parameter in parameterized role (2)", {"a*": ["assume:b<..><..>"]}, INVALID),
    ("double parameter in parameterized role (3)", {"a*": ["assume:b<..>c<..>d"]}, INVALID),
    (
        "simple parameterized role DAG",
        {"a*": ["assume:c<..>A"], "b*": ["assume:c<..>B*"], "c*": ["assume:e<..>"]},
        None,
    ),
    (
        "simple parameterized role cycle (1)",
        {"a*": ["assume:c<..>A"], "b*": ["assume:c<..>B*"], "c*": ["assume:a<..>"]},
        CYCLE,
    ),
    (
        "simple parameterized role cycle (2)",
        {"a*": ["assume:c<..>A"], "b*": ["assume:c<..>B*"], "c*": ["assume:b<..>"]},
        CYCLE,
    ),
    (
        "simple parameterized role cycle (3)",
        {"a*": ["assume:c<..>A"], "b*": ["assume:c<..>B*"], "c*": ["assume:<..>"]},
        CYCLE,
    ),
    (
        "simple parameterized role cycle (4)",
        {"a*": ["assume:c<..>A"], "b*": ["assume:c<..>B*"], "c*": ["assume:b"]},
        CYCLE,
    ),
    ("self-referential simple role", {"abc": ["assume:abc"]}, CYCLE),
    (
        "four simple roles, pointing to each other",
        {
            "abc": ["assume:def"],
            "def": ["assume:ghi"],
            "ghi": ["assume:jkl"],
            "jkl": ["assume:abcd"],
        },
        None,
    ),
    (
        "inter-referential roles among others",
        {
            "abc": ["assume:def"],
            "def": ["assume:ghi"],
            "ghi": ["assume:xyz"],
            "jkl": ["assume:xyz"],
        },
        None,
    ),
    (
        "no cycles",
        {
            "abc": ["assume:xyz"],
            "def": ["assume:xyz"],
            "ghi": ["assume:xyz"],
            "jkl": ["assume:xyz"],
            "xyz": ["some-scope"],
        },
        None,
    ),
    ("self-referential role with * in scopes", {"abc": ["assume:ab*"]}, CYCLE),
    ("self-referential role with * in role_id", {"ab*": ["assume:abc"]}, CYCLE),
    ("self-referential role with * in role_id and scopes", {"ab*": ["assume:abc*"]}, CYCLE),
    (
        "four inter-referential roles with *s",
        {"abc": ["assume:d*"], "def": ["assume:ghi"], "g*": ["assume:jkl"], "jkl": ["assume:ab"]},
        None,
    ),
    (
        "cycle containing a single parameterized role with no suffix",
        {"a*": ["assume:ab<..>"]},
        CYCLE,
    ),
    (
        "cycle containing a single parameterized role with a suffix",
        {"a*": ["assume:a<..>x"]},
        CYCLE,
    ),
    (
        "cycle containing a single parameterized role with a prefix and suffix",
        {"a*": ["assume:ab<..>x"]},
        CYCLE,
    ),
    (
        "cycle containing two parameterized roles",
        {"a*": ["assume:b<..>x"], "b*": ["assume:a<..>"]},
        CYCLE,
    ),
    (
        "cycle containing two parameterized roles where scope is prefix of role",
        {"a*": ["assume:b<..>x"], "bstuff*": ["assume:a<..>"]},
        CYCLE,
    ),
    (
        "cycle containing two parameterized roles where role is prefix of scope",
        {"a*": ["assume:bstuff<..>x"], "b*": ["assume:a<..>"]},
        CYCLE,
    ),
    # upstream: "this would actually be stable, since the replacement is shorter, but we still
    # want to forbid this"
    ('cycle with a partial appearance of "assume:"', {"b*": ["as<..>"]}, CYCLE),
    (
        "roles with some parameters",
        {"bb*": ["assume:cd<..>"], "cde*": ["assume:de<..>x"], "d*": ["assume:b"]},
        None,
    ),
    (
        "roles with some parameters but a fixed point",
        {"b*": ["assume:cd<..>"], "cde*": ["assume:de<..>x"], "d*": ["assume:bx"]},
        CYCLE,
    ),
    # not upstream's: the scopes that cover "assume:*" make a cycle of any role holding them
    ("a role granting * depends on itself", {"root": ["*"]}, CYCLE),
    ("a role granting assume* depends on itself", {"x": ["assume*"]}, CYCLE),
    ("a role granting :* grants no role", {"x": [":*"], "y": ["assume:x"]}, None),
    ("a scope that is not printable ASCII", {"x": ["tab\there"]}, INVALID),
    ("<..> is literal in a role that is not parameterized", {"a": ["b<..>c<..>", "d*<..>"]}, None),
]


def _shuffled(roles: Roles, seed: int) -> Roles:
    items = list(roles.items())
    random.Random(seed).shuffle(items)
    return dict(items)


@pytest.mark.parametrize(
    ("roles", "code"),
    [case[1:] for case in VALIDATE_CASES],
    ids=[case[0] for case in VALIDATE_CASES],
)
def test_validate_roles(roles: Roles, code: Code) -> None:
    for seed in range(20):
        shuffled = _shuffled(roles, seed)
        if code is None:
            check_roles(shuffled)
            continue
        with pytest.raises(RoleError) as raised:
            check_roles(shuffled)
        assert raised.value.code == code
        assert raised.value.role_id in roles
        assert repr(raised.value.role_id) in str(raised.value)
        if code == CYCLE:
            cycle = raised.value.cycle
            assert cycle[0] == cycle[-1] == raised.value.role_id
            assert set(cycle) <= set(roles)
        else:
            assert raised.value.scope is not None
            assert raised.value.scope in roles[raised.value.role_id]
            assert repr(raised.value.scope) in str(raised.value)


def test_a_cycle_is_named_in_the_message_and_is_an_input_error() -> None:
    with pytest.raises(RoleError) as raised:
        check_roles({"a": ["assume:c"], "b": ["assume:c"], "c": ["assume:a"]})
    assert isinstance(raised.value, InputError)
    assert raised.value.cycle in {("a", "c", "a"), ("c", "a", "c")}
    assert " -> ".join(repr(r) for r in raised.value.cycle) in str(raised.value)


def test_role_expansion_refuses_a_cycle_instead_of_looping() -> None:
    with pytest.raises(RoleError, match="cycle"):
        RoleExpansion({"a*": ["assume:ab<..>"]})


def test_invalid_scope_error_names_the_problem() -> None:
    with pytest.raises(RoleError, match=r"more than one '<\.\.>'"):
        check_roles({"a*": ["assume:b<..>c<..>"]})
    with pytest.raises(RoleError, match=r"ends with '\*<\.\.>'"):
        check_roles({"a*": ["assume:b*<..>"]})


# --- trie_test.js: dependencyOrdering -----------------------------------------------------------


def _as_roles(rules: Mapping[str, Sequence[str]]) -> Roles:
    """A trie test's rules as roles: each pattern a roleId, each scope an ``assume:`` scope."""
    return {pattern: [f"assume:{scope}" for scope in scopes] for pattern, scopes in rules.items()}


INDEPENDENT_RULES = [
    {"a": ["b"]},
    {"a*": ["b"]},
    {"a": ["b"], "c": ["d"]},
    {"a*": ["b*"], "c*": ["d*"]},
    {"a*": ["b<..>z"], "c*": ["d<..>"]},
]
ACYCLIC_RULES = [
    {"c": ["nothing"], "b": ["c"], "a": ["b"]},
    {"ccc": ["nothing"], "b": ["c*"], "a": ["b"]},
    {"c*": ["nothing"], "b": ["cb"], "a": ["b"]},
    {"c*": ["nothing"], "bbb": ["cb"], "a*": ["b<..>"]},
    {"c*": ["nothing"], "bbb": ["cb"], "a*": ["b<..>c"]},
    {
        "ettt": ["nothing"],
        "d*": ["e<..>z"],
        "c*": ["dd<..>"],
        "bbb": ["cb"],
        "a*": ["b<..>c"],
    },
]
CYCLIC_RULES = [
    {"a": ["a"]},
    {"ab": ["a*"]},
    {"a*": ["ab"]},
    {"c": ["a"], "b": ["c"], "a": ["b"]},
    {"c": ["a*"], "b": ["c"], "aa": ["b"]},
    {"c": ["aa"], "b": ["c"], "a*": ["b"]},
    {"c": ["aa"], "b": ["c"], "a*": ["b<..>"]},
    {"c": ["aa"], "b": ["c"], "a*": ["b<..>c"]},
    {
        "ettt": ["aaa"],
        "d*": ["e<..>z"],
        "c*": ["dd<..>"],
        "bbb": ["cb"],
        "a*": ["b<..>c"],
    },
]
ILLEGAL_RULES = [
    {"a*": ["b<..>c<..>"]},
    {"a*": ["b<..>c<..>d"]},
    {"a*": ["b<..>c<..>d<..>"]},
    {"a*": ["b*<..>"]},
    {"a*": ["bc*<..>"]},
]


@pytest.mark.parametrize(
    "rules",
    INDEPENDENT_RULES + ACYCLIC_RULES,
    ids=[f"independent rules ({i + 1})" for i in range(len(INDEPENDENT_RULES))]
    + [f"acyclic rules ({i + 1})" for i in range(len(ACYCLIC_RULES))],
)
def test_dependency_ordering_accepts(rules: Roles) -> None:
    for seed in range(20):
        check_roles(_shuffled(_as_roles(rules), seed))


def test_acyclic_rules_expand_through_every_level() -> None:
    """The last acyclic rule set chains through parameters: each role's result assumes the
    next role, with a longer parameter (and a ``*`` parameter stays one to the end)."""
    roles = _as_roles(ACYCLIC_RULES[-1])
    assert _expand(roles, ["assume:bbb"]) == _sorted(
        ["assume:bbb", "assume:cb", "assume:ddb", "assume:edbz"]
    )
    assert _expand(roles, ["assume:c*"]) == _sorted(["assume:c*", "assume:dd*", "assume:ed*"])
    assert _expand(roles, ["assume:aX"]) == _sorted(["assume:aX", "assume:bXc"])


@pytest.mark.parametrize(
    "rules", CYCLIC_RULES, ids=[f"cyclic rules ({i + 1})" for i in range(len(CYCLIC_RULES))]
)
def test_dependency_ordering_refuses_cycles(rules: Roles) -> None:
    with pytest.raises(RoleError) as raised:
        check_roles(_as_roles(rules))
    assert raised.value.code == CYCLE


@pytest.mark.parametrize(
    "rules", ILLEGAL_RULES, ids=[f"illegal scopes ({i + 1})" for i in range(len(ILLEGAL_RULES))]
)
def test_dependency_ordering_refuses_illegal_scopes(rules: Roles) -> None:
    with pytest.raises(RoleError) as raised:
        check_roles(_as_roles(rules))
    assert raised.value.code == INVALID
    assert raised.value.scope == "assume:" + next(iter(rules.values()))[0]


# --- trie_test.js: trietestcases.js -------------------------------------------------------------

TRIE_CASES: list[tuple[str, Roles, dict[str, list[str]]]] = [
    (
        "simple",
        {"a": ["A"], "b": ["B", "C"]},
        {"a": ["A"], "b": ["B", "C"], "c": [], "*": ["A", "B", "C"]},
    ),
    (
        "parameterized direct",
        {"a": ["A"], "b": ["B", "C"], "c*": ["C"], "d*": ["D<..>"], "e*": ["E<..>F"]},
        {
            "a": ["A"],
            "b": ["B", "C"],
            "c": ["C"],
            "cccc": ["C"],
            "cX": ["C"],
            "c*": ["C"],
            "dX": ["DX"],
            "dXYZ": ["DXYZ"],
            "d*": ["D*"],
            "dXY*": ["DXY*"],
            "eX": ["EXF"],
            "eXYZ": ["EXYZF"],
            "e*": ["E*"],
            "eXY*": ["EXY*"],
            "q": [],
            "*": ["A", "B", "C", "D*", "E*"],
        },
    ),
    (
        "star",
        {"a*a": ["A"]},
        {
            "a": [],
            "a*": ["A"],
            "a*a": ["A"],
            "a*a*": ["A"],
            "a*aa*": [],
            "b": [],
            "": [],
            "*": ["A"],
        },
    ),
    (
        "parameterized indirect",
        {
            "a:*": ["q<..>"],
            "a": ["b"],
            "b": ["cc", "eX*"],
            "c*": ["dYY"],
            "d*": ["eZZZ"],
            "e*": ["f<..>g"],
            "ff*": ["h<..>j*"],
            "hej": ["hello"],
            "hej2": ["hello2"],
            "h*": ["H"],
            "q*": ["Q"],
        },
        {
            "a": ["b", "cc", "dYY", "eZZZ", "fZZZg", "eX*", "fX*"],
            "aa": [],
            "a:a": ["qa", "Q"],
            "a:aa": ["qaa", "Q"],
            "z": [],
            "eU*": ["fU*"],
            "e*": ["f*", "h*", "hello", "hello2", "H"],
            "e123": ["f123g"],
            "eU": ["fUg"],
            "hej": ["hello", "H"],
            "hej2": ["hello2", "H"],
            "hh": ["H"],
            "efy": ["ffyg", "hygj*", "H"],
            "ef*": ["ff*", "h*", "H"],
            "ffe": ["hej*", "hello", "hello2", "H"],
            "f*": ["h*", "H"],
            "ff": ["hj*", "H"],
            "*": ["q*", "b", "cc", "eX*", "dYY", "eZZZ", "f*", "h*", "H", "Q"],
        },
    ),
    (
        "pattern hierarchy",
        {"a*": ["A"], "aa*": ["AA"], "aaa*": ["AAA"], "ab*": ["AB"], "abc*": ["ABC"]},
        {
            "a": ["A"],
            "aa": ["A", "AA"],
            "aaa": ["A", "AA", "AAA"],
            "aaaa": ["A", "AA", "AAA"],
            "aa*": ["A", "AA", "AAA"],
            "ab": ["A", "AB"],
            "abc": ["A", "AB", "ABC"],
            "abcd": ["A", "AB", "ABC"],
            "ab*": ["A", "AB", "ABC"],
            "a*": ["A", "AA", "AAA", "AB", "ABC"],
        },
    ),
    (
        "prefix-parameterized hierarchy",
        {
            "a*": ["A<..>"],
            "aa*": ["AA<..>"],
            "aaa*": ["AAA<..>"],
            "ab*": ["AB<..>"],
            "abc*": ["ABC<..>"],
        },
        {
            "a": ["A"],
            "aa": ["Aa", "AA"],
            "aaa": ["Aaa", "AAa", "AAA"],
            "aaaa": ["Aaaa", "AAaa", "AAAa"],
            "aa*": ["Aa*", "AA*"],
            "ab": ["Ab", "AB"],
            "abc": ["Abc", "ABc", "ABC"],
            "abcd": ["Abcd", "ABcd", "ABCd"],
            "ab*": ["Ab*", "AB*"],
            "a*": ["A*"],
        },
    ),
    (
        "parameterized hierarchy",
        {
            "a*": ["A<..>X"],
            "aa*": ["AA<..>X"],
            "aaa*": ["AAA<..>X"],
            "ab*": ["AB<..>X"],
            "abc*": ["ABC<..>X"],
        },
        {
            "a": ["AX"],
            "aa": ["AaX", "AAX"],
            "aaa": ["AaaX", "AAaX", "AAAX"],
            "aaaa": ["AaaaX", "AAaaX", "AAAaX"],
            "aa*": ["Aa*", "AA*"],
            "ab": ["AbX", "ABX"],
            "abc": ["AbcX", "ABcX", "ABCX"],
            "abcd": ["AbcdX", "ABcdX", "ABCdX"],
            "ab*": ["Ab*", "AB*"],
            "a*": ["A*"],
        },
    ),
    (
        "parameterized kleene hierarchy",
        {
            "a*": ["A<..>*"],
            "aa*": ["AA<..>*"],
            "aaa*": ["AAA<..>*"],
            "ab*": ["AB<..>*"],
            "abc*": ["ABC<..>*"],
        },
        {
            "a": ["A*"],
            "aa": ["Aa*", "AA*"],
            "aaa": ["Aaa*", "AAa*", "AAA*"],
            "aaaa": ["Aaaa*", "AAaa*", "AAAa*"],
            "aa*": ["Aa*", "AA*"],
            "ab": ["Ab*", "AB*"],
            "abc": ["Abc*", "ABc*", "ABC*"],
            "abcd": ["Abcd*", "ABcd*", "ABCd*"],
            "ab*": ["Ab*", "AB*"],
            "a*": ["A*"],
        },
    ),
    (
        "parameterized suffixed kleene hierarchy",
        {
            "a*": ["A<..>X*"],
            "aa*": ["AA<..>X*"],
            "aaa*": ["AAA<..>X*"],
            "ab*": ["AB<..>X*"],
            "abc*": ["ABC<..>X*"],
        },
        {
            "a": ["AX*"],
            "aa": ["AaX*", "AAX*"],
            "aaa": ["AaaX*", "AAaX*", "AAAX*"],
            "aaaa": ["AaaaX*", "AAaaX*", "AAAaX*"],
            "aa*": ["Aa*", "AA*"],
            "ab": ["AbX*", "ABX*"],
            "abc": ["AbcX*", "ABcX*", "ABCX*"],
            "abcd": ["AbcdX*", "ABcdX*", "ABCdX*"],
            "ab*": ["Ab*", "AB*"],
            "a*": ["A*"],
        },
    ),
    (
        "acylic parameterized rules",
        {
            "a": ["START"],
            "aaa*": ["bb<..>BB"],
            "b*": ["ccc<..>*"],
            "cc*": ["dd<..>C"],
            "ddcbXBB": ["C"],
            "dd*": ["eee<..>D*"],
            "ddXC": ["hello-world", "you-made-it"],
        },
        {
            "a": ["START"],
            "aaaX": ["bbXBB", "cccbXBB*", "ddcbXBB*", "C", "eeecbXBB*"],
            "ccX": ["ddXC", "eeeXCD*", "hello-world", "you-made-it"],
            "ddd": ["eeedD*"],
        },
    ),
    (
        "acylic parameterized matching pattern",
        {"a*": ["bb<..>BB"], "b*": ["cc<..>*"], "c*": ["dd<..>C"], "ddcbXBB": ["C"]},
        {"aX": ["bbXBB", "ccbXBB*", "ddcbXBB*", "C"]},
    ),
    ("no rules", {}, {"": [], "a": [], "*": [], "abc*": []}),
    (
        "simple rules",
        {"a": ["A1", "A2"], "b": ["B1", "B2"]},
        {
            "": [],
            "*": ["A1", "A2", "B1", "B2"],
            "a": ["A1", "A2"],
            "a*": ["A1", "A2"],
            "b": ["B1", "B2"],
            "b*": ["B1", "B2"],
            "ab": [],
        },
    ),
    (
        "simple rules in a DAG",
        {"a": ["c"], "b": ["c"], "c": ["D"]},
        {
            "": [],
            "c": ["D"],
            "a": ["c", "D"],
            "b": ["c", "D"],
            "*": ["c", "D"],
            "a*": ["c", "D"],
            "b*": ["c", "D"],
        },
    ),
    (
        "prefix matching rules in a DAG",
        {"a*": ["c"], "b*": ["c"], "c*": ["D"]},
        {
            "": [],
            "c": ["D"],
            "a": ["c", "D"],
            "b": ["c", "D"],
            "*": ["c", "D"],
            "a*": ["c", "D"],
            "b*": ["c", "D"],
        },
    ),
    (
        "parameterized rule variations",
        {
            "A*": ["b", "c*", "d<..>", "e<..>*", "f<..>g", "h<..>i*"],
            "BC*": ["b", "c*", "d<..>", "e<..>*", "f<..>g", "h<..>i*"],
            "B*C*": ["b", "c*", "d<..>", "e<..>*", "f<..>g", "h<..>i*"],
        },
        {
            "": [],
            "A": ["b", "c*", "d", "e*", "fg", "hi*"],
            "AX": ["b", "c*", "dX", "eX*", "fXg", "hXi*"],
            "AXyX": ["b", "c*", "dXyX", "eXyX*", "fXyXg", "hXyXi*"],
            "AX*X": ["b", "c*", "dX*X", "eX*X*", "fX*Xg", "hX*Xi*"],
            "AZZ*": ["b", "c*", "dZZ*", "eZZ*", "fZZ*", "hZZ*"],
            "AZZ***": ["b", "c*", "dZZ***", "eZZ***", "fZZ***", "hZZ***"],
            "A*": ["b", "c*", "d*", "e*", "f*", "h*"],
            "A*X": ["b", "c*", "d*X", "e*X*", "f*Xg", "h*Xi*"],
            "BC": ["b", "c*", "d", "e*", "fg", "hi*"],
            "BCX": ["b", "c*", "dX", "eX*", "fXg", "hXi*"],
            "BCXyX": ["b", "c*", "dXyX", "eXyX*", "fXyXg", "hXyXi*"],
            "BCX*X": ["b", "c*", "dX*X", "eX*X*", "fX*Xg", "hX*Xi*"],
            "BCZZ*": ["b", "c*", "dZZ*", "eZZ*", "fZZ*", "hZZ*"],
            "BCZZ***": ["b", "c*", "dZZ***", "eZZ***", "fZZ***", "hZZ***"],
            "BC*": ["b", "c*", "d*", "e*", "f*", "h*"],
            "BC*X": ["b", "c*", "d*X", "e*X*", "f*Xg", "h*Xi*"],
            "B*C": ["b", "c*", "d", "e*", "fg", "hi*"],
            "B*CX": ["b", "c*", "dX", "eX*", "fXg", "hXi*"],
            "B*CXyX": ["b", "c*", "dXyX", "eXyX*", "fXyXg", "hXyXi*"],
            "B*CX*X": ["b", "c*", "dX*X", "eX*X*", "fX*Xg", "hX*Xi*"],
            "B*CZZ*": ["b", "c*", "dZZ*", "eZZ*", "fZZ*", "hZZ*"],
            "B*CZZ**": ["b", "c*", "dZZ**", "eZZ**", "fZZ**", "hZZ**"],
            "B*C*": ["b", "c*", "d*", "e*", "f*", "h*"],
            "B*C*X": ["b", "c*", "d*X", "e*X*", "f*Xg", "h*Xi*"],
        },
    ),
    (
        "parameterized role DAG",
        {"a*": ["c<..>A"], "b*": ["c<..>B*"], "c*": ["e<..>"]},
        {"a": ["cA", "eA"], "abc": ["cbcA", "ebcA"], "bXYX": ["cXYXB*", "eXYXB*"]},
    ),
    (
        "chain of rules",
        {
            "a": ["b"],
            "b": ["c"],
            "c": ["d"],
            "d": ["e"],
            "e": ["f"],
            "f": ["g"],
            "g": ["abc"],
            "abc": ["1"],
            "1": ["12"],
            "12": ["123"],
            "123": ["1234"],
            "1234": ["12345"],
            "12345": ["GOAL"],
            "num": ["1*"],
        },
        {
            "1": ["12", "123", "1234", "12345", "GOAL"],
            "a": ["b", "c", "d", "e", "f", "g", "abc", "1", "12", "123", "1234", "12345", "GOAL"],
            "d": ["e", "f", "g", "abc", "1", "12", "123", "1234", "12345", "GOAL"],
            "abc": ["1", "12", "123", "1234", "12345", "GOAL"],
            "num": ["1*", "GOAL"],
            "num*": ["1*", "GOAL"],
            "n*": ["1*", "GOAL"],
            "???": [],
        },
    ),
    (
        "hierarchy of chained rules",
        {"a": ["A"], "aa": ["AA"], "aaa": ["AAA"], "a*": ["A_"], "aa*": ["AA_"], "aaa*": ["AAA_"]},
        {"a": ["A", "A_"], "aaaa": ["AAA_", "AA_", "A_"], "aaa": ["A_", "AA_", "AAA_", "AAA"]},
    ),
    (
        "chain of star-rules",
        {
            "a": ["b"],
            "b": ["c*"],
            "c": ["d--"],
            "d*": ["e*YY"],
            "e**": ["f"],
            "f": ["g"],
            "g": ["abc"],
            "abc": ["1"],
            "1": ["12"],
            "12": ["123*"],
            "123": ["1234"],
            "1234": ["12345"],
            "12345": ["GOAL"],
            "num": ["1*"],
        },
        {
            "1": ["12", "123*", "GOAL"],
            "a": ["b", "c*", "d--", "e*YY", "f", "g", "abc", "1", "12", "123*", "GOAL"],
            "d": ["e*YY", "f", "g", "abc", "1", "12", "123*", "GOAL"],
            "abc": ["1", "12", "123*", "GOAL"],
            "num": ["1*", "GOAL"],
            "num*": ["1*", "GOAL"],
            "n*": ["1*", "GOAL"],
            "???": [],
        },
    ),
    (
        "chain of parameterized rules",
        {"aa*": ["b<..>C"], "bb": ["cYY"], "c*": ["d**/<..>/"]},
        {
            "a": [],
            "???": [],
            "aa": ["bC"],
            "aab": ["bbC"],
            "aab*": ["bb*", "cYY", "d**/YY/"],
            "a*": ["b*", "cYY", "d**/YY/"],
            "aa*": ["b*", "cYY", "d**/YY/"],
            "*": ["b*", "cYY", "d**/*"],
        },
    ),
    (
        "parameterized rules matches simple rule",
        {"aa*": ["b<..>C"], "bb": ["cYY"]},
        {
            "a": [],
            "???": [],
            "aa": ["bC"],
            "aab": ["bbC"],
            "aab*": ["bb*", "cYY"],
            "a*": ["b*", "cYY"],
            "aa*": ["b*", "cYY"],
            "*": ["b*", "cYY"],
        },
    ),
    ("kleene in parameterization", {"a*": ["A<..>B*"]}, {"a": ["AB*"], "a*": ["A*"], "*": ["A*"]}),
    (
        "example of namespacing with roles",
        {"ns:*": ["index:user.<..>.*", "notify:irc:<..>"]},
        {
            "ns:jonasfj": ["index:user.jonasfj.*", "notify:irc:jonasfj"],
            "ns:*": ["index:user.*", "notify:irc:*"],
            "ns:evil*": ["index:user.evil*", "notify:irc:evil*"],
        },
    ),
    (
        "match exact though parameterized role",
        {
            "a*": ["A<..>B*"],
            "param:*": ["A<..>B"],
            "A-123-B": ["GOAL"],
            "ATB": ["TARGET"],
            "ATB*": ["TARGET++"],
            "AT*": ["prefix"],
        },
        {
            "a": ["AB*"],
            "a-123": ["A-123B*"],
            "a-123-": ["A-123-B*", "GOAL"],
            "a*": ["A*", "GOAL", "prefix", "TARGET", "TARGET++"],
            "*": ["A*", "GOAL", "prefix", "TARGET", "TARGET++"],
            "param:T": ["ATB", "prefix", "TARGET", "TARGET++"],
        },
    ),
]


def _trie_naming(rules: Roles) -> Callable[[str], str]:
    """How a trie case's scopes are named among roles (see the module docstring):
    ``assume:`` before a scope whose first character may start a pattern."""
    starts = {pattern[:1] for pattern in rules} | {"", "*", "a"}  # "a*" could be "assume*"
    return lambda scope: f"assume:{scope}" if scope[:1] in starts else scope


def _trie_roles(rules: Roles) -> Roles:
    name = _trie_naming(rules)
    return {pattern: [name(scope) for scope in scopes] for pattern, scopes in rules.items()}


def _trie_expectations() -> list[tuple[str, Roles, str, tuple[str, ...]]]:
    cases = []
    for title, rules, results in TRIE_CASES:
        name = _trie_naming(rules)
        for given, granted in results.items():
            scope = f"assume:{given}"
            expected = (scope, *map(name, granted))
            cases.append((f"{title}: {given!r}", _trie_roles(rules), scope, expected))
    return cases


TRIE_EXPECTATIONS = _trie_expectations()


@pytest.mark.parametrize(
    ("roles", "scope", "expected"),
    [case[1:] for case in TRIE_EXPECTATIONS],
    ids=[case[0] for case in TRIE_EXPECTATIONS],
)
def test_trie_cases(roles: Roles, scope: str, expected: tuple[str, ...]) -> None:
    assert RoleExpansion(roles).expand([scope]) == normalize_scope_set(expected)


def _pattern_match(pattern: str, scope: str) -> bool:
    """trie_test.js's ``patternMatch``: ``pattern`` covers ``scope`` (a scope's own final
    ``*`` stripped first)."""
    if scope == pattern:
        return True
    if pattern.endswith("*"):
        return scope.removesuffix("*").startswith(pattern[:-1])
    return False


def _reference_expand(roles: Mapping[str, Sequence[str]], scope: str) -> tuple[str, ...]:
    """trie_test.js's ``evalRulesRecursively``, the semantics stated plainly: apply every role
    whose ``assume:`` pattern covers the scope or is covered by it, until nothing new comes;
    plus the scope itself, as the resolver merges it in."""
    rules = [(f"assume:{role_id}", scopes) for role_id, scopes in roles.items()]
    queue = [scope]
    result: tuple[str, ...] = ()
    while queue:
        given = queue.pop()
        for pattern, scopes in rules:
            if not _pattern_match(pattern, given) and not _pattern_match(given, pattern):
                continue
            granted = list(scopes)
            if pattern.endswith("*"):
                rest = given[len(pattern) - 1 :] if _pattern_match(pattern, given) else "*"
                if given.endswith("*"):
                    granted = [s[: s.index("<..>")] + rest if "<..>" in s else s for s in scopes]
                else:
                    granted = [s.replace("<..>", rest, 1) for s in scopes]
            queue.extend(s for s in granted if not any(_pattern_match(r, s) for r in result))
            result = normalize_scope_set([*result, *granted])
    return normalize_scope_set([scope, *result])


def _probes(roles: Roles) -> list[str]:
    """Scopes to fuzz with, as trie_test.js's walk: every prefix of every ``assume:<roleId>``
    (the nodes of upstream's trie), each with a few interesting suffixes; and the scopes that
    cover every role."""
    characters = {c for role_id in roles for c in role_id}
    suffixes = {"", "*", "**", "$", "<", ">", *characters, *(c + "*" for c in characters)}
    prefixes = {
        f"assume:{role_id}"[:length] for role_id in roles for length in range(7, len(role_id) + 8)
    }
    probes = {prefix + suffix for prefix in prefixes for suffix in suffixes}
    return sorted(probes | {"*", "a*", "assume*", ":*", "assume:"})


@pytest.mark.parametrize(
    "rules", [case[1] for case in TRIE_CASES], ids=[case[0] for case in TRIE_CASES]
)
def test_trie_cases_against_eval_rules_recursively(rules: Roles) -> None:
    roles = _trie_roles(rules)
    expansion = RoleExpansion(roles)
    for scope in _probes(roles):
        assert expansion.expand([scope]) == _reference_expand(roles, scope), scope


# --- rolelogic_test.js: clients' expandedScopes ------------------------------------------------

ROLE_LOGIC: list[tuple[str, Roles, list[str], list[str], list[str]]] = [
    (
        "assume:thing-id:* works",
        {"thing-id:*": ["test-scope-1"]},
        ["assume:thing-id:test"],
        ["assume:thing-id:test", "test-scope-1"],
        ["assume:thing-id:*", "*"],
    ),
    # upstream also lists assume:thing-id:test as excluded ("should be compressed away"), but
    # assume:tree:* does not cover it (its check of exclusions reads a misspelt key, so never ran)
    (
        "can get assume:tree:*",
        {"thing-id:test": ["assume:tree:*"]},
        ["assume:thing-id:test"],
        ["assume:thing-id:test", "assume:tree:*"],
        [],
    ),
    *(
        (
            f"two clients don't get the same .. uh, look, something shiny! ({client})",
            {
                "thing-id:test-client-1": ["scope-1"],
                "thing-id:test-client-2": ["scope-2"],
                "thing-id:test-client-*": ["scope-for-both"],
                "thing-id:other-client": ["other-scope"],
            },
            [f"assume:thing-id:{client}"],
            includes,
            excludes,
        )
        for client, includes, excludes in [
            (
                "test-client-1",
                ["assume:thing-id:test-client-1", "scope-1", "scope-for-both"],
                ["assume:thing-id:test-client-2", "scope-2", "other-scope"],
            ),
            ("test-client-2", ["scope-2", "scope-for-both"], ["scope-1", "other-scope"]),
            ("other-client", ["other-scope"], ["scope-for-both", "scope-1", "scope-2"]),
        ]
    ),
    (
        "two clients with two prefix roles (abc)",
        {"test-role-abc*": ["scope-1"], "test-role-abc-*": ["scope-2"]},
        ["assume:test-role-abc"],
        ["scope-1"],
        ["scope-2"],
    ),
    (
        "two clients with two prefix roles (abc-again)",
        {"test-role-abc*": ["scope-1"], "test-role-abc-*": ["scope-2"]},
        ["assume:test-role-abc-again"],
        ["scope-1", "scope-2"],
        ["*"],
    ),
    (
        "indirect roles works",
        {"test-client-1": ["assume:test-role"], "test-role": ["special-scope"]},
        ["assume:test-client-1"],
        ["assume:test-role", "special-scope"],
        ["*"],
    ),
    (
        "indirect roles works (with many levels of indirection)",
        {
            **{f"test-role-{i}": [f"assume:test-role-{i + 1}"] for i in range(1, 9)},
            "test-role-9": ["assume:test-role"],
            "test-role": ["special-scope"],
        },
        ["assume:test-role-1"],
        ["assume:test-role", *(f"assume:test-role-{i}" for i in range(1, 10)), "special-scope"],
        ["*"],
    ),
    *(
        (
            f"a client using a parameterized role ({client})",
            {
                "project-admin:*": [
                    "assume:admin-role:project-<..>/*",
                    "secrets:get:project/<..>/*",
                ],
                "admin-role:*": [
                    "auth:create-role:<..>",
                    "auth:update-role:<..>",
                    "auth:delete-role:<..>",
                ],
            },
            scopes,
            includes,
            ["auth:create-role:project-*"],
        )
        for client, scopes, includes in [
            ("single-admin", ["assume:project-admin:proj1"], ["auth:create-role:project-proj1/*"]),
            (
                "double-admin",
                ["assume:project-admin:proj1", "assume:project-admin:proj2"],
                ["auth:create-role:project-proj1/*", "auth:create-role:project-proj2/*"],
            ),
            # note no slash
            ("star-admin", ["assume:project-admin:proj*"], ["auth:create-role:project-proj*"]),
        ]
    ),
    (
        "indirect roles works (with 50 roles)",
        {
            "big-test-client": ["assume:test-role-0"],
            "test-role-50": ["special-scope"],
            **{f"test-role-{i}": [f"assume:test-role-{i + 1}"] for i in range(50)},
        },
        ["assume:big-test-client"],
        ["special-scope", *(f"assume:test-role-{i}" for i in range(51))],
        ["*"],
    ),
    (
        "test with depth = 5 x 25",
        {
            **{f"k-{k}-{m}": [f"assume:k-{k}-{m + 1}"] for k in range(25) for m in range(5)},
            **{f"k-{k}-5": ["special-scope"] for k in range(25)},
        },
        ["assume:k-2-0"],
        ["special-scope", *(f"assume:k-2-{i}" for i in range(6))],
        ["*", "assume:k-1-1", "assume:k-3-5"],
    ),
    ("a* scope grants all roles", {"-": ["T"]}, ["a*"], ["T"], ["scope-1", "scope-2"]),
    ("assume* scope grants all roles", {"-": ["T"]}, ["assume*"], ["T"], ["scope-1"]),
    ("assume:* scope grants all roles", {"-": ["T"]}, ["assume:*"], ["T"], ["scope-1"]),
    (
        "assume:project:<name> expands",
        {"project:*": ["irc:<..>", "artifacts:private/<..>/*"]},
        ["assume:project:my-prj"],
        ["irc:my-prj", "artifacts:private/my-prj/*"],
        ["scope-1", "scope-2"],
    ),
]


@pytest.mark.parametrize(
    ("roles", "scopes", "includes", "excludes"),
    [case[1:] for case in ROLE_LOGIC],
    ids=[case[0] for case in ROLE_LOGIC],
)
def test_role_logic(
    roles: Roles, scopes: list[str], includes: list[str], excludes: list[str]
) -> None:
    check_roles(roles)
    expanded = _expand(roles, scopes)
    assert set(includes) <= set(expanded)
    assert not set(excludes) & set(expanded)


def test_a_parameterized_role_grants_what_the_star_admin_gets_exactly() -> None:
    roles = ROLE_LOGIC[-1][1]
    assert _expand(roles, ["assume:project:my-prj"]) == _sorted(
        ["assume:project:my-prj", "irc:my-prj", "artifacts:private/my-prj/*"]
    )
    assert _expand(roles, ["assume:project:my*"]) == _sorted(
        ["assume:project:my*", "irc:my*", "artifacts:private/my*"]
    )


# --- the bound, the memo, a large role set --------------------------------------------------------


def test_an_expansion_of_exactly_the_bound_is_accepted() -> None:
    roles = {"edge": [f"s-{i}" for i in range(MAX_EXPANDED_SCOPES - 1)]}  # + assume:edge
    check_roles(roles)
    assert len(_expand(roles, ["assume:edge"])) == MAX_EXPANDED_SCOPES


def test_an_expansion_past_the_bound_is_refused_naming_the_role() -> None:
    roles: Roles = {f"part-{p}": [f"s-{p}-{i}" for i in range(1_000)] for p in range(10)}
    roles["whole"] = [f"assume:part-{p}" for p in range(10)]
    with pytest.raises(RoleError) as raised:
        check_roles(roles)
    assert raised.value.code == "TooManyScopes"
    assert raised.value.role_id == "whole"
    assert "'whole' expands to 10,011 scopes" in str(raised.value)
    assert f"{MAX_EXPANDED_SCOPES:,}" in str(raised.value)
    del roles["part-9"]
    check_roles(roles)  # 9,000 + 9 + 1 + 1: fine


def test_a_parameterized_role_is_bounded_by_what_its_star_assumes() -> None:
    """A parameterized role's expansion is what ``assume:<prefix>*`` grants: every role
    under the prefix, which can be past the bound when no single one is."""
    roles: Roles = {f"team:{t}": [f"s-{t}-{i}" for i in range(2_500)] for t in range(4)}
    roles["team:*"] = ["member"]
    with pytest.raises(RoleError) as raised:
        check_roles(roles)
    assert raised.value.role_id == "team:*"


def test_expand_remembers_its_answer() -> None:
    expansion = RoleExpansion({"a": ["assume:b"], "b": ["B"]})
    first = expansion.expand(["assume:a", "x"])
    again = expansion.expand(("assume:a", "x"))
    assert first == again == ("B", "assume:a", "assume:b", "x")
    assert again is first  # the memo's answer, not a second computation
    assert expansion.expand(["x", "assume:a"]) == first  # another key, the same set


def test_the_memo_keeps_answering_correctly_past_its_size() -> None:
    expansion = RoleExpansion({"p*": ["P<..>"]})
    for i in range(1_500):
        assert expansion.expand([f"assume:p{i}"]) == (f"P{i}", f"assume:p{i}")
    assert expansion.expand(["assume:p0"]) == ("P0", "assume:p0")


def test_a_large_role_set_with_chains() -> None:
    """2,000 roles: 15 chains of 100, one of 500 (deeper than Python's recursion limit would
    allow a recursive walk), and parameterized roles that enter the chains."""
    roles: Roles = {}
    for c in range(15):
        roles.update({f"chain-{c}-{i}": [f"assume:chain-{c}-{i + 1}"] for i in range(99)})
        roles[f"chain-{c}-99"] = [f"end-{c}", f"assume:deep-{c * 30}"]
    roles.update({f"deep-{i}": [f"assume:deep-{i + 1}", f"d-{i}"] for i in range(499)})
    roles["deep-499"] = ["bottom"]
    roles["team:*"] = ["assume:chain-<..>-0", "team:<..>:member"]
    roles["all-teams"] = ["assume:team:*"]
    assert len(roles) == 2_002
    check_roles(roles)
    expansion = RoleExpansion(roles)

    deep_from = {
        i: [
            *(f"assume:deep-{j}" for j in range(i, 500)),
            *(f"d-{j}" for j in range(i, 499)),
            "bottom",
        ]
        for i in (0, 420)
    }
    chain_14 = [*(f"assume:chain-14-{i}" for i in range(100)), "end-14", *deep_from[420]]
    assert expansion.expand(["assume:chain-14-0"]) == _sorted(chain_14)
    assert expansion.expand(["assume:deep-0"]) == _sorted(deep_from[0])
    assert expansion.expand(["assume:team:14"]) == _sorted(
        ["assume:team:14", "team:14:member", *chain_14]
    )
    # "assume:team:*" enters every chain, with the parameter "*": assume:chain-* covers them
    assert expansion.expand(["assume:all-teams"]) == _sorted(
        [
            "assume:all-teams",
            "assume:chain-*",
            "assume:team:*",
            "team:*",
            *(f"end-{c}" for c in range(15)),
            *deep_from[0],
        ]
    )
