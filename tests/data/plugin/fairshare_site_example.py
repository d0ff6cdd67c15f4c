"""A site's plug-in, as a site would install it: the tests put this directory on
sys.path, where importlib.metadata finds fairshare_site_example-1.0.dist-info and its
entry_points.txt (the worked example of SITE EXITS in shrdaemon(8))."""

from __future__ import annotations

from fairshare.core.exits import Adjustment, CycleView
from fairshare.core.policies.unicos import UnicosPolicy

#: The guide's 4.5.1: "This user is special, must never starve for cpu."
SPECIAL_UID = 104
FLOOR = 0.2  # of the machine
BATCH_GROUP, BATCH_CAP = "batch", 0.25


def never_starve(view: CycleView) -> list[Adjustment]:
    """UID 104 gets at least FLOOR of the machine whenever it wants CPU."""
    me = view.by_id(SPECIAL_UID)
    return [] if me is None else [Adjustment(me.node, floor=FLOOR)]


def cap_batch(view: CycleView) -> list[Adjustment]:
    """The resource group "batch" gets at most BATCH_CAP of the machine."""
    group = view.by_name(BATCH_GROUP)
    return [] if group is None else [Adjustment(group.node, cap=BATCH_CAP)]


def broken(view: CycleView) -> list[Adjustment]:
    """A hook with a bug: it raises every cycle."""
    raise ZeroDivisionError("division by zero in the site's code")


def wrong(view: CycleView) -> object:
    """A hook that returns something that is not adjustments."""
    return {"uid": 104, "floor": 0.2}


class ExamplePolicy(UnicosPolicy):
    """A site's policy: the UNICOS one under another name (what a site would change)."""

    name = "example"
