"""Site plug-ins through Python entry points (the guide's 4.5: a site changes the
scheduling without patching the suite).

Two entry-point groups, declared by any installed distribution (its
``[project.entry-points."fairshare.policies"]`` in pyproject.toml, i.e. an
entry_points.txt in its dist-info):

- "fairshare.policies": a policy (fairshare.core.cycle.Policy) by name, an instance or
  a class called with no argument; `shradmin --policy` accepts the name and lists it,
  `shrsim --compare` runs it (fairshare.core.policies.POLICIES holds them with the
  suite's own);
- "fairshare.site_hooks": a site hook (fairshare.core.exits.SiteHook) by name, a
  callable or a class called with no argument; shrdaemon runs it every cycle before
  the enforcer (shrdaemon --site-hook).

Only the names are read until a plug-in is loaded.  A plug-in that cannot be loaded,
or is not what its group expects, is logged and left out; it never stops a command
or the daemon.
"""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import EntryPoint, entry_points

from fairshare.core.consts import POLICY_GROUP
from fairshare.core.exits import SiteExit

log = logging.getLogger("fairshare.core.plugins")

__all__ = ["HOOK_GROUP", "POLICY_GROUP", "load_policies", "load_site_hooks", "names"]

HOOK_GROUP = "fairshare.site_hooks"


def names(group: str) -> tuple[str, ...]:
    """The entry-point names installed in `group`, sorted (none loaded)."""
    return tuple(sorted({ep.name for ep in entry_points(group=group)}))


def _instance(ep: EntryPoint) -> object:
    """What entry point `ep` names: the object, or an instance of the class it names."""
    obj = ep.load()
    return obj() if isinstance(obj, type) else obj


def load_policies(builtin: tuple[str, ...]) -> dict[str, tuple[object, str]]:
    """The policies of the "fairshare.policies" group by entry-point name, loaded, each
    with where it comes from ("module:attribute"); a name among `builtin` (the suite's
    own), a plug-in that fails to load or one without `cycle` and `fair_usage` is
    logged and left out."""
    out: dict[str, tuple[object, str]] = {}
    for ep in entry_points(group=POLICY_GROUP):
        if ep.name in builtin:
            log.warning(
                "policy plug-in %s (%s) ignored: the name is the suite's", ep.name, ep.value
            )
            continue
        try:
            policy = _instance(ep)
        except Exception as err:  # a site's code: never stops a command
            log.warning("policy plug-in %s (%s) not loaded: %s", ep.name, ep.value, err)
            continue
        if not (callable(getattr(policy, "cycle", None)) and hasattr(policy, "fair_usage")):
            log.warning(
                "policy plug-in %s (%s) has no cycle and fair_usage: ignored", ep.name, ep.value
            )
            continue
        out[ep.name] = (policy, ep.value)
    return out


def load_site_hooks(specs: tuple[str, ...] | None = None) -> list[SiteExit]:
    """The site hooks to run: those `specs` names (an entry-point name of the
    "fairshare.site_hooks" group, or "module:attribute"), or with None every hook of
    the group, in name order.  One that fails to load is logged and left out."""
    if specs is None:
        chosen = sorted(entry_points(group=HOOK_GROUP), key=lambda ep: ep.name)
    else:
        installed = {ep.name: ep for ep in entry_points(group=HOOK_GROUP)}
        chosen = []
        for spec in specs:
            if spec in installed:
                chosen.append(installed[spec])
            elif ":" in spec:
                chosen.append(EntryPoint(name=spec, value=spec, group=HOOK_GROUP))
            else:
                known = ", ".join(installed) or "none installed"
                log.warning("site hook %s not found (installed: %s)", spec, known)
    hooks = []
    for ep in chosen:
        try:
            hook = _instance(ep)
        except Exception as err:  # a site's code: never stops the daemon
            log.warning("site hook %s (%s) not loaded: %s", ep.name, ep.value, err)
            continue
        if not callable(hook):
            log.warning("site hook %s (%s) is not callable: ignored", ep.name, ep.value)
            continue
        hooks.append(SiteExit(ep.name, hook))
    return hooks


def invalidate() -> None:
    """Forget what the import system cached about installed distributions (a test or a
    site that installs a plug-in while a process runs)."""
    importlib.invalidate_caches()
