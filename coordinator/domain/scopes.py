"""Taskcluster scopes and scope expressions: satisfaction, rendering, and the queue's rules.

Pure, no I/O. A *scope* is a string of printable ASCII; a held scope ending in
``*`` satisfies every scope starting with what precedes the ``*`` (a ``*`` anywhere else is
literal). A *scope expression* is a scope, ``{"AnyOf": [expr, ...]}`` or
``{"AllOf": [expr, ...]}``; an empty ``AllOf`` is always satisfied and an empty ``AnyOf``
never, as in ``taskcluster-lib-scopes``. :class:`HeldScopes` is a caller's scopes compiled for
deciding many of them.

A *template* is how an endpoint declares its scopes (the ``scopes`` of
:class:`~coordinator.api.endpoints.Endpoint`, as Taskcluster's ``declare({scopes})``): an
expression whose scopes hold ``<name>`` placeholders, and whose ``AllOf``/``AnyOf`` lists may
hold ``{"for": var, "in": list, "each": template}`` (one operand per element of the parameter
``list``, with ``<var>`` bound to it; an element that is an object also binds its keys) and
``{"if": name, "then": template}`` (the operand only when the parameter ``name`` is true).
:func:`expand` fills one in with a request's parameters (:meth:`HeldScopes.satisfy_template`
decides one without building the expression). :data:`CREATE_TASK_SCOPES` is
Taskcluster's rule for ``createTask``, which ``createTasks`` applies to every item.

A *scope set* is *normalized* when no scope in it grants another (duplicates and scopes a
``*`` scope covers are dropped) and it is sorted by :func:`scope_compare`, the order of
``taskcluster-lib-scopes``, which puts ``a*`` right before ``a`` and everything ``a*`` covers.
:func:`normalize_scope_set`, :func:`merge_scope_sets` (:func:`scope_union` is the same) and
:func:`scope_intersection` are that library's set operations; the auth service answers with
normalized sets (``expandScopes``, ``currentScopes``, a role's ``expandedScopes``, see
:mod:`coordinator.domain.roles`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

from coordinator.domain import definitions
from coordinator.domain.records import DEFAULT_PROJECT_ID
from coordinator.domain.task_queues import PRIORITIES, canonical_priority

Expression: TypeAlias = "str | Mapping[str, Sequence[Expression]]"

Template: TypeAlias = "str | Mapping[str, Any]"
"""A scope expression template (see the module docstring)."""

_VALID_SCOPE = re.compile(r"[\x20-\x7e]*")
_OPERATORS = ("AnyOf", "AllOf")


def valid_scope(scope: object) -> bool:
    """Whether ``scope`` is a string of printable ASCII, Taskcluster's only rule for scopes."""
    return isinstance(scope, str) and _VALID_SCOPE.fullmatch(scope) is not None


class HeldScopes:
    """A scope set compiled for deciding many scopes against it (get one with
    :func:`held_scopes`): a held scope grants a scope equal to it, and one ending in ``*`` every
    scope starting with what precedes the ``*``; so the exact scopes go in a set and those
    prefixes in one tuple for ``str.startswith``, instead of a scan of the set per scope.
    """

    __slots__ = ("_exact", "_prefixes")

    def __init__(self, scopes: Iterable[str]) -> None:
        self._exact = frozenset(scopes)
        self._prefixes = tuple(scope[:-1] for scope in self._exact if scope.endswith("*"))

    def grants(self, scope: str) -> bool:
        """Whether the set grants the one scope ``scope``."""
        return scope in self._exact or scope.startswith(self._prefixes)

    def satisfy(self, expression: Expression) -> bool:
        """Whether the set satisfies ``expression``.

        Raises ``ValueError`` for a malformed expression (a programming error, not a 403).
        """
        if isinstance(expression, str):
            return self.grants(expression)
        operator, operands = _split(expression)
        if operator == "AnyOf":
            return any(self.satisfy(operand) for operand in operands)
        return all(self.satisfy(operand) for operand in operands)

    def satisfy_template(self, template: Template, params: Mapping[str, object]) -> bool:
        """Whether the set satisfies ``expand(template, params)``, each operand decided as it is
        expanded, stopping at the first that settles the answer: a batch call's per-run check
        then builds no expression (each run's parameters differ, so none would be reused).
        """
        if isinstance(template, str):
            return self.grants(_fill(template, params))
        operator, operands = _template_split(template)
        decided = map(self.satisfy, _operands(operands, params))
        return any(decided) if operator == "AnyOf" else all(decided)


@functools.lru_cache(maxsize=256)
def held_scopes(scopes: tuple[str, ...]) -> HeldScopes:
    """``scopes`` compiled; the same object while cached, since a caller's scopes are checked
    on every request it makes."""
    return HeldScopes(scopes)


def satisfies(scopes: Iterable[str], expression: Expression) -> bool:
    """Whether the scope set ``scopes`` satisfies ``expression``.

    Raises ``ValueError`` for a malformed expression (a programming error, not a 403).
    """
    return held_scopes(tuple(scopes)).satisfy(expression)


def unsatisfied(scopes: Iterable[str], expression: Expression) -> Expression | None:
    """The part of ``expression`` that ``scopes`` does not satisfy, or ``None`` if satisfied.

    Satisfied scopes are removed from an ``AllOf``; a satisfied ``AnyOf`` disappears; a
    one-operand operator is unwrapped. Used to tell a caller what it is missing.
    """
    return _unsatisfied(held_scopes(tuple(scopes)), expression)


def _unsatisfied(held: HeldScopes, expression: Expression) -> Expression | None:
    if isinstance(expression, str):
        return None if held.grants(expression) else expression
    operator, operands = _split(expression)
    if operator == "AnyOf" and any(held.satisfy(operand) for operand in operands):
        return None
    missing = [m for operand in operands if (m := _unsatisfied(held, operand)) is not None]
    if operator == "AllOf" and not missing:
        return None
    if len(missing) == 1:
        return missing[0]
    return {operator: missing}


def _split(expression: Mapping[str, Sequence[Expression]]) -> tuple[str, Sequence[Expression]]:
    if not isinstance(expression, Mapping) or len(expression) != 1:
        raise ValueError(f"scope expression must be a string or a one-key object: {expression!r}")
    ((operator, operands),) = expression.items()
    if operator not in _OPERATORS or isinstance(operands, str | bytes):
        raise ValueError(f"scope expression must use AnyOf or AllOf with a list: {expression!r}")
    return operator, operands


def render(expression: Expression) -> str:
    """The expression for a human: a lone scope as itself, anything else as indented JSON."""
    if isinstance(expression, str):
        return expression
    return json.dumps(expression, indent=2)


def expand(template: Template, params: Mapping[str, object]) -> Expression:
    """The expression ``template`` declares, for the parameters ``params``.

    :param template: a template (see the module docstring).
    :param params: every parameter the template reads: strings for ``<name>``, lists for
        ``for``, anything true or false for ``if``. A value is substituted once, so a
        parameter holding ``<x>`` (a task's own scopes may) stays as it is.
    :raises KeyError: a parameter the template reads is missing (a bug, not a 403).
    """
    if isinstance(template, str):
        return _fill(template, params)
    operator, operands = _template_split(template)
    return {operator: list(_operands(operands, params))}


def _template_split(template: Mapping[str, Any]) -> tuple[str, Sequence[Any]]:
    ((operator, operands),) = template.items()
    if operator not in _OPERATORS:
        raise ValueError(f"scope template must use AnyOf or AllOf: {template!r}")
    return operator, operands


def _operands(operands: Sequence[Any], params: Mapping[str, object]) -> Iterator[Expression]:
    for operand in operands:
        if isinstance(operand, str):  # the common case, ahead of the costlier Mapping checks
            yield _fill(operand, params)
        elif isinstance(operand, Mapping) and "for" in operand:
            var, each = operand["for"], operand["each"]
            for element in _parameter(params, operand["in"]):
                if isinstance(element, Mapping):
                    yield expand(each, {**params, var: element, **element})
                elif isinstance(each, str):  # the common case, without copying params
                    yield _fill(each, params, var, element)
                else:
                    yield expand(each, {**params, var: element})
        elif isinstance(operand, Mapping) and "if" in operand:
            if _parameter(params, operand["if"]):
                yield expand(operand["then"], params)
        else:
            yield expand(operand, params)


def _parameter(params: Mapping[str, object], name: str) -> Any:
    try:
        return params[name]
    except KeyError:
        raise KeyError(f"the scope template reads <{name}>, which nobody supplied") from None


def _fill(
    template: str, params: Mapping[str, object], var: str | None = None, element: object = None
) -> str:
    """``template`` with each ``<name>`` replaced by its parameter (``<var>`` by ``element``)."""
    parts = _split_placeholders(template)
    if len(parts) == 1:
        return template
    out: list[str] = []
    for index, part in enumerate(parts):
        if index % 2 == 0:
            out.append(part)
            continue
        value = element if part == var else _parameter(params, part)
        if not isinstance(value, str):
            raise TypeError(f"scope template parameter <{part}> must be a string: {value!r}")
        out.append(value)
    return "".join(out)


@functools.cache
def _split_placeholders(template: str) -> tuple[str, ...]:
    """Literal text and placeholder names, alternating (``"a:<b>/c"`` -> ``("a:", "b", "/c")``);
    the templates are the endpoint table's, so there are few of them."""
    return tuple(_PLACEHOLDER.split(template))


def template_parameters(template: Template) -> frozenset[str]:
    """Every parameter name ``template`` may read (a ``for`` loop's variable excluded)."""
    if isinstance(template, str):
        return frozenset(_PLACEHOLDER.findall(template))
    names: set[str] = set()
    for operand in next(iter(template.values())):
        if isinstance(operand, Mapping) and "for" in operand:
            names |= {operand["in"]} | (template_parameters(operand["each"]) - {operand["for"]})
        elif isinstance(operand, Mapping) and "if" in operand:
            names |= {operand["if"]} | template_parameters(operand["then"])
        else:
            names |= template_parameters(operand)
    return frozenset(names)


_PLACEHOLDER = re.compile(r"<([A-Za-z][A-Za-z0-9]*)>")


def granting(scope: str, parameter: str) -> Template:
    """``scope``, and every scope of the list parameter ``parameter``: what the auth service's
    creates and updates require, since a caller may only grant scopes it holds."""
    return {"AllOf": [scope, {"for": "scope", "in": parameter, "each": "<scope>"}]}


CREATE_TASK_SCOPES: Template = {
    "AllOf": [
        {"for": "scope", "in": "scopes", "each": "<scope>"},
        {"for": "route", "in": "routes", "each": "queue:route:<route>"},
        "queue:create-task:project:<projectId>",
        "queue:scheduler-id:<schedulerId>",
        {
            "AnyOf": [
                {
                    "for": "priority",
                    "in": "priorities",
                    "each": "queue:create-task:<priority>:<provisionerId>/<workerType>",
                }
            ]
        },
    ]
}
"""Everything Taskcluster's ``createTask`` requires of the caller: the task's own ``scopes`` (a
caller can only delegate what it holds), ``queue:route:<r>`` for each route, the project and
schedulerId scopes, and the create-task scope at the task's priority or any higher one
(``priorities``, see :func:`priority_ladder`)."""


def priority_ladder(priority: str) -> tuple[str, ...]:
    """The priorities whose create-task scope allows creating a task at ``priority``: it and
    every higher one (``normal`` means ``lowest``).

    :raises ValueError: an unknown priority.
    """
    level = canonical_priority(priority)
    if level not in PRIORITIES:
        raise ValueError(f"unknown priority {priority!r}")
    return tuple(PRIORITIES[: PRIORITIES.index(level) + 1])


def create_task_expression(priority: str, provisioner_id: str, worker_type: str) -> Expression:
    """Taskcluster's priority ladder: ``queue:create-task:<p>:<prov>/<wt>`` at ``priority``
    or any higher priority (a scope for a higher priority also allows lower ones).

    ``normal`` means ``lowest``. The legacy priority-less ``queue:create-task:<prov>/<wt>`` is
    not accepted: current Taskcluster dropped it together with ``queue:define-task``.
    """
    return {
        "AnyOf": [
            f"queue:create-task:{p}:{provisioner_id}/{worker_type}"
            for p in priority_ladder(priority)
        ]
    }


def create_task_params(task: Mapping[str, Any]) -> dict[str, Hashable]:
    """The parameters of :data:`CREATE_TASK_SCOPES` for a (schema-valid) task definition,
    hashable so that the handlers' ``declared`` caches the expression (a producer's tasks
    mostly share theirs)."""
    provisioner_id, worker_type = definitions.task_queue_of(task)
    return {
        "priorities": priority_ladder(task.get("priority", "lowest")),
        "provisionerId": provisioner_id,
        "workerType": worker_type,
        "schedulerId": task.get("schedulerId", "-"),
        "projectId": task.get("projectId", DEFAULT_PROJECT_ID),
        "routes": tuple(task.get("routes", ())),
        "scopes": tuple(task.get("scopes", ())),
    }


def create_task_requirement(
    *,
    priority: str,
    provisioner_id: str,
    worker_type: str,
    scheduler_id: str,
    project_id: str,
    routes: Sequence[str],
    scopes: Sequence[str],
) -> Expression:
    """:data:`CREATE_TASK_SCOPES` for a task with these fields."""
    return expand(
        CREATE_TASK_SCOPES,
        {
            "priorities": priority_ladder(priority),
            "provisionerId": provisioner_id,
            "workerType": worker_type,
            "schedulerId": scheduler_id,
            "projectId": project_id,
            "routes": routes,
            "scopes": scopes,
        },
    )


def scope_compare(scope: str) -> tuple[str, int]:
    """The sort key of ``taskcluster-lib-scopes``' ``scopeCompare``: lexical, except that a
    trailing ``*`` sorts before the end of the string, so ``a*`` comes right before ``a`` and
    the scopes ``a*`` covers follow it in one run (``["*", "", "a*", "a", "a(", "aa", "b"]`` is
    sorted). A ``*`` that is not the last character is an ordinary character.

    Normalizing relies on that run: one pass drops what the last kept ``*`` scope covers.
    """
    if scope.endswith("*"):
        return scope[:-1], 0
    return scope, 1


def normalize_scope_set(scopes: Iterable[str]) -> tuple[str, ...]:
    """``scopes`` as a normalized set: duplicates and the scopes some ``*`` scope of the set
    grants dropped, the rest sorted by :func:`scope_compare` (``["abc", "ab*", "b", "b*"]`` ->
    ``("ab*", "b*")``).

    Unlike upstream's ``normalizeScopeSet`` the input need not be sorted first; an input that
    is a few sorted runs (normalized sets put together) sorts in about linear time.
    """
    normalized: list[str] = []
    covering: str | None = None  # what the last kept scope covers, if it ends with "*"
    for scope in sorted(set(scopes), key=scope_compare):
        if covering is not None and scope.startswith(covering):
            continue
        normalized.append(scope)
        covering = scope[:-1] if scope.endswith("*") else None
    return tuple(normalized)


def merge_scope_sets(first: Iterable[str], second: Iterable[str]) -> tuple[str, ...]:
    """The normalized union of two scope sets (upstream's ``mergeScopeSets``, which requires
    both sorted; here any order is accepted, and two normalized sets merge in linear time)."""
    return normalize_scope_set((*first, *second))


def scope_union(first: Iterable[str], second: Iterable[str]) -> tuple[str, ...]:
    """Upstream's ``scopeUnion``: the normalized union of two scope sets in any order. The same
    as :func:`merge_scope_sets`, which here does not need its inputs sorted either."""
    return merge_scope_sets(first, second)


def scope_intersection(first: Iterable[str], second: Iterable[str]) -> tuple[str, ...]:
    """The scopes granted by both sets, normalized: each scope of one set that the other set
    grants (``["bar:*"]`` and ``["foo:x", "bar:x"]`` -> ``("bar:x",)``; ``["a*"]`` and
    ``["a*"]`` -> ``("a*",)``).

    Upstream's ``scopeIntersection`` returns the same scopes in input order, redundant ones
    kept; a scope set is what the caller holds, so the normalized form says the same.
    """
    first, second = tuple(first), tuple(second)
    held_first, held_second = HeldScopes(first), HeldScopes(second)
    return normalize_scope_set(
        [*(s for s in first if held_second.grants(s)), *(s for s in second if held_first.grants(s))]
    )
