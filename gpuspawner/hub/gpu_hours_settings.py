"""``GPUHourSettings``: the GPU-hour knobs (weights, budgets) the spawner and the usage handlers read."""

from __future__ import annotations

import math

from traitlets import Bool, Dict, Float, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from gpuspawner.usage.budgets import MOST_GENEROUS, BudgetRule, check_combine, parse_rules
from gpuspawner.usage.weights import Weights


class GPUHourSettings(Configurable):
    """The GPU-hour ledger's weights and the budgets enforced at launch."""

    gpu_hour_weights = Dict(
        config=True,
        help="""
        How many GPU-hours an hour on a GPU counts, per product name (GPU Feature Discovery's
        ``nvidia.com/gpu.product``; case, spaces and dashes alike) or per pool id glob (a key with
        ``:`` or ``*``; globs are tried first, in order). Unlisted GPUs count 1. A MIG slice or a
        time-sliced share counts its fraction of a GPU (1g of 7 slices: 1/7) times its GPU's weight.

            c.GPUSpawner.gpu_hour_weights = {"NVIDIA H100 80GB HBM3": 2, "t4-pool:*": 0.5}
        """,
    )
    gpu_hour_budgets = List(
        Dict(),
        config=True,
        help="""
        GPU-hour budgets, enforced when a GPU server starts. Each rule has exactly the keys
        ``scope`` (``"everyone"``, ``"group:NAME"`` or ``"user:NAME"``), ``gpu_hours`` (weighted
        GPU-hours, 0 or more) and ``window`` (``"<N>d"`` or ``"<N>h"``, a rolling window, or
        ``"month"``, the calendar month in UTC). A user's own rule wins over their groups' rules,
        which win over everyone's; several group rules combine as ``gpu_hour_budget_groups`` says.
        No rule: no budget.

            c.GPUSpawner.gpu_hour_budgets = [
                {"scope": "everyone", "gpu_hours": 20, "window": "30d"},
                {"scope": "group:research", "gpu_hours": 200, "window": "month"},
                {"scope": "user:ada", "gpu_hours": 500, "window": "30d"},
            ]
        """,
    )
    gpu_hour_budget_groups = Unicode(
        MOST_GENEROUS,
        config=True,
        help="""
        How the budgets of a user's groups combine when several apply: ``"most_generous"`` (the
        default: the rule that leaves the user the most GPU-hours now) or ``"least_generous"``.

            c.GPUSpawner.gpu_hour_budget_groups = "least_generous"
        """,
    )
    gpu_hour_minimum_minutes = Float(
        10.0,
        config=True,
        help="""
        The least time (minutes) the remaining budget must cover with the GPUs asked for, or the
        spawn is refused with 403 and the time enough GPU-hours come back. 0: any budget left lets
        a server start.

            c.GPUSpawner.gpu_hour_minimum_minutes = 30
        """,
    )
    gpu_hour_stop_when_spent = Bool(
        False,
        config=True,
        help="""
        Stop running GPU servers whose user's budget is spent (``gpuspawner cull`` does it; the
        home page warns the user ``gpu_hour_warn_minutes`` ahead). False (the default): a
        running server runs on; only the next launch is refused.

            c.GPUSpawner.gpu_hour_stop_when_spent = True
        """,
    )
    gpu_hour_warn_minutes = Float(
        30.0,
        config=True,
        help="""
        With ``gpu_hour_stop_when_spent``, how many minutes before the budget runs out the home
        page warns that the running servers will be stopped.

            c.GPUSpawner.gpu_hour_warn_minutes = 60
        """,
    )

    @validate("gpu_hour_weights")
    def _validate_gpu_hour_weights(self, proposal):
        try:
            Weights.from_config(proposal.value, "c.GPUSpawner.gpu_hour_weights")
        except ValueError as e:
            raise TraitError(f'{e}; e.g. c.GPUSpawner.gpu_hour_weights = {{"NVIDIA H100 80GB HBM3": 2}}') from None
        return proposal.value

    @validate("gpu_hour_budgets")
    def _validate_gpu_hour_budgets(self, proposal):
        try:
            parse_rules(proposal.value, "c.GPUSpawner.gpu_hour_budgets")
        except ValueError as e:
            raise TraitError(f'{e}; e.g. c.GPUSpawner.gpu_hour_budgets = '
                             '[{"scope": "everyone", "gpu_hours": 20, "window": "30d"}]') from None
        return proposal.value

    @validate("gpu_hour_budget_groups")
    def _validate_gpu_hour_budget_groups(self, proposal):
        try:
            return check_combine(proposal.value)
        except ValueError as e:
            raise TraitError(f'c.GPUSpawner.{e}; e.g. c.GPUSpawner.gpu_hour_budget_groups = "least_generous"') from None

    @validate("gpu_hour_minimum_minutes", "gpu_hour_warn_minutes")
    def _validate_gpu_hour_minutes(self, proposal):
        value = proposal.value
        if not value >= 0 or math.isinf(value):
            raise TraitError(f"c.GPUSpawner.{proposal.trait.name} must be 0 or more minutes, not {value!r}; "
                             f"e.g. c.GPUSpawner.{proposal.trait.name} = 10")
        return value

    def gpu_hour_weights_rules(self) -> Weights:
        return Weights.from_config(self.gpu_hour_weights)

    def gpu_hour_budget_rules(self) -> tuple[BudgetRule, ...]:
        return parse_rules(self.gpu_hour_budgets)
