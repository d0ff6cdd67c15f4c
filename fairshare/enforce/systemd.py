"""The systemd enforcer: ``CPUWeight=`` on logind's units through systemd's D-Bus API.

Where systemd is PID 1 on cgroup v2 it owns the cgroup tree: logind already puts
each user's processes in ``user-UID.slice`` and each login in ``session-N.scope``.
Moving processes out of those units (what the cgroup2 enforcer does) breaks
logind's accounting, so this enforcer never moves a process.  It finds the unit
each lnode's processes are in (from /proc/PID/cgroup) and asks systemd to weigh
that unit: ``SetUnitProperties(unit, runtime=true, [("CPUWeight", t)])``, the
call ``systemctl set-property --runtime`` makes, so nothing outlives a reboot.
As root it talks to systemd over its own socket (/run/systemd/private, peer to peer,
as systemctl does), so no D-Bus daemon need run; elsewhere over the system bus.
Where systemd runs in legacy mode (cgroup v1) the unit is read from the process's
``name=systemd`` line, and systemd turns CPUWeight= into ``cpu.shares``.

- Share by User: the user's slice, ``user-UID.slice``.
- Share by Account: the session scopes, ``session-N.scope`` (newacct's accounts
  are per session).
- Weights are `fairshare.enforce.mapping.cgroup2_weights` of e_share (1..10000).
  The cycle has already folded the share hierarchy into one effective share per
  lnode, so flat weights on sibling units deliver it.
- The UDB's nice of each lnode is applied by the daemon to its processes, as beside the
  cgroup enforcers (`Capabilities.udb_nice`): it ranks them inside their session scope.
- Background lnodes get ``CPUWeight=idle`` (0 on the bus) where systemd supports it
  (version 252 on), else weight 1.
- Units no longer targeted, and every unit at teardown, go back to systemd's
  default (CPUWeight unset: UINT64_MAX on the bus).
- systemd refusing a call (no such unit, access denied) is logged once per unit
  and reason; the next change tries again.  The cycle goes on.

CPU per lnode: `read_groups` reads ``usage_usec`` from the cgroup ``cpu.stat`` of
the units holding its processes (cumulative CPU seconds of every process that ran in
them) and the processes in them now, in the shape of the cgroup enforcers' per-lnode
counters (fairshare.collect.GroupReading), so the daemon's collector charges those
processes from the kernel's counter.  A unit is counted for one lnode only.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from jeepney import DBusAddress, new_method_call
from jeepney.bus import get_bus
from jeepney.io.blocking import (
    DBusConnection,
    DBusConnectionBase,
    open_dbus_connection,
    prep_socket,
)
from jeepney.io.common import MessageFilters
from jeepney.low_level import HeaderFields, MessageType

from fairshare.collect import GroupReading
from fairshare.enforce.actions import OsActions
from fairshare.enforce.base import Capabilities, LnodeTarget, arrays, safe_name
from fairshare.enforce.mapping import cgroup2_weights
from udb.errors import OptionError

log = logging.getLogger("shrdaemon")

SYSTEMD = DBusAddress(
    "/org/freedesktop/systemd1",
    bus_name="org.freedesktop.systemd1",
    interface="org.freedesktop.systemd1.Manager",
)
#: CPUWeight=idle on the bus (systemd's CGROUP_WEIGHT_IDLE), accepted from version 252.
CPU_WEIGHT_IDLE = 0
IDLE_SINCE = 252
#: CPUWeight unset: systemd's default weight (CGROUP_WEIGHT_INVALID).
CPU_WEIGHT_DEFAULT = 2**64 - 1

_SLICE = re.compile(r"^(.*?/user-\d+\.slice)(?:/|$)")
_SCOPE = re.compile(r"^(.*?/session-[^/]+\.scope)(?:/|$)")


def unit_cgroup(cgroup_text: str, by_account: bool) -> str | None:
    """The cgroup path (from /proc/PID/cgroup) of the logind unit the process is in:
    its session scope when `by_account`, else its user slice; None when it is in
    neither (a system service).  systemd's tree is the ``0::`` line (cgroup v2), or the
    ``name=systemd`` line where systemd runs in legacy mode (cgroup v1: the ``0::``
    line, if any, is then ``/``)."""
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[1] in ("", "name=systemd"):
            path = parts[2]
            m = (_SCOPE if by_account else _SLICE).match(path)
            if m:
                return m.group(1)
    return None


def parse_usage(cpu_stat: str) -> float:
    """CPU seconds in a cgroup v2 ``cpu.stat`` text (its ``usage_usec`` line)."""
    for line in cpu_stat.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) / 1e6
    raise ValueError("cpu.stat has no usage_usec line")


def systemd_version(text: str) -> int:
    """The major version in systemd's Version property ("255.4-1ubuntu8" -> 255; 0 if none)."""
    m = re.match(r"\D*(\d+)", text)
    return int(m.group(1)) if m else 0


class SystemdError(Exception):
    """systemd answered a call with a D-Bus error: `name` (e.g.
    org.freedesktop.systemd1.NoSuchUnit) and its message."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


#: systemd's own socket: a peer-to-peer D-Bus connection to the manager, for root only
#: (what systemctl uses as root), which works where no D-Bus daemon runs.
PRIVATE = "/run/systemd/private"


class _PeerConnection(DBusConnection):
    """A jeepney connection to a D-Bus peer, not a bus: no Hello, no unique name."""

    def __init__(self, sock) -> None:
        DBusConnectionBase.__init__(self, sock, False)
        self._filters = MessageFilters()
        self.unique_name = None


class SystemdBus:
    """The two calls the enforcer makes, over a blocking jeepney connection to `address`
    ("SYSTEM" for the system bus, or a D-Bus address such as unix:path=...).  `peer`:
    the address is systemd itself (its private socket), not a message bus."""

    def __init__(self, address: str = "SYSTEM", timeout: float = 5.0, peer: bool = False) -> None:
        self.timeout = timeout
        if not peer:
            self.conn = open_dbus_connection(address)
            return
        self.conn = _PeerConnection(prep_socket(get_bus(address), timeout=timeout))
        # systemd 252 leaves unread a message that came in the same read as the
        # client's BEGIN until the next one arrives: a first call would time out.  A
        # Ping goes first, and a second one if the first stays unanswered.
        peer_iface = DBusAddress(SYSTEMD.object_path, SYSTEMD.bus_name, "org.freedesktop.DBus.Peer")
        try:
            try:
                self.conn.send_and_get_reply(new_method_call(peer_iface, "Ping"), timeout=0.5)
            except TimeoutError:
                self.conn.send_and_get_reply(new_method_call(peer_iface, "Ping"), timeout=timeout)
        except BaseException:
            self.conn.close()
            raise

    @classmethod
    def default(cls) -> SystemdBus:
        """systemd's private socket as root where it exists (as systemctl does: no
        D-Bus daemon needed), else the system bus."""
        if os.geteuid() == 0 and os.path.exists(PRIVATE):
            try:
                return cls(f"unix:path={PRIVATE}", peer=True)
            except (OSError, ValueError):  # unreachable, or authentication refused
                pass
        return cls()

    def _call(self, msg):
        reply = self.conn.send_and_get_reply(msg, timeout=self.timeout)
        if reply.header.message_type == MessageType.error:
            name = reply.header.fields.get(HeaderFields.error_name, "?")
            raise SystemdError(name, str(reply.body[0]) if reply.body else "")
        return reply.body

    def version(self) -> str:
        """systemd's Version property."""
        msg = new_method_call(
            DBusAddress(SYSTEMD.object_path, SYSTEMD.bus_name, "org.freedesktop.DBus.Properties"),
            "Get",
            "ss",
            (SYSTEMD.interface, "Version"),
        )
        return self._call(msg)[0][1]

    def set_cpu_weight(self, unit: str, weight: int) -> None:
        """SetUnitProperties(unit, runtime=true, CPUWeight=weight)."""
        body = (unit, True, [("CPUWeight", ("t", weight))])
        self._call(new_method_call(SYSTEMD, "SetUnitProperties", "sba(sv)", body))

    def close(self) -> None:
        self.conn.close()


class SystemdEnforcer:
    """CPUWeight= on the user slices (or session scopes) holding each lnode's processes."""

    name = "systemd"
    # It moves no process (systemd owns the tree), so it places none; the daemon
    # applies the UDB's nice to the processes (it ranks them inside their session
    # scope, as inside an lnode cgroup: renicing moves nothing); its units' cgroups
    # count their CPU.
    capabilities = Capabilities(udb_nice=True, nice_local=True, counts=True)

    def __init__(
        self,
        mount: Path,
        actions: OsActions,
        by_account: bool = False,
        proc: str = "/proc",
        connect: Callable[[], SystemdBus] = SystemdBus.default,
    ) -> None:
        self.mount = Path(mount)
        # The daemon's own actions (it refuses an enforcer on another machine's); this
        # one changes no process: its only changes are unit properties, over D-Bus.
        self.actions = actions
        self.by_account = by_account
        self.proc = proc
        self.connect = connect
        self.bus: SystemdBus | None = None
        self.idle = False  # systemd takes CPUWeight=idle
        self._weight: dict[str, int] = {}  # unit -> CPUWeight we set
        self._groups: dict[str, list[str]] = {}  # lnode cgroup name -> its units' cgroups
        self._refused: set[tuple[str, str]] = set()  # (unit, error) already logged

    def setup(self) -> None:
        """Connect to systemd and learn whether it takes CPUWeight=idle."""
        try:
            self.bus = self.connect()
            version = self.bus.version()
        except (OSError, SystemdError, ValueError) as err:
            raise OptionError(
                f"--enforcer systemd: cannot reach systemd over D-Bus: {err}"
            ) from None
        self.idle = systemd_version(version) >= IDLE_SINCE
        log.info(
            "systemd %s: CPUWeight= on %s%s",
            version,
            "session scopes" if self.by_account else "user slices",
            "" if self.idle else "; no CPUWeight=idle before 252, background gets weight 1",
        )

    def _unit_of(self, pid: int) -> str | None:
        try:
            text = Path(f"{self.proc}/{pid}/cgroup").read_text()
        except OSError:
            return None
        return unit_cgroup(text, self.by_account)

    def apply(self, targets: Sequence[LnodeTarget]) -> None:
        """Weigh the unit of every target's processes; units no longer targeted go
        back to systemd's default weight."""
        e, _n, bg = arrays(targets)
        weights = cgroup2_weights(e, bg)
        wanted: dict[str, int] = {}
        groups: dict[str, list[str]] = {}
        claimed: set[str] = set()
        for t, w, b in zip(targets, weights.tolist(), bg.tolist(), strict=True):
            w = CPU_WEIGHT_IDLE if b and self.idle else int(w)
            cgroups = {cg for pid in t.pids if (cg := self._unit_of(pid)) is not None}
            for cg in sorted(cgroups):
                unit = cg.rsplit("/", 1)[-1]
                # A unit holding processes of two lnodes (one user in two accounts)
                # takes the larger weight: never starve an lnode that shares it.
                if unit not in wanted or w > wanted[unit]:
                    wanted[unit] = w
                if cg not in claimed:  # one counter counted for one lnode only
                    claimed.add(cg)
                    groups.setdefault(safe_name(t.name), []).append(cg)
        self._groups = groups
        for unit, w in wanted.items():
            if self._weight.get(unit) != w:
                self._set(unit, w)
        for unit in [u for u in self._weight if u not in wanted]:
            self._set(unit, CPU_WEIGHT_DEFAULT)
            self._weight.pop(unit, None)

    def _set(self, unit: str, weight: int) -> None:
        try:
            self.bus.set_cpu_weight(unit, weight)
        except SystemdError as err:
            if (unit, err.name) not in self._refused:
                self._refused.add((unit, err.name))
                log.warning("systemd refused CPUWeight=%s on %s: %s", weight, unit, err)
            self._weight.pop(unit, None)  # try again at the next apply
            return
        except (OSError, TimeoutError) as err:
            log.warning("systemd did not answer for %s: %s", unit, err)
            self._weight.pop(unit, None)
            return
        if weight != CPU_WEIGHT_DEFAULT:
            self._weight[unit] = weight

    def read_groups(self, members: bool = True) -> dict[str, GroupReading]:
        """Each lnode's CPU seconds from its units' ``cpu.stat`` and the processes in
        them now (`members` False: no pids, as nothing was moved), keyed by
        `safe_name(lnode)`."""
        out = {}
        for name, cgs in self._groups.items():
            cpu, pids = 0.0, set()
            try:
                for cg in cgs:
                    d = self.mount / cg.lstrip("/")
                    cpu += parse_usage((d / "cpu.stat").read_text())
                    if members:
                        for top, _dirs, files in os.walk(d):
                            if "cgroup.procs" in files:
                                text = Path(top, "cgroup.procs").read_text()
                                pids.update(int(p) for p in text.split())
            except (OSError, ValueError):
                continue
            out[name] = GroupReading(cpu, frozenset(pids))
        return out

    def teardown(self) -> None:
        """Every unit we weighed back to systemd's default; close the connection."""
        if self.bus is None:
            return
        for unit in list(self._weight):
            self._set(unit, CPU_WEIGHT_DEFAULT)
        self._weight.clear()
        self._groups.clear()
        self.bus.close()
        self.bus = None
