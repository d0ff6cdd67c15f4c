"""Fair-share scheduling: the share tree, the lnode cycle, the daemon and its commands.

One cycle of the daemon (fairshare.daemon), module by module: `collect` samples the
processes; `charges` charges each to its leaf lnode (`accounts` in Share by Account
mode); `state` creates the lnodes of new leaves; `cycle` runs the policy (pure);
`decisions` picks the quota signals and the enforcer's targets; `enforce` applies them;
`store` publishes the lnode table; `writeback` adds what the lnodes accrued to the UDB
and releases those that are gone.  `reload` re-reads the constants and tree, `loop`
times the cycles and takes the signals, `outage` keeps the daemon scheduling while
the UDB cannot be reached, `sync` serves shrsync's requests and `server` (with
`answers`) the socket.

What the commands show of it: `report` turns the published table (and the UDB) into
the rows, profiles and statistics of shrview, shrinfo and shrtree, without computing
a scheduling figure again; `display` formats them; `cli` parses, calls and renders.
"""

import udb  # noqa: F401 - first: it keeps numpy's OpenBLAS to one thread (see udb)
