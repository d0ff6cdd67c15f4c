"""shrview -dn's table (pure): the guide's nice tables from the constants, beside the
Linux kernel's CFS weights (fairshare.core.nicetables, fairshare.enforce.mapping)."""

from __future__ import annotations

from dataclasses import dataclass

from fairshare.core import nicetables
from fairshare.core.consts import Consts
from fairshare.enforce.mapping import NICE_TO_WEIGHT


@dataclass(frozen=True)
class NiceRow:
    """One row of the -dn table (the guide's columns, then Linux's weight): index n
    (0..39), nice (-20..19), the process priority decay per second (NiceD) and its
    half-life (s; None where the decay is not in (0, 1)), the run rate (Nice Rates: the
    part of a second's charge that enters the lnode's Rate that second), the percentage
    of the tick cost charged per CPU tick (Nice Ticks), and the kernel's CFS weight."""

    n: int
    nice: int
    decay: float
    halflife: float | None
    rate: float
    ticks: int
    weight: int


def nice_table(consts: Consts) -> list[NiceRow]:
    """The -dn table (fairshare.core.nicetables): NiceD from -D as the guide builds it, the
    graded tick charge, the run rates with the usage half-life, the kernel's weights."""
    decays = nicetables.priority_decay(consts.nice_decay)
    rates = nicetables.run_rates(consts.halflife)
    return [
        NiceRow(
            n,
            n - 20,
            float(decays[n]),
            nicetables.halflife(float(decays[n])),
            float(rates[n]),
            int(nicetables.TICKS[n]),
            int(NICE_TO_WEIGHT[n]),
        )
        for n in range(40)
    ]
