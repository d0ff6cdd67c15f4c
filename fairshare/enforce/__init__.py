"""Enforcement: turning the cycle's effective shares (e_share) into kernel settings.

`mapping` holds the pure arithmetic every backend shares (cgroup v2 weights, cgroup v1
shares, nice values); the backends beside it (cgroup v2, cgroup v1, nice, none, simulator)
apply those numbers to the OS or to the simulated machine, always through the
OsActions object they are built with (fairshare.actions), the daemon's own.  `renice`
holds the per-process nice bookkeeping the nice enforcer and the UDB's nice share.
"""
