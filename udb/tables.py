"""The UDB's tables, as SQLAlchemy Core `Table`s on one `MetaData`.

`entries` holds the UDB entries: users, resource groups (shflags 040000) and
shareholders/accounts (shflags 01000000).  `accounts` is the account registry (the
guide's /etc/acid): account names and their numbers, which the acids lists refer to; a
shareholder entry's uid is its account number.  `consts` holds the scheduling constants
(the guide's sh_consts, set by shradmin): every command and the daemon read the same
values from here (see fairshare.core.consts).  `lnode_cycles`, `lnodes` and
`lnode_checkpoints` and `lnode_counters` are shrdaemon's: the lnode table it publishes
every cycle for shrview, its checkpoint and the lnode cgroup counters its last
write-back or checkpoint covered (fairshare.store.published).  `const_changes` and `schedules` are
shradmin's history and time-of-day settings, `share_changes` shrdist's change log,
`sync_requests` shrsync's requests to the daemon, `serials` the change counters,
`host_generations` which daemon may write a host's rows (its fencing token).
`site_hosts` is GLOBALUSAGE's per-cycle exchange between the hosts of a site
(fairshare.store.exchange).
`grid_mounts`, `grid_peers`, `grid_usage` and `grid_remote` are a grid's (udb.mounts,
fairshare.store.grid): the policy subtrees mounted from elsewhere, this site's name
and its peers, the usage records this site exports and what it applied of its peers'.

Reading needs nothing more: the displays and the daemon's cycle query these with Core
statements, and never import SQLAlchemy's ORM (a tenth of a second of every command's
start).  udb.models maps its classes onto these same tables for the commands that edit
entries as objects.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()


def _key(name: str, type_, *, autoincrement: bool | str = "auto") -> Column:
    return Column(name, type_, primary_key=True, nullable=False, autoincrement=autoincrement)


def _col(name: str, type_, default=None, *, null: bool = False, **kw) -> Column:
    return Column(name, type_, nullable=null, default=default, **kw)


#: One UDB entry.  Units: shusage and shcharge in charge units, shextime in seconds since
#: the epoch, cpuquota and cpuquotaused in CPU seconds, halflife in seconds.
entries = Table(
    "entries",
    metadata,
    _key("id", Integer, autoincrement=True),
    _col("name", String(64), unique=True),
    _col("uid", Integer, unique=True),
    _col("gids", JSON, list),
    _col("acids", JSON, list),
    _col("resgrp", Integer, 0, index=True),
    _col("shares", Integer, 0),
    _col("shflags", Integer, 0),
    _col("shusage", Float, 0.0),
    _col("shcharge", Float, 0.0),
    _col("shextime", Float, 0.0),
    _col("cpuquota", Float, 0.0),
    _col("cpuquotaused", Float, 0.0),
    _col("nice", Integer, 0),
    _col("passwd", String(256), ""),
    # A resource group's own usage half-life (s) for its subtree; 0: inherit (migration 0016).
    _col("halflife", Float, 0.0, server_default="0"),
    # The usage its subtree is divided by: '' inherit, 'local' (this site's) or 'global'
    # (every site's); and whether its members are pooled, not ranked against each other
    # (migration 0017, seed 001).
    _col("scope", String(8), "", server_default=""),
    _col("pooled", Integer, 0, server_default="0"),
    _col("comment", Text, ""),
    # The uid of the mount point whose policy fetch brought this entry; 0: defined here
    # (migration 0018, udb.mounts).  Mounted entries are read-only to udbgen and shrdist.
    _col("mount", Integer, 0, server_default="0"),
)

#: The account registry (/etc/acid): account number <-> name.
accounts = Table(
    "accounts",
    metadata,
    _key("acid", Integer, autoincrement=False),
    _col("name", String(64), unique=True),
)

#: One fair-share constant (sh_consts): `name` as in fairshare.core.consts.Consts, a JSON
#: value.  Absent rows mean the default; fairshare.store.config reads and writes them.
consts = Table(
    "consts",
    metadata,
    _key("name", String(64)),
    _col("value", JSON, null=True),
)

#: The header of the lnode table a shrdaemon published (one row per host).  `time`
#: (epoch s) is when the cycle ran, `delta` (s) the cycle length then, `started` (epoch
#: s) when the daemon started, `enforcer` what enforced it.  When the daemon stops
#: cleanly it sets `running` false and `stopped` (epoch s) and leaves its last table in
#: place, stale, for displays to label as such.  `counts`: resource totals since the
#: daemon started (cpu s, bio, sio, syscalls, mem, tty).  `cpus`: the host's CPUs, and
#: `delivered` the CPU s per s its lnodes received over the cycle (a lnode's published
#: `cpu` fraction times this is its CPU rate there), for a site's displays and
#: GLOBALUSAGE (fairshare.core.site).  `columnar`: the published lnodes again, one array per
#: column (udb.columnar), what a display reads; None in a header of nothing published yet.
lnode_cycles = Table(
    "lnode_cycles",
    metadata,
    _key("host", String(255)),
    _col("time", Float),
    _col("delta", Float),
    _col("enforcer", String(32)),
    _col("pid", Integer),
    _col("cycle", Integer),
    _col("mode", String(16)),
    _col("started", Float),
    _col("running", Boolean, True),
    _col("stopped", Float, null=True),
    _col("counts", JSON, null=True),
    _col("cpus", Float, null=True),
    _col("delivered", Float, null=True),
    _col("columnar", LargeBinary, null=True),
)

#: One active lnode as the daemon's last cycle left it (see fairshare.core.lnode for units).
#: `node` is the tree node number (0 = root), `parent` the parent's node number (-1 for
#: the root), `kind` one of root, group, user, account, idle.  `stored`: the part of
#: `usage` already stored in the UDB (groups: their leaves'); the rest is what this host
#: still owes it.  `due` and `pri`: the cycle's due share and near-future proportion
#: (fairshare.core.lnode.LnodeTable), None in a table published before the daemon published them;
#: so are `want`, `target`, `got`, `got_minute` and `flat` (fairshare.core.delivery: the
#: CPUs it wants, its fair target, what it received over the last cycle and minute, its
#: flat enforcers' share).
lnodes = Table(
    "lnodes",
    metadata,
    _key("host", String(255)),
    _key("node", Integer, autoincrement=False),
    _col("name", String(64)),
    _col("uid", Integer),
    _col("kind", String(16)),
    _col("parent", Integer),
    _col("level", Integer),
    _col("shares", Float),
    _col("refs", Integer),
    _col("nrun", Integer),
    _col("usage", Float),
    _col("stored", Float, null=True),
    _col("charge", Float),
    _col("cpu_seconds", Float),
    _col("rate", Float),
    _col("m_share", Float),
    _col("e_share", Float),
    _col("cpu", Float),
    _col("adj", Float),
    _col("priority", Float),
    _col("background", Boolean),
    _col("demand", Boolean),
    _col("due", Float, null=True),
    _col("pri", Float, null=True),
    _col("want", Float, null=True),
    _col("target", Float, null=True),
    _col("got", Float, null=True),
    _col("got_minute", Float, null=True),
    _col("flat", Float, null=True),
)

#: An active leaf lnode as last checkpointed (the guide's /etc/lnodes.chkpt): `uid` is
#: the entry's uid, `usage` and `charge` in charge units, `cpu_seconds` CPU s since the
#: lnode was created, `time` the checkpoint's epoch second.
lnode_checkpoints = Table(
    "lnode_checkpoints",
    metadata,
    _key("host", String(255)),
    _key("uid", Integer, autoincrement=False),
    _col("name", String(64)),
    _col("usage", Float),
    _col("charge", Float),
    _col("cpu_seconds", Float),
    _col("time", Float),
)

#: The lnode cgroups' CPU counters (`cpu`, CPU s) that this host's last write-back or
#: checkpoint covered, by cgroup `name`, with the machine's `boot` time and the epoch
#: second written (`time`): a daemon killed and restarted charges the growth since.
lnode_counters = Table(
    "lnode_counters",
    metadata,
    _key("host", String(255)),
    _key("name", String(255)),
    _col("cpu", Float),
    _col("boot", Float),
    _col("time", Float),
)

#: One change shradmin made to a constant: who, when (epoch s), old and new value.
#: `schedule` names the time-of-day schedule changed, or is empty for the base settings;
#: a schedule's definition and removal are recorded with name "schedule".
const_changes = Table(
    "const_changes",
    metadata,
    _key("id", Integer, autoincrement=True),
    _col("time", Float),
    _col("who", String(64)),
    _col("schedule", String(64), ""),
    _col("name", String(64)),
    _col("old", JSON, null=True),
    _col("new", JSON, null=True),
)

#: A named time-of-day settings set (the guide's prime / non-prime settings), in force
#: on the weekdays in `days` (0 = Monday) during the hours in `hours` (0..23, local
#: time); `settings` maps constant names to values that replace the base constants while
#: it is.  The first schedule by `name` in force wins.
schedules = Table(
    "schedules",
    metadata,
    _key("name", String(64)),
    _col("days", JSON),
    _col("hours", JSON),
    _col("settings", JSON),
)

#: One member's shares changed by shrdist: who, when (epoch s), in which resource group,
#: the member's name and its shares before and after (fairshare.admin.shrdist).
share_changes = Table(
    "share_changes",
    metadata,
    _key("id", Integer, autoincrement=True),
    _col("time", Float),
    _col("who", String(64)),
    _col("grp", String(64)),
    _col("member", String(64)),
    _col("old", Integer),
    _col("new", Integer),
)

#: A shrsync request to the shrdaemon of `host` (fairshare.daemon.sync).  `kind` is "update"
#: (shrsync -u: write every active lnode's usage, charges and CPU seconds to the UDB) or
#: "quota" (shrsync -q: take the UDB's cpuquotaused as the active lnodes' new base).
#: `requested` and `done` are epoch s; `done` is NULL until the daemon has handled it,
#: then `lnodes` says how many lnodes it touched.
sync_requests = Table(
    "sync_requests",
    metadata,
    _key("id", Integer, autoincrement=True),
    _col("host", String(255), index=True),
    _col("kind", String(16)),
    _col("who", String(64)),
    _col("requested", Float),
    _col("done", Float, null=True),
    _col("lnodes", Integer, null=True),
)

#: A change counter.  The row named "entries" is bumped by every transaction that
#: changes entries or the account registry (udbgen, shrdist), the row named "consts" by
#: every one that changes the stored constants or shradmin's schedules, so a running
#: daemon sees any such change with one cheap read (fairshare.daemon.reload.poll).
serials = Table(
    "serials",
    metadata,
    _key("name", String(32)),
    _col("value", Integer, 0),
)

#: Which shrdaemon may write a host's rows (fairshare.store.published).  `generation`
#: grows every time a daemon takes the host's lock (at start, and again after the
#: database came back from a restart); every write-back, checkpoint and publish checks
#: it in its own transaction, so a daemon that no longer holds the lock is refused.
#: `spooled` is the serial of the last spool file (what a daemon owed while the UDB
#: could not take it) whose increments were written, so a spool is applied once.
host_generations = Table(
    "host_generations",
    metadata,
    _key("host", String(255)),
    _col("generation", BigInteger, 0),
    _col("spooled", BigInteger, 0),
)

#: GLOBALUSAGE's per-cycle exchange (fairshare.store.exchange): one row per host with
#: what it tells the other hosts, as of `time` (epoch s): `columnar` holds one packed
#: record per uid it has an lnode for or owes usage to (fairshare.store.exchange.PACKED:
#: flags, owed usage, CPU rate, wanted CPUs), `cpus` the host's CPUs.
site_hosts = Table(
    "site_hosts",
    metadata,
    _key("host", String(255)),
    _col("time", Float),
    _col("cpus", Float),
    _col("columnar", LargeBinary),
)

#: A policy subtree mounted at a local resource group (udb.mounts): the group's `entry`
#: uid (the mount point), the `source` UDB's URL (no password: ~/.pgpass or a libpq
#: service file holds it), the `policy` (the name of the group at the source whose
#: children are copied in), when it was last fetched whole (`fetched`, epoch s) at the
#: source's entries serial `serial`, and the last attempt (`tried`) with why it failed
#: (`error`, None when it worked: the entries keep the last good version).
grid_mounts = Table(
    "grid_mounts",
    metadata,
    _key("entry", Integer, autoincrement=False),
    _col("source", String(1024)),
    _col("policy", String(64)),
    _col("fetched", Float, null=True),
    _col("serial", BigInteger, 0),
    _col("tried", Float, null=True),
    _col("error", Text, null=True),
)

#: This site (the row whose `source` is None: its name is what its usage records carry)
#: and the peer sites whose usage records it pulls (fairshare.store.grid): the peer's
#: UDB `source` URL, the last serial `applied` from it (each record is applied once),
#: when it was last pulled (`pulled`, epoch s) and the last attempt (`tried`, `error`).
grid_peers = Table(
    "grid_peers",
    metadata,
    _key("site", String(64)),
    _col("source", String(1024), null=True),
    _col("applied", BigInteger, 0),
    _col("pulled", Float, null=True),
    _col("tried", Float, null=True),
    _col("error", Text, null=True),
)

#: The usage records this site exports: one row per mounted leaf a write-back charged,
#: the record's identity (`site`, `serial`; the serial grows with every write-back that
#: charged a mounted entry, in commit order), the leaf as `policy` (the mount's policy
#: name) and `node` (its name there), the usage increment (charge units, as of `time`,
#: epoch s), the charge and the CPU seconds.  Peers read it with a read-only role.
grid_usage = Table(
    "grid_usage",
    metadata,
    _key("site", String(64)),
    _key("serial", BigInteger, autoincrement=False),
    _key("policy", String(64)),
    _key("node", String(64)),
    _col("usage", Float),
    _col("time", Float),
    _col("charge", Float),
    _col("cpu_seconds", Float),
)

#: What this site applied of each peer's records, per (`site`, `policy`, `node`): the
#: decayed usage as of `time` (epoch s, charge units), the charges and CPU seconds
#: summed, and the serial of the last record applied.
grid_remote = Table(
    "grid_remote",
    metadata,
    _key("site", String(64)),
    _key("policy", String(64)),
    _key("node", String(64)),
    _col("usage", Float),
    _col("time", Float),
    _col("charge", Float),
    _col("cpu_seconds", Float),
    _col("serial", BigInteger, 0),
)
