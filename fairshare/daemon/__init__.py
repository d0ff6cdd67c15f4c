"""shrdaemon: the loop that measures, charges, runs the cycle, enforces and remembers.

`daemon.Daemon.step` is one cycle: it calls these steps top to bottom, each in the
module named after it (this is the one list of them):

1. `reload`: one cheap poll of the UDB (`reload.poll`); the constants read again when
   their change serial moved, with shradmin's schedule in force applied
   (fairshare.core.schedule), so a change acts within one delta; the share tree
   rebuilt when the UDB's entries changed, periodically, or on SIGHUP, the lnodes
   carried over to it by name (`state.carry_over`).  NOSCHED/NOSHARE switch the
   enforcer off and on (fairshare.enforce.switch).
2. `charges`: the processes sampled (fairshare.collect) and each charged to its leaf
   lnode (Share by Account through `accounts`, with `sessions`, newacct's per-session
   choices); `enrol` creates the entries of uids that have none (shrdaemon
   --new-uids), scheduled from the next cycle's reload.
3. `state`: the lnodes of new leaves created with their stored usage aged since
   shextime, then the pure cycle on the lnode table (fairshare.core.steps.advance:
   the policy's cycle; with GLOBALUSAGE the site factors adjust the effective shares,
   fairshare.core.site).
4. `sync`: shrsync's requests served, when the poll saw some.
5. `decisions`: the CPU-quota signals sent, and the enforcer handed its targets (the
   UDB's nice applied beside it, fairshare.enforce.switch).
6. The lnode table published (fairshare.store.published).
7. `exchange`: with GLOBALUSAGE, this host's part of the site's view (what it owes and
   receives per lnode) sent and the other hosts' read back, in one short transaction:
   the lnodes take their site-wide usage and the view of the other hosts is one cycle
   old (fairshare.store.exchange).
8. `grid`: every --grid-interval seconds a grid's mounted policies fetched, its
   peers' usage records pulled and the other sites' usage taken into the policy
   (fairshare.core.steps.exchange_grid: counted for global entries only).
9. `writeback`: every `writeback` seconds what the lnodes accrued added to the UDB
   (increments, so hosts sharing one UDB never erase each other's charges), the lnodes
   whose processes have all gone released, and with GLOBALUSAGE the site factors
   updated from the view; every `checkpoint` seconds every active lnode's unwritten
   increment checkpointed.  `outage` keeps the daemon scheduling while the UDB cannot
   be reached.

Around the loop: `loop` (timing and signals), `placing` (new sessions placed between
cycles), `lock` (one daemon per UDB and host, in a directory `trust` accepts, checked
before every cycle's writes), `spool` (what the UDB did not take, in a local file),
`service` (systemd readiness, watchdog and logs), `background` (--detach's pid file and
log, --status, --stop, without systemd), `metrics` (Prometheus).
"""
