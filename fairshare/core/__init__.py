"""The pure core: arithmetic over the share tree, with no OS, no clock and no database.

In the order one cycle uses them:

- `consts`: the fair-share constants (the guide's sh_consts) and their flags.
- `tree`: the share tree as arrays over breadth-first numbered nodes; `index` its level
  structure (`TreeIndex`), built once per tree.
- `split`: how the machine is split among the lnodes: machine shares, idle siblings'
  shares, the flat model's one-level index.
- `lnode`: the lnode table, the scheduler's state per node, and the steps that create,
  age and release lnodes.
- `cycle`: the steps every policy shares (charges, group adjustment, decay, background
  lnodes, effective shares, edge effects, limits), `Decision`, what a policy decides,
  and `lnode_table`, the bookkeeping that turns it into the new lnode table.
- `policies`: the policies (unicos, slurm, feedback, a site's) and `run_cycle`, the one entry point;
  `fair` the fair level each policy's split implies (what shrinfo explains), asked
  through `policies.fair_usage`.
- `exits`: the site exit (the guide's `site_adjust_lnodes`): a site hook's view of the
  cycle's lnodes and its floors and caps on e_share, applied before delivery;
  `plugins`: the entry-point groups that provide site policies and hooks.
- `maxmin`: the fair target, the hierarchical max-min allocation for a given demand,
  against which delivered CPU is judged.
- `steps`: the daemon's steps on plain values, which shrdaemon and shrsim both run.
- `site`: GLOBALUSAGE: many hosts, one UDB, and the site's records.
- `grid`: a grid of sites (seed 001): each entry's usage scope, the other sites' usage,
  the grid factors, pooled subtrees; `deviation`: the target-deviation tuples and the
  flat base-200 priority.
- `schedule`: shradmin's time-of-day schedules, parsed and applied.
- `sshare`: Slurm's sshare figures; `nicetables`: the guide's nice tables; `dist`: a
  redistribution of shares inside a group (shrdist's records).
"""
