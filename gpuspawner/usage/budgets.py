"""Budget rules (``gpu_hour_budgets``) and which one applies to a user."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gpuspawner.usage.windows import Window

RULE_KEYS = ("scope", "gpu_hours", "window")
EVERYONE = "everyone"
# how several group rules combine (gpu_hour_budget_groups)
MOST_GENEROUS = "most_generous"
LEAST_GENEROUS = "least_generous"
COMBINE = (MOST_GENEROUS, LEAST_GENEROUS)

EXAMPLE = '{"scope": "group:students", "gpu_hours": 20, "window": "30d"}'


@dataclass(frozen=True)
class BudgetRule:
    """One rule: ``kind`` is ``everyone``, ``group`` or ``user``; ``name`` the group or user."""

    kind: str
    name: str | None
    gpu_hours: float
    window: Window

    @property
    def scope(self) -> str:
        return EVERYONE if self.kind == EVERYONE else f"{self.kind}:{self.name}"

    @classmethod
    def from_config(cls, value: object, where: str) -> "BudgetRule":
        if not isinstance(value, Mapping):
            raise ValueError(f"{where} must be a dict such as {EXAMPLE}, not {value!r}")
        keys = set(value)
        if keys != set(RULE_KEYS):
            missing = [k for k in RULE_KEYS if k not in keys]
            extra = sorted(str(k) for k in keys - set(RULE_KEYS))
            said = []
            if missing:
                said.append(f"missing {', '.join(missing)}")
            if extra:
                said.append(f"unknown key(s) {', '.join(extra)}")
            raise ValueError(f"{where} must have exactly the keys scope, gpu_hours and window ({'; '.join(said)}), "
                             f"e.g. {EXAMPLE}")
        scope = value["scope"]
        if not isinstance(scope, str):
            raise ValueError(f'{where}: scope must be "everyone", "group:NAME" or "user:NAME", not {scope!r}')
        if scope == EVERYONE:
            kind, name = EVERYONE, None
        else:
            kind, _, name = scope.partition(":")
            if kind not in ("group", "user") or not name.strip():
                raise ValueError(f'{where}: scope must be "everyone", "group:NAME" or "user:NAME", not {scope!r}')
        hours = value["gpu_hours"]
        if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not math.isfinite(hours) or hours < 0:
            raise ValueError(f"{where}: gpu_hours must be a number of GPU-hours, 0 or more, not {hours!r}")
        try:
            window = Window.parse(value["window"])
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        return cls(kind, name, float(hours), window)


def parse_rules(value: object, where: str = "gpu_hour_budgets") -> tuple[BudgetRule, ...]:
    """The rules of the trait, or ValueError naming the rule and what to fix."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where} must be a list of rules such as [{EXAMPLE}], not {value!r}")
    rules = tuple(BudgetRule.from_config(v, f"{where}[{i}]") for i, v in enumerate(value))
    seen: dict[str, int] = {}
    for i, rule in enumerate(rules):
        if rule.scope in seen:
            raise ValueError(f"{where}[{i}]: scope {rule.scope!r} already has a rule ({where}[{seen[rule.scope]}]); "
                             "give each scope one rule")
        seen[rule.scope] = i
    return rules


def check_combine(value: object) -> str:
    if value not in COMBINE:
        raise ValueError(f"gpu_hour_budget_groups must be {MOST_GENEROUS!r} (the default) or {LEAST_GENEROUS!r}, "
                         f"not {value!r}")
    return value  # type: ignore[return-value]


def candidates(rules: Iterable[BudgetRule], user: str, groups: Iterable[str]) -> tuple[BudgetRule, ...]:
    """The rules that may apply to ``user``: their own rule; else their groups' rules; else everyone's."""
    rules = tuple(rules)
    own = tuple(r for r in rules if r.kind == "user" and r.name == user)
    if own:
        return own
    names = set(groups)
    grouped = tuple(r for r in rules if r.kind == "group" and r.name in names)
    if grouped:
        return grouped
    return tuple(r for r in rules if r.kind == EVERYONE)


def choose(rules: tuple[BudgetRule, ...], remaining: Callable[[BudgetRule], float], combine: str) -> BudgetRule | None:
    """Of several group rules, the one leaving the user the most GPU-hours now (``most_generous``) or the
    fewest (``least_generous``); the first listed on a tie. Rules with different windows compare by
    what each leaves now, which is what a user can spend."""
    if not rules:
        return None
    if len(rules) == 1:
        return rules[0]
    scored = [(remaining(r), i, r) for i, r in enumerate(rules)]
    if combine == LEAST_GENEROUS:
        return min(scored, key=lambda t: (t[0], t[1]))[2]
    return min(scored, key=lambda t: (-t[0], t[1]))[2]
