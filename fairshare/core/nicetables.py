"""The guide's nice tables (shrview -dn, shrinfo -v, the guide's 4.6.1.3): pure.

Indexed by the guide's N = nice + 20 (0..39):

- `priority_decay`: the process priority decay per second built from shradmin -D
  (low, high), Kay and Lauder's K2: decay(N) = K2'' x (N + K2') / (K2' + 39), where
  K2'' = 0.5 ** (1 / high) is the decay at the weakest nice and K2' the whole number
  (truncated) that brings nice 0 nearest 0.5 ** (1 / low).  This reproduces the guide's
  table digit for digit (-D 2,60: 0.4044 at nice -20, 0.7039 at nice 0, 0.9885 at 19).
  Linux has no per-process priority decay: CFS weighs nice by the kernel's fixed table
  (`fairshare.enforce.mapping.NICE_TO_WEIGHT`), so these rates are shown, not applied.
- `TICKS`: what one CPU tick costs at each nice, in percent of the tick cost (the
  guide's Nice Ticks: 150 at nice -20, 100 at 0, 55 at 18, falling 2.5 a step), except
  0 at nice 19, whose processes are not charged (the guide's 4.4.10; its table prints 1).
- `run_rates`: the guide's Nice Rates, the part of one second's CPU charge at each nice
  that enters the lnode's Rate in that second: (1 - run-rate decay) x TICKS / 100.
- `unicos_rates`: the guide's own Nice Rates column, for comparison (man/shrview.1 says
  why the two differ): (1 - run-rate decay) up to nice 0, times 20 / N above it, 0 at
  nice 19.  With the guide's run-rate half-life of 4 s it is the guide's 0.1591 at nice
  -20 to 0, 0.1515 at 1, ..., 0.0837 at 18, 0 at 19.
"""

from __future__ import annotations

import math

import numpy as np

#: Nice values by N (index): -20..19.
NICES = np.arange(-20, 20)
#: Charge per CPU tick in percent of the tick cost, by N (graded charging).
TICKS = np.where(NICES < 19, np.trunc(100 - 2.5 * NICES), 0).astype(np.int64)


def tick_rates(nice) -> np.ndarray:
    """The fraction of the tick cost charged for CPU at each `nice` (-20..19, clipped)."""
    return TICKS[np.clip(np.asarray(nice, dtype=np.int64), -20, 19) + 20] / 100.0


def decay_offset(low: float, high: float) -> int:
    """Kay-Lauder's K2' on the guide's 0..39 scale: the whole number (truncated) that
    makes the decay at nice 0 nearest 0.5 ** (1 / low), the weakest nice's being
    0.5 ** (1 / high) (`low`, `high`: shradmin -D's half-lives in seconds)."""
    d0, d19 = 0.5 ** (1 / low), 0.5 ** (1 / high)
    ratio = d0 / d19  # = (20 + K2') / (39 + K2')
    if ratio >= 1:  # equal half-lives: no spread at all
        return 10**6
    return math.trunc((39 * ratio - 20) / (1 - ratio))


def priority_decay(nice_decay: tuple[float, float]) -> np.ndarray:
    """The process priority decay factor per second at each N (negative below nice 0 when
    -D is under (1,30), as the guide warns)."""
    low, high = nice_decay
    k = decay_offset(low, high)
    return 0.5 ** (1 / high) * (np.arange(40) + k) / (k + 39)


def halflife(decay: float) -> float | None:
    """Seconds for a per-second decay factor to halve; None unless 0 < decay < 1."""
    return math.log(0.5) / math.log(decay) if 0 < decay < 1 else None


def run_rate_decay(halflife_s: float) -> float:
    """The Rate column's decay per second: it is a charge rate averaged with the usage
    half-life `halflife_s`, so 0.5 ** (1 / halflife_s)."""
    return 0.5 ** (1 / halflife_s)


def run_rates(halflife_s: float) -> np.ndarray:
    """The guide's Nice Rates by N: (1 - run-rate decay) x TICKS / 100."""
    return (1 - run_rate_decay(halflife_s)) * TICKS / 100.0


def unicos_rates(run_halflife_s: float) -> np.ndarray:
    """The guide's Nice Rates by N (4.6.1.3), as UNICOS computed them: the part of a
    second's run a process's share priority takes in, (1 - 0.5 ** (1 / run_halflife_s))
    up to nice 0 and times 20 / N above (weaker nice, slower), 0 at nice 19.  Not applied
    here: Linux has no per-process share priority (see `run_rates`)."""
    n = np.arange(40)
    scale = np.where(n < 39, np.minimum(1.0, 20.0 / np.maximum(n, 1)), 0.0)
    return (1 - run_rate_decay(run_halflife_s)) * scale
