"""What the cgroup v1 and v2 enforcers share: a flat directory of lnode cgroups.

Layout: ``MOUNT/fairshare/<lnode>``, every lnode cgroup a sibling under one
parent, so their weights compete directly with each other (the kernel only
weighs siblings against each other).  A process is placed by writing its
pid to the lnode cgroup's ``cgroup.procs`` (the whole thread group moves);
the cgroup it came from is remembered so that `teardown` can put it back.
Writes are made only when something changed, so a steady cycle costs no
system calls beyond the new processes.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fairshare.enforce.base import LnodeTarget, arrays, safe_name

log = logging.getLogger("shrdaemon")

#: The fair-share parent cgroup's name under the mount point.
PARENT = "fairshare"


def cgroup_of(pid: int, v2: bool, proc: str = "/proc") -> str | None:
    """The path (relative to the mount) of the cpu cgroup `pid` is in, None if gone."""
    try:
        text = Path(f"{proc}/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        _hid, controllers, path = line.split(":", 2)
        if v2 and _hid == "0" and controllers == "":
            return path
        if not v2 and "cpu" in controllers.split(","):
            return path
    return None


class CgroupEnforcer:
    """One cgroup per active lnode under MOUNT/fairshare; subclasses write the weight."""

    name = "cgroup"
    v2 = False

    def __init__(self, mount: Path, proc: str = "/proc") -> None:
        self.mount = Path(mount)
        self.parent = self.mount / PARENT
        self.proc = proc
        self._placed: dict[int, str] = {}  # pid -> lnode cgroup name it was put in
        self._origin: dict[int, str] = {}  # pid -> cgroup path it came from
        self._weight: dict[str, tuple] = {}  # cgroup name -> last knob values written

    # -- what the versions differ in ----------------------------------------------------

    def weights(self, e_share: np.ndarray, background: np.ndarray) -> list[tuple]:
        """The knob values for each lnode (one tuple per lnode)."""
        raise NotImplementedError

    def write_weight(self, cgroup: Path, values: tuple) -> None:
        """Write one lnode's knob values into its cgroup."""
        raise NotImplementedError

    def prepare_parent(self) -> None:
        """Whatever the parent needs before children can use the cpu controller."""

    # -- the protocol ----------------------------------------------------------------------

    def setup(self) -> None:
        """Create MOUNT/fairshare, adopting one a crashed daemon left: its lnode cgroups
        are reused when their lnodes are active and removed when they are not."""
        self.parent.mkdir(exist_ok=True)
        self.prepare_parent()
        for d in self.parent.iterdir():
            if d.is_dir():
                self._weight[d.name] = ()  # unknown weight: rewritten if the lnode is wanted

    def apply(self, targets: Sequence[LnodeTarget]) -> None:
        """Create missing lnode cgroups, write changed weights, move new processes in,
        and remove the cgroups of lnodes that are no longer targets."""
        e_share, _nrun, background = arrays(targets)
        values = self.weights(e_share, background) if targets else []
        wanted = set()
        for t, v in zip(targets, values, strict=True):
            name = safe_name(t.name)
            wanted.add(name)
            cg = self.parent / name
            if name not in self._weight:
                cg.mkdir(exist_ok=True)
            if self._weight.get(name) != v:
                self.write_weight(cg, v)
                self._weight[name] = v
            for pid in t.pids:
                if self._placed.get(pid) != name:
                    self._move(pid, cg, name)
        alive = {pid for t in targets for pid in t.pids}
        for pid in [p for p in self._placed if p not in alive]:
            del self._placed[pid]
            self._origin.pop(pid, None)
        for name in [n for n in self._weight if n not in wanted]:
            if self._remove(self.parent / name, self.mount):
                del self._weight[name]

    def teardown(self) -> None:
        """Move every process in our cgroups back where it came from and remove them."""
        if not self.parent.is_dir():
            return
        for cg in [d for d in self.parent.iterdir() if d.is_dir()]:
            self._remove(cg, None)
        try:
            self.parent.rmdir()
        except OSError as err:
            log.warning("could not remove %s: %s", self.parent, err)
        self._placed.clear()
        self._origin.clear()
        self._weight.clear()

    # -- helpers ---------------------------------------------------------------------------

    def _move(self, pid: int, cg: Path, name: str) -> None:
        if pid not in self._origin:
            origin = cgroup_of(pid, self.v2, self.proc)
            if origin is None:
                return
            if not origin.startswith(f"/{PARENT}/"):
                self._origin[pid] = origin
        try:
            (cg / "cgroup.procs").write_text(str(pid))
            self._placed[pid] = name
        except OSError as err:
            if err.errno not in (errno.ESRCH, errno.ENOENT):
                log.warning("could not move pid %d into %s: %s", pid, cg, err)

    def _remove(self, cg: Path, fallback: Path | None) -> bool:
        """Empty `cg` (processes to their origin, else `fallback`, else the mount root)
        and remove it; True if it is gone."""
        try:
            pids = [int(p) for p in (cg / "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            origin = self._origin.get(pid)
            dest = self.mount / origin.lstrip("/") if origin else (fallback or self.mount)
            if not (dest / "cgroup.procs").exists():
                dest = self.mount
            try:
                (dest / "cgroup.procs").write_text(str(pid))
            except OSError as err:
                if err.errno != errno.ESRCH:
                    log.warning("could not move pid %d back to %s: %s", pid, dest, err)
        try:
            cg.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as err:
            if err.errno != errno.EBUSY:
                log.warning("could not remove %s: %s", cg, err)
            return False
