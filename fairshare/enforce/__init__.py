"""Enforcement: turning the cycle's effective shares (e_share) into kernel settings.

`base` is the protocol every backend follows (setup, apply the targets, teardown) and
the `Capabilities` each declares (whether the daemon applies the UDB's nice beside it,
whether it sets nice values itself, whether it places new processes at once, whether its
cgroups count CPU). `mapping` holds the pure arithmetic every backend shares (cgroup v2
weights, cgroup v1 shares, nice values, and the nested cgroup tree that mirrors the
share tree, a cgroup per group and per lnode, each weighed among its siblings, which the
cgroup backends make and the simulator shares its CPUs down); the backends beside it
(cgroup v2, cgroup v1, systemd, nice, none, simulator) apply those numbers to the OS or
to the simulated machine, always through the OsActions object they are built with
(fairshare.enforce.actions), the daemon's own. `renice` holds the per-process nice
bookkeeping the nice enforcer and the UDB's nice share; `switch` turns the daemon's
enforcer off under NOSCHED/NOSHARE and applies the UDB's nice beside it; `detect`
chooses the backend once at start-up; `events` places new sessions between cycles.
"""
