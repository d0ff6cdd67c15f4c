"""Everything SQL the daemon and the reports need, on the UDB's tables (udb.tables).

- `config`: the constants, their history and schedules, and the share tree's rows.
- `published`: what the daemon remembers: the published lnode table, write-backs,
  checkpoints and recovery (`LnodeStore`).
- `site`: the site as the UDB holds it: every host's published lnodes summed.
- `priority`: the flat priorities of a host's published lnodes (fairshare.core.deviation).
- `grid`: a grid's usage records: exported with each write-back, pulled from the peer
  sites' UDBs, and the other sites' usage by mounted node for the scheduler.
- `fence`: the host's generation every write of its rows checks (a daemon that lost
  its lock to another is refused).
"""
