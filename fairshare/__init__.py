"""Fair-share scheduling: the share tree, the lnode cycle, the daemon and its commands.

One package per layer, in the order data flows (docs/architecture.md); a layer imports
only from the layers below it, and the contracts in pyproject.toml keep it so:

- `core`: pure arithmetic over the share tree: the constants, the tree and its index,
  the split, the lnode table, the cycle and its policies, the site factors.
- `store`: everything SQL the daemon and the reports need: the constants and the tree's
  rows, the published lnode table with its write-backs and checkpoints, the site.
- `collect`: what the machine says each process consumed (/proc, cgroup counters).
- `enforce`: the cycle's effective shares turned into kernel settings (cgroup v2, cgroup
  v1, systemd, nice, none), and the OsActions through which anything touches a process.
- `daemon`: shrdaemon's loop, one module per step.
- `admin`: the write commands' libraries (shradmin, shrdist, shrsync), one each.
- `server`: the daemon's socket, the one way users other than root reach the UDB.
- `sim`: the simulated machine, with its collector and enforcer, and shrsim's runs.
- `report`, `display`: what the displays show, read from what the cycle published,
  then formatted; `cli` and `tui` parse, call and render.
"""

import udb  # noqa: F401 - first: it keeps numpy's OpenBLAS to one thread (see udb)
