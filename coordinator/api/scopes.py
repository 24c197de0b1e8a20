"""Taskcluster scopes and scope expressions: satisfaction, rendering, and the queue's rules.

Pure functions, no I/O. A *scope* is a string of printable ASCII; a held scope ending in
``*`` satisfies every scope starting with what precedes the ``*`` (a ``*`` anywhere else is
literal). A *scope expression* is a scope, ``{"AnyOf": [expr, ...]}`` or
``{"AllOf": [expr, ...]}``; an empty ``AllOf`` is always satisfied and an empty ``AnyOf``
never, as in ``taskcluster-lib-scopes``.

The helpers at the bottom build the expressions the Taskcluster queue requires for
``createTask``; the rest of the endpoints need only plain scope strings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias

from coordinator.domain.task_queues import PRIORITIES, canonical_priority

Expression: TypeAlias = "str | Mapping[str, Sequence[Expression]]"

_VALID_SCOPE = re.compile(r"^[\x20-\x7e]*$")
_OPERATORS = ("AnyOf", "AllOf")


def valid_scope(scope: object) -> bool:
    """Whether ``scope`` is a string of printable ASCII, Taskcluster's only rule for scopes."""
    return isinstance(scope, str) and _VALID_SCOPE.match(scope) is not None


def scope_satisfies(held: str, required: str) -> bool:
    """Whether the one scope ``held`` grants the one scope ``required``."""
    if held == required:
        return True
    return held.endswith("*") and required.startswith(held[:-1])


def satisfies(scopes: Iterable[str], expression: Expression) -> bool:
    """Whether the scope set ``scopes`` satisfies ``expression``.

    Raises ``ValueError`` for a malformed expression (a programming error, not a 403).
    """
    held = tuple(scopes)
    return _satisfies(held, expression)


def _satisfies(held: tuple[str, ...], expression: Expression) -> bool:
    if isinstance(expression, str):
        return any(scope_satisfies(scope, expression) for scope in held)
    operator, operands = _split(expression)
    if operator == "AnyOf":
        return any(_satisfies(held, operand) for operand in operands)
    return all(_satisfies(held, operand) for operand in operands)


def unsatisfied(scopes: Iterable[str], expression: Expression) -> Expression | None:
    """The part of ``expression`` that ``scopes`` does not satisfy, or ``None`` if satisfied.

    Satisfied scopes are removed from an ``AllOf``; a satisfied ``AnyOf`` disappears; a
    one-operand operator is unwrapped. Used to tell a caller what it is missing.
    """
    held = tuple(scopes)
    return _unsatisfied(held, expression)


def _unsatisfied(held: tuple[str, ...], expression: Expression) -> Expression | None:
    if isinstance(expression, str):
        return None if _satisfies(held, expression) else expression
    operator, operands = _split(expression)
    if operator == "AnyOf" and any(_satisfies(held, operand) for operand in operands):
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


def create_task_expression(priority: str, provisioner_id: str, worker_type: str) -> Expression:
    """Taskcluster's priority ladder: ``queue:create-task:<p>:<prov>/<wt>`` at ``priority``
    or any higher priority (a scope for a higher priority also allows lower ones).

    ``normal`` means ``lowest``. The legacy priority-less ``queue:create-task:<prov>/<wt>`` is
    not accepted: current Taskcluster dropped it together with ``queue:define-task``.
    """
    level = canonical_priority(priority)
    if level not in PRIORITIES:
        raise ValueError(f"unknown priority {priority!r}")
    allowed = PRIORITIES[: PRIORITIES.index(level) + 1]
    return {"AnyOf": [f"queue:create-task:{p}:{provisioner_id}/{worker_type}" for p in allowed]}


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
    """Everything Taskcluster's ``createTask`` requires of the caller.

    The task's own ``scopes`` (a caller can only delegate what it holds), ``queue:route:<r>``
    for each route, ``queue:create-task:project:<projectId>``,
    ``queue:scheduler-id:<schedulerId>`` and the priority ladder.
    """
    required: list[Expression] = [*scopes]
    required.extend(f"queue:route:{route}" for route in routes)
    required.append(f"queue:create-task:project:{project_id}")
    required.append(f"queue:scheduler-id:{scheduler_id}")
    required.append(create_task_expression(priority, provisioner_id, worker_type))
    return {"AllOf": required}
