"""shrdaemon: the loop that measures, charges, runs the cycle, enforces and remembers.

`daemon.Daemon.step` is one cycle; its steps, in order, each in a module of its own:

- `reload`: one cheap poll of the UDB; the constants and the tree read again when they
  changed (`state` carries the lnodes over to a new tree).
- `charges`: each sampled process charged to its leaf lnode (`accounts`: Share by
  Account, with `sessions`, newacct's per-session choices).
- `state`: the lnodes of new leaves created with their stored usage; the cycle itself is
  fairshare.core.steps.
- `sync`: shrsync's requests served.
- `decisions`: the CPU-quota signals and the enforcer's targets, decided (pure).
- `writeback`: what the lnodes accrued added to the UDB, the gone ones released, with
  `outage` keeping the daemon scheduling while the UDB cannot be reached.

Around the loop: `loop` (timing and signals), `lock` (one daemon per UDB and host),
`service` (systemd readiness, watchdog and logs), `metrics` (Prometheus).
"""
