"""The policies, one module each, and the registry that picks one by name.

Every policy takes its shared steps from fairshare.core.cycle and puts what it decided
in a `fairshare.core.cycle.Decision`, from which `fairshare.core.cycle.lnode_table`
builds its new lnode table with the bookkeeping they share:

- `unicos`: the UNICOS user-level policy (Kay-Lauder, the guide), the default;
- `slurm`: Slurm's classic fair-share factor (seed 002);
- `feedback`: seed 004's hierarchical feedback design.

`run_cycle` is the one entry point the daemon, the simulator and the tests call;
`fair_usage` the one shrinfo asks for a fair level (fairshare.core.fair).
"""

from __future__ import annotations

from fairshare.core.consts import Consts
from fairshare.core.cycle import Consumption, Policy
from fairshare.core.fair import SplitFigures
from fairshare.core.lnode import LnodeTable
from fairshare.core.policies.feedback import FeedbackPolicy
from fairshare.core.policies.slurm import SlurmPolicy
from fairshare.core.policies.unicos import UnicosPolicy
from fairshare.core.tree import ShareTree

#: The policies by name (fairshare.core.consts.CHOICES["policy"] lists the names a UDB may hold).
POLICIES: dict[str, Policy] = {
    "unicos": UnicosPolicy(),
    "feedback": FeedbackPolicy(),
    "slurm": SlurmPolicy(),
}
#: The policy of the default constants.
DEFAULT_POLICY: Policy = POLICIES["unicos"]


def policy_for(consts: Consts) -> Policy:
    """The policy `consts` selects (`shradmin --policy`)."""
    return POLICIES[consts.policy]


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
