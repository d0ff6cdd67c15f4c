"""The fair-share simulator: the daemon's cycle on a simulated machine.

- machine.py: the simulated kernel (N CPUs shared by weight, each process at most one
  CPU, the idle class on leftovers; under the cgroup model down the nested cgroup tree
  the cgroup enforcers make, unused share going to siblings first), the enforcers'
  weight models, the workloads'
  processes, the simulated clock and OS actions.  The simulated collector
  (fairshare.sim.collector) and enforcer (fairshare.sim.enforcer) build on it.
- scenario.py: the one scenario loader (TOML, man/shrsim.1) for shrsim and
  `shrdaemon --simulate`.
- run.py: shrsim's run, the daemon's own steps (fairshare.core.steps) cycle by cycle on the
  machine, one host or a site of several.
- grid_scenario.py, grid.py: a grid of sites ([[site]] tables), each a host of run.py
  with its own tree, exchanging usage (fairshare.core.grid); every entry's delivered
  share of its parent against its target.
- record.py: what a run measured (entitled, fair and delivered share, the deviation
  from the fair share) and its series.
- plot.py: shrsim --plot, lnodes and groups.
- compare.py: shrsim --compare, one scenario under several policies.
- daemon.py: `shrdaemon --simulate`, the real daemon loop on the simulated machine.

Nothing here is imported by the layers below it.
"""
