"""The guide's Nice Rates (4.6.1.3) beside the rates shown on Linux (man/shrview.1)."""

from __future__ import annotations

import pytest

from fairshare.core import nicetables


def test_unicos_rates_are_the_guides_column():
    """4.6.1.3's table: 0.1591 from nice -20 to 0, 0.1515 at 1, 0.1446 at 2, 0.1384 at 3,
    0.0860 at 17, 0.0837 at 18, 0.0000 at 19 (shrinfo -v: run rate half-life 4.0 s)."""
    rates = nicetables.unicos_rates(4.0)
    guide = {0: 0.1591, 10: 0.1591, 18: 0.1591, 19: 0.1591, 20: 0.1591, 21: 0.1515,
             22: 0.1446, 23: 0.1384, 37: 0.0860, 38: 0.0837, 39: 0.0}  # fmt: skip
    assert {n: round(float(rates[n]), 4) for n in guide} == guide


def test_the_rates_shown_differ_from_the_guides_by_the_tick_grading_only():
    """man/shrview.1: at a 4 s half-life ours are the guide's x Ticks/100 / min(1, 20/N):
    0.2387 at nice -20 where the guide shows 0.1591, the same 0.1591 at nice 0."""
    ours, guide = nicetables.run_rates(4.0), nicetables.unicos_rates(4.0)
    assert round(float(ours[0]), 4) == 0.2387 and round(float(ours[20]), 4) == 0.1591
    for n in range(39):
        scale = nicetables.TICKS[n] / 100 / min(1.0, 20 / max(n, 1))
        assert ours[n] == pytest.approx(guide[n] * scale), n
