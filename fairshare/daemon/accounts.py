"""Which account a process is charged to (Share by Account mode, guide 4.4.5).

The rule, written once: the account a lookup gives for the process (newacct's choice
for its session, fairshare.daemon.sessions.SessionAccounts), else the user's default account,
the first of the entry's acids (fairshare.core.tree.default_acid); a user with no acids has none.

An `AccountLookup` is what the daemon is given to ask: called with a process it
names the account chosen for it (or None), and `refresh` is told each cycle's sample
and every user's acids first, so it can drop choices that no longer hold.
`AccountsOf` makes a lookup of a plain function (the simulator: a process's uid is
its account).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from fairshare.collect import ProcessSample, Sample
from fairshare.core.tree import default_acid


class AccountLookup(Protocol):
    """Accounts chosen per process, other than the users' defaults."""

    def refresh(self, sample: Sample, acids: Mapping[int, Sequence[int]]) -> None:
        """Called once a cycle before the sample's processes are looked up, with every
        user's acids (user uid -> acids; empty in Share by User mode)."""
        ...

    def __call__(self, p: ProcessSample) -> int | None:
        """The account chosen for process `p`, None for its user's default."""
        ...


class AccountsOf:
    """An AccountLookup that asks a function of the process and keeps nothing."""

    def __init__(self, fn: Callable[[ProcessSample], int | None]) -> None:
        self.fn = fn

    def refresh(self, sample: Sample, acids: Mapping[int, Sequence[int]]) -> None:
        """Nothing is remembered, so nothing is dropped."""

    def __call__(self, p: ProcessSample) -> int | None:
        return self.fn(p)


def account_of(
    p: ProcessSample, lookup: AccountLookup | None, acids: Mapping[int, Sequence[int]]
) -> int | None:
    """The account process `p` is charged to: `lookup`'s choice, else its user's
    default account (`acids`: user uid -> acids); None when it has neither."""
    acid = lookup(p) if lookup is not None else None
    return default_acid(acids.get(p.uid)) if acid is None else acid
