"""The policies, one module each, and the registry that picks one by name.

Every policy takes its shared steps from fairshare.core.cycle and puts what it decided
in a `fairshare.core.cycle.Decision`, from which `fairshare.core.cycle.lnode_table`
builds its new lnode table with the bookkeeping they share:

- `unicos`: the UNICOS user-level policy (Kay-Lauder, the guide), the default;
- `slurm`: Slurm's classic fair-share factor (seed 002);
- `feedback`: seed 004's hierarchical feedback design;
- a site's own, installed in the entry-point group "fairshare.policies"
  (fairshare.core.plugins), listed after these.

`run_cycle` is the one entry point the daemon, the simulator and the tests call;
`fair_usage` the one shrinfo asks for a fair level (fairshare.core.fair).
"""

from __future__ import annotations

import logging

from fairshare.core import plugins
from fairshare.core.consts import Consts
from fairshare.core.cycle import Consumption, Policy
from fairshare.core.fair import SplitFigures
from fairshare.core.lnode import LnodeTable
from fairshare.core.policies.feedback import FeedbackPolicy
from fairshare.core.policies.slurm import SlurmPolicy
from fairshare.core.policies.unicos import UnicosPolicy
from fairshare.core.tree import ShareTree

log = logging.getLogger("fairshare.core.policies")

#: The suite's own policies by name (fairshare.core.consts.CHOICES["policy"]).
BUILTIN: dict[str, Policy] = {
    "unicos": UnicosPolicy(),
    "feedback": FeedbackPolicy(),
    "slurm": SlurmPolicy(),
}
#: Every policy by name: the suite's, then those installed in the entry-point group
#: "fairshare.policies" (fairshare.core.plugins; `load_plugins` loads them again).
POLICIES: dict[str, Policy] = dict(BUILTIN)
#: Where each policy of POLICIES comes from: "the suite's" or "plug-in module:attribute".
ORIGINS: dict[str, str] = {}
#: The policy of the default constants.
DEFAULT_POLICY: Policy = POLICIES["unicos"]


def load_plugins() -> dict[str, Policy]:
    """POLICIES made again: the suite's policies and the plug-ins installed now (a
    plug-in that fails to load is logged and left out); returns it."""
    plugins.invalidate()
    loaded = plugins.load_policies(tuple(BUILTIN))
    POLICIES.clear()
    POLICIES.update(BUILTIN)
    POLICIES.update({name: policy for name, (policy, _where) in loaded.items()})  # type: ignore[misc]
    ORIGINS.clear()
    ORIGINS.update({name: "the suite's" for name in BUILTIN})
    ORIGINS.update({name: f"plug-in {where}" for name, (_policy, where) in loaded.items()})
    return POLICIES


load_plugins()


def policy_for(consts: Consts) -> Policy:
    """The policy `consts` selects (`shradmin --policy`); the default, logged once, when
    it names a plug-in no longer installed or that does not load."""
    policy = POLICIES.get(consts.policy)
    if policy is None:
        if consts.policy not in _missing:
            _missing.add(consts.policy)
            log.warning("policy %s is not installed: %s runs", consts.policy, DEFAULT_POLICY.name)
        return DEFAULT_POLICY
    return policy


_missing: set[str] = set()


def run_cycle(
    tree: ShareTree,
    table: LnodeTable,
    consumption: Consumption,
    consts: Consts,
    elapsed: float,
    policy: Policy | None = None,
) -> LnodeTable:
    """The new lnode table after one cycle of `elapsed` seconds (pure; `table` untouched).

    `consumption` is what each leaf consumed during those seconds; leaves with processes
    (refs), runnable processes or CPU use become active even if `activate` was not
    called for them (with their current usage, 0 for a new lnode).  The policy is the
    one `consts` selects unless `policy` is given.
    """
    return (policy or policy_for(consts)).cycle(tree, table, consumption, consts, elapsed)


def fair_usage(
    figures: SplitFigures, node: int, consts: Consts, policy: Policy | None = None
) -> float | None:
    """u*, the usage (charge units) at which lnode `node` of `figures` would get its due
    part as the cycle splits the machine under `consts` (fairshare.core.fair): the
    policy `consts` selects, unless `policy` is given.  None when there is none (no
    other lnode wants CPU)."""
    return (policy or policy_for(consts)).fair_usage(figures, node, consts)
