"""shrsim --compare: one scenario under several policies, side by side.

Each policy named (fairshare.core.policies.POLICIES, the registry `shradmin --policy` takes
its names from) runs the whole scenario on its own simulated machine, from the same
start: only `Consts.policy` differs.  The comparison is one row per lnode and group:
the entitled share (mean m_share) and the fair share (the max-min target for the
run's demand, which no policy changes), both from the first policy's run, and, per
policy, the delivered share and its deviation from that policy's own fair share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fairshare.core.policies import ORIGINS, POLICIES
from fairshare.sim.record import SimResult
from fairshare.sim.scenario import Scenario
from udb.errors import OptionError


@dataclass
class Comparison:
    """The runs of one scenario, by policy name in the order asked."""

    scenario: str
    results: dict[str, SimResult]

    @property
    def policies(self) -> list[str]:
        return list(self.results)

    def rows(self) -> list[tuple[str, str, float, float, list[tuple[float, float]]]]:
        """(name, kind, entitled, fair, [(delivered, deviation_pp) per policy]) per
        lnode, then per group, in the first run's order (fractions of the machine; pp)."""
        first = next(iter(self.results.values()))
        out = []
        for m in first.lnodes + first.groups:
            per = [(r.lnode(m.name).delivered, r.lnode(m.name).deviation_pp)
                   for r in self.results.values()]  # fmt: skip
            out.append((m.name, m.kind, m.entitled, m.fair, per))
        return out

    def as_json(self) -> dict:
        """The documented --compare --json shape: {policy: the usual document}."""
        return {name: r.as_json() for name, r in self.results.items()}


def policy_list() -> list[tuple[str, str]]:
    """(name, where it comes from) of every policy --compare can run: the suite's and
    the site's plug-ins (fairshare.core.plugins)."""
    return [(name, ORIGINS.get(name, "")) for name in POLICIES]


def parse_policies(text: str) -> list[str]:
    """The policy names of `--compare NAME,NAME,...` (OptionError if one is unknown,
    named twice, or none is given)."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    known = ", ".join(POLICIES)
    if not names:
        raise OptionError(f"--compare: expected policy names among {known}, got {text!r}")
    for name in names:
        if name not in POLICIES:
            raise OptionError(f"--compare: expected policy names among {known}, got {name!r}")
    if len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise OptionError(f"--compare: policy {twice!r} named twice")
    return names


def run_compare(
    sc: Scenario, policies: Sequence[str], run: Callable[[Scenario, str], SimResult]
) -> Comparison:
    """Run `sc` once per policy: `run(scenario, policy)` gets the scenario with its
    constants' policy replaced (the caller adds window, enforcer and progress)."""
    results = {
        name: run(dataclasses.replace(sc, consts=sc.consts.replace(policy=name)), name)
        for name in policies
    }
    return Comparison(scenario=sc.source, results=results)
