"""Role expansion: the scopes a scope set holds once every role it may assume is assumed.

Pure, no I/O; Taskcluster's semantics (``services/auth/src/scoperesolver.js`` and
``trie.js``), computed differently. A role is a roleId with scopes, given here as a mapping
roleId -> scopes:

* a scope ``assume:<roleId>`` grants the role's scopes, and what those grant, to a fixpoint;
* a roleId ending in ``*`` is *parameterized*: ``assume:<prefix><rest>`` assumes the role
  ``<prefix>*`` for any ``<rest>``, and each of its scopes holding ``<..>`` is granted with
  ``<..>`` replaced by ``<rest>`` (``project:*`` with ``irc:<..>`` gives ``assume:project:x``
  the scope ``irc:x``). When ``<rest>`` ends in ``*`` it replaces ``<..>`` *and everything
  after it*: ``A<..>B`` with ``x*`` grants ``Ax*``, which holds all that ``AxB`` could be;
* a held scope ending in ``*`` assumes every role it could assume: ``assume:a*`` assumes
  ``a``, ``ab`` and ``abc*`` (whose ``<..>`` becomes ``*``) as well as ``a*`` and ``*``-roles
  whose prefix it extends (``assume:abc*`` assumes ``ab*`` with ``<rest>`` ``c*``). So do
  ``assume:*`` and the ``*`` scopes that cover it (``*``, ``a*``, ... ``assume*``): ``*``
  grants every role's scopes. Any other scope grants nothing (``:*`` is not ``assume:*``);
* a ``*`` that is not a scope's last character is an ordinary character, and ``<..>`` is
  one only in a parameterized role's scopes.

:func:`check_roles` is Taskcluster's ``validateRoles`` (no dependency cycle, at most one
``<..>`` per scope, no ``*<..>`` at a scope's end) plus this service's bound,
:data:`~coordinator.domain.clients.MAX_EXPANDED_SCOPES`. A *dependency* is judged as upstream
does, on the worst parameter: a role depends on every role one of its scopes could assume with
``<..>`` replaced by ``*``, so ``a*`` granting ``assume:ab<..>`` is a cycle even though no
finite expansion loops, and a role granting ``*`` depends on itself.

:class:`RoleExpansion` is the roles compiled for expanding many scope sets: each role's own
scopes are expanded once, in dependency order, so a request's expansion is a union of those
and only the parameterized scopes are expanded per request. Expanded sets are normalized
(:func:`~coordinator.domain.scopes.normalize_scope_set`).

Upstream no longer adds ``assume:client-id:<clientId>`` to a client's scopes (bug 1220686), so
a client's scopes expand as they are.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from coordinator.domain.clients import MAX_EXPANDED_SCOPES
from coordinator.domain.errors import InputError
from coordinator.domain.scopes import normalize_scope_set, valid_scope

ASSUME = "assume:"
"""The prefix of a scope that assumes a role."""

PARAMETER = "<..>"
"""Where a parameterized role's scope takes the rest of the assumed roleId."""

CACHE_SIZE = 1024
"""How many expansions a :class:`RoleExpansion` remembers (by input scope tuple)."""

RoleErrorCode = Literal["DependencyCycleError", "InvalidScopeError", "TooManyScopes"]


class RoleError(InputError):
    """A role set that may not be stored: :attr:`code` is upstream's ``err.code`` (or
    ``TooManyScopes`` for this service's bound), :attr:`role_id` the role at fault;
    :attr:`cycle` (roleIds, the first repeated at the end) or :attr:`scope` says why, for an
    error body's details."""

    def __init__(
        self,
        message: str,
        *,
        code: RoleErrorCode,
        role_id: str,
        cycle: tuple[str, ...] = (),
        scope: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code: RoleErrorCode = code
        self.role_id = role_id
        self.cycle = cycle
        self.scope = scope


@dataclass(frozen=True, slots=True)
class _Role:
    """A role compiled: its scopes granted as they are, and (for a parameterized role) each
    scope holding ``<..>`` as the text before and after it."""

    role_id: str
    literal: tuple[str, ...]
    templates: tuple[tuple[str, str], ...]

    @property
    def key(self) -> str:
        """What an ``assume:`` scope's roleId part is matched against: the roleId, without
        its ``*`` for a parameterized role."""
        return self.role_id[:-1] if self.role_id.endswith("*") else self.role_id


def _compile(role_id: str, scopes: Sequence[str]) -> _Role:
    """The role compiled; :class:`RoleError` for a scope ``validateRoles`` refuses (or one that
    is no scope at all)."""
    for scope in scopes:
        if not valid_scope(scope):
            raise RoleError(
                f"role {role_id!r} has the scope {scope!r}, which is not printable ASCII",
                code="InvalidScopeError",
                role_id=role_id,
                scope=scope,
            )
    if not role_id.endswith("*"):
        return _Role(role_id, tuple(scopes), ())
    literal: list[str] = []
    templates: list[tuple[str, str]] = []
    for scope in scopes:
        before, parameter, after = scope.partition(PARAMETER)
        if not parameter:
            literal.append(scope)
            continue
        if PARAMETER in after:
            why = "contains more than one '<..>'"
        elif not after and before.endswith("*"):
            why = "ends with '*<..>' (an ambiguous '*')"
        else:
            templates.append((before, after))
            continue
        raise RoleError(
            f"role {role_id!r} has the parameterized scope {scope!r}, which {why}",
            code="InvalidScopeError",
            role_id=role_id,
            scope=scope,
        )
    return _Role(role_id, tuple(literal), tuple(dict.fromkeys(templates)))


def _substitute(template: tuple[str, str], parameter: str) -> str:
    """A parameterized scope with ``<..>`` replaced by ``parameter``; a parameter ending in
    ``*`` replaces the rest of the scope too (it stands for any text, suffix included)."""
    before, after = template
    if parameter.endswith("*"):
        return before + parameter
    return before + parameter + after


class _Index:
    """The roles, looked up by the ``assume:`` scopes that assume them: exact roleIds in a
    dict, parameterized ones by prefix (tried only at the lengths some prefix has), and all
    keys sorted for the roles a ``*`` scope covers."""

    def __init__(self, roles: Iterable[_Role]) -> None:
        self.exact: dict[str, _Role] = {}
        self.prefixed: dict[str, _Role] = {}
        for role in roles:
            (self.prefixed if role.role_id.endswith("*") else self.exact)[role.key] = role
        self.lengths = sorted({len(prefix) for prefix in self.prefixed})
        ordered = sorted([*self.exact.values(), *self.prefixed.values()], key=lambda r: r.key)
        self.keys = [role.key for role in ordered]
        self.ordered = ordered

    def assumed(self, scope: str) -> Iterator[tuple[_Role, str]]:
        """Each role ``scope`` assumes, with the parameter its ``<..>`` takes (meaningless
        for a role that is not parameterized)."""
        if scope.startswith(ASSUME):
            wanted = scope[len(ASSUME) :]
        elif scope.endswith("*") and ASSUME.startswith(scope[:-1]):
            wanted = "*"  # "*", "a*", ... "assume*" cover "assume:*"
        else:
            return
        if not wanted.endswith("*"):
            if (role := self.exact.get(wanted)) is not None:
                yield role, ""
            yield from self._extended(wanted, len(wanted) + 1, "")
            return
        stem = wanted[:-1]
        # every role whose roleId (or prefix) starts with the stem is covered; a
        # parameterized one takes any parameter
        index = bisect.bisect_left(self.keys, stem)
        while index < len(self.keys) and self.keys[index].startswith(stem):
            yield self.ordered[index], "*"
            index += 1
        # and a parameterized role whose prefix the stem extends takes the rest, with its "*"
        yield from self._extended(stem, len(stem), "*")

    def _extended(self, wanted: str, below: int, star: str) -> Iterator[tuple[_Role, str]]:
        """The parameterized roles whose prefix is a prefix of ``wanted`` shorter than
        ``below``, each with the rest of ``wanted`` (and ``star``) as parameter."""
        for length in self.lengths:
            if length >= below:
                break
            if (role := self.prefixed.get(wanted[:length])) is not None:
                yield role, wanted[length:] + star


def _dependency_order(index: _Index, roles: Iterable[_Role]) -> list[_Role]:
    """The roles, each after every role it depends on (see the module docstring).

    :raises RoleError: a dependency cycle, named as roleIds.
    """

    def dependencies(role: _Role) -> Iterator[_Role]:
        worst = (*role.literal, *(before + "*" for before, _ in role.templates))
        found = {r.role_id: r for scope in worst for r, _ in index.assumed(scope)}
        return iter(found.values())

    order: list[_Role] = []
    done: set[str] = set()
    for root in roles:
        if root.role_id in done:
            continue
        stack = [(root, dependencies(root))]
        depth = {root.role_id: 0}  # the roles on the stack, at their position
        while stack:
            role, pending = stack[-1]
            dependency = next(pending, None)
            if dependency is None:
                stack.pop()
                del depth[role.role_id]
                done.add(role.role_id)
                order.append(role)
            elif dependency.role_id in depth:
                on_path = [r.role_id for r, _ in stack[depth[dependency.role_id] :]]
                cycle = (*on_path, dependency.role_id)
                raise RoleError(
                    "roles may not form a dependency cycle, and role "
                    f"{dependency.role_id!r} is in one: "
                    + " -> ".join(repr(role_id) for role_id in cycle)
                    + " (each grants a scope that could assume the next)",
                    code="DependencyCycleError",
                    role_id=dependency.role_id,
                    cycle=cycle,
                )
            elif dependency.role_id not in done:
                depth[dependency.role_id] = len(stack)
                stack.append((dependency, dependencies(dependency)))
    return order


class RoleExpansion:
    """A role set compiled for expanding scope sets (see the module docstring).

    Each role's own scopes are expanded once, here, in dependency order, so expanding a scope
    set is the union of the expansions of the roles it assumes, plus the expansion of their
    parameterized scopes for the parameter at hand. The last :data:`CACHE_SIZE` answers are
    kept by input, since every request with temporary credentials or ``authorizedScopes``
    expands its scopes, and the same few sets recur.

    :raises RoleError: ``roles`` that :func:`check_roles` refuses for a cycle or a scope (not
        for the bound, which this does not check).
    """

    def __init__(self, roles: Mapping[str, Sequence[str]]) -> None:
        compiled = [_compile(role_id, scopes) for role_id, scopes in roles.items()]
        self._index = _Index(compiled)
        # what each role's unparameterized scopes grant, themselves included; not normalized,
        # which would cost a sort per role, for a request's expansion sorts its union anyway
        self._granted: dict[str, frozenset[str]] = {}
        for role in _dependency_order(self._index, compiled):
            self._granted[role.role_id] = frozenset(self._closure(role.literal))
        self._expand = functools.lru_cache(maxsize=CACHE_SIZE)(self._expand_uncached)

    def expand(self, scopes: Iterable[str]) -> tuple[str, ...]:
        """``scopes`` and everything the roles they assume grant, as a normalized set."""
        return self._expand(tuple(scopes))

    def _expand_uncached(self, scopes: tuple[str, ...]) -> tuple[str, ...]:
        return normalize_scope_set(self._closure(scopes))

    def _closure(self, scopes: Iterable[str]) -> set[str]:
        """``scopes`` and all they grant, not normalized. Needs ``_granted`` of every role they
        may reach (so, while compiling, of every role the role at hand depends on)."""
        closure: set[str] = set()
        pending = list(scopes)
        while pending:
            scope = pending.pop()
            if scope in closure:
                continue  # already expanded, or in a role's expansion (which is closed)
            closure.add(scope)
            for role, parameter in self._index.assumed(scope):
                closure.update(self._granted[role.role_id])
                pending.extend(_substitute(t, parameter) for t in role.templates)
        return closure


def check_roles(roles: Mapping[str, Sequence[str]]) -> None:
    """Refuse a role set that may not be stored: Taskcluster's ``validateRoles`` (a dependency
    cycle, a parameterized scope with two ``<..>`` or ending in ``*<..>``; also a scope that
    is not printable ASCII), and a role whose expansion (what ``assume:<roleId>`` grants, a
    role's ``expandedScopes``) has more than
    :data:`~coordinator.domain.clients.MAX_EXPANDED_SCOPES` scopes, which would make every
    request of a client holding it expensive.

    :raises RoleError: saying which role and why.
    """
    expansion = RoleExpansion(roles)
    for role_id in roles:
        closure = expansion._closure((ASSUME + role_id,))
        if len(closure) <= MAX_EXPANDED_SCOPES:
            continue  # normalizing only shrinks it
        size = len(normalize_scope_set(closure))
        if size > MAX_EXPANDED_SCOPES:
            raise RoleError(
                f"role {role_id!r} expands to {size:,} scopes, more than the "
                f"{MAX_EXPANDED_SCOPES:,} a role's expansion may have",
                code="TooManyScopes",
                role_id=role_id,
            )
