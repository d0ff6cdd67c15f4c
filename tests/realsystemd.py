"""A real systemd booted in namespaces of its own, for the system tier (issue 32).

`RealSystemd` boots this machine's /lib/systemd/systemd as PID 1 of a new PID
namespace, in about 4 s, and drives it over its private D-Bus socket.  Nothing it does
reaches the host's init, its units or its cgroup hierarchies beyond one subtree made
for it:

- `unshare --pid --fork --kill-child --mount --propagation private --mount-proc --uts
  --ipc --net --cgroup`, started from a cgroup subtree made for it (`fairshare-rsd-*`)
  in the host's ``name=systemd``, ``cpu`` and ``cpuacct`` hierarchies, so the
  namespace's cgroup root is that subtree;
- inside (`BOOT`): private tmpfs over /run, /tmp, /var/lib and /dev (a few device
  nodes, a new devpts, the harness's pty as /dev/console); /proc/sys, /sys and /
  read-only in that namespace only; /sys/fs/cgroup a tmpfs with ``name=systemd``,
  ``cpu`` and ``cpuacct`` mounted fresh and an empty read-only tmpfs for every other
  controller and for ``unified`` (else systemd mounts the host's cgroup v2 root there,
  hybrid mode, and makes its units in it), so systemd runs in legacy mode and touches
  no host hierarchy; the
  test's work directory bound at /run/host (unit files, UDBs, logs);
- `env -i container=fairshare-test SYSTEMD_UNIT_PATH=/run/host/units` with empty
  generator paths, then ``systemd --unit=fairshare-test.target`` (a minimal target).

The private socket (/run/systemd/private) refuses a peer whose pid reads as 0 in
systemd's namespace, so the harness starts a relay inside the namespace's PID
namespace (``nsenter -t PID -p``, `relay` below) that listens on a socket in the
work directory: the test's own process then connects there with jeepney (the
systemd enforcer's `SystemdBus` too), and every call is checked by the real systemd.

Processes for the units are started inside the namespace and double-forked
(`spawn`), so systemd reaps them and notices when a scope empties.  `close` kills
the namespace's PID 1 (the kernel then kills every process in it, the relay too),
and removes the cgroup subtrees; so does an interrupted test (``finally``), and
if the test process itself is killed, unshare gets SIGKILL (PR_SET_PDEATHSIG)
and a guard process (``sh``, polling once a second) kills the namespace's PID 1, which
outlives a killed unshare; the next boot removes whatever such a run left
(`sweep_stale`).

On this host CPUWeight= becomes ``cpu.shares`` (weight * 1024 / 100) since systemd
runs in legacy mode here; CPUUsageNSec is unavailable (cpu and cpuacct are separate
hierarchies).

Run as a script (``python3 tests/realsystemd.py relay LISTEN TARGET``) it is the relay.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pty
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

SYSTEMD = Path("/lib/systemd/systemd")
CGROUP = Path("/sys/fs/cgroup")
#: The host hierarchies the namespace gets a subtree of (and mounts fresh inside).
HIERARCHIES = ("systemd", "cpu", "cpuacct")
PREFIX = "fairshare-rsd-"
TARGET = "fairshare-test.target"
#: Units the default dependencies of a service or scope name: present, and empty.
MINIMAL_UNITS = {
    TARGET: "[Unit]\nDescription=fair-share test target\n",
    "sysinit.target": "[Unit]\nDescription=sysinit\n",
    "basic.target": "[Unit]\nDescription=basic\n",
    "shutdown.target": "[Unit]\nDescription=shutdown\nDefaultDependencies=no\n",
}
MANAGER = ("/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager")

# The namespace's PID 1 before it becomes systemd.  $1: the host work directory.
BOOT = r"""
set -eu
W=$1
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
mkdir /run/host
mount --bind "$W" /run/host
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /var/lib
touch /run/console
mount --bind "$(readlink /proc/self/fd/0)" /run/console
mount -t tmpfs -o mode=0755,nosuid tmpfs /dev
mknod -m 666 /dev/null c 1 3
mknod -m 666 /dev/zero c 1 5
mknod -m 666 /dev/full c 1 7
mknod -m 666 /dev/random c 1 8
mknod -m 666 /dev/urandom c 1 9
mknod -m 666 /dev/tty c 5 0
mkdir /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts
ln -s pts/ptmx /dev/ptmx
touch /dev/console
mount --move /run/console /dev/console
rm /run/console
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
mount -o remount,bind,ro /sys
mount -t tmpfs -o mode=0755 tmpfs /sys/fs/cgroup
mkdir /sys/fs/cgroup/systemd /sys/fs/cgroup/cpu /sys/fs/cgroup/cpuacct
mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
mount -t cgroup -o cpu cgroup /sys/fs/cgroup/cpu
mount -t cgroup -o cpuacct cgroup /sys/fs/cgroup/cpuacct
for c in unified $(awk 'NR > 1 && $4 == 1 {print $1}' /proc/cgroups); do
    case $c in cpu|cpuacct) continue ;; esac
    mkdir -p /sys/fs/cgroup/$c
    mount -t tmpfs -o ro,mode=0755 tmpfs /sys/fs/cgroup/$c
done
mount -o remount,bind,ro /
ip link set lo up 2>/dev/null || true
mkdir /run/empty-generators
exec env -i container=fairshare-test PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    SYSTEMD_UNIT_PATH=/run/host/units \
    SYSTEMD_GENERATOR_PATH=/run/empty-generators \
    SYSTEMD_ENVIRONMENT_GENERATOR_PATH=/run/empty-generators \
    /lib/systemd/systemd --unit=fairshare-test.target --log-target=console --log-level=notice
"""


def unavailable() -> str | None:
    """Why a real systemd cannot be booted here, or None (the last check boots nothing:
    it asks unshare for the namespaces)."""
    if os.geteuid() != 0:
        return "needs root (namespaces, cgroup mounts)"
    if not SYSTEMD.exists():
        return f"no {SYSTEMD}"
    for tool in ("unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    for h in HIERARCHIES:
        if not (CGROUP / h / "cgroup.procs").exists():
            return f"no cgroup v1 {h} hierarchy at {CGROUP / h} (systemd is booted in legacy mode)"
    r = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount", "--cgroup", "--net", "--uts", "--ipc", "true"],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        return f"unshare refused the namespaces: {r.stderr.strip()[:200]}"
    return None


#: prctl(2), looked up before any fork (the child of a threaded process must not load).
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the test process dies (prctl
    PR_SET_PDEATHSIG), so a killed test leaves no unshare or relay behind."""
    _PRCTL(1, signal.SIGKILL, 0, 0, 0)


def remove_tree(top: Path) -> bool:
    """rmdir every cgroup under `top`, deepest first; True when it is gone."""
    if not top.is_dir():
        return True
    for here, _dirs, _files in os.walk(top, topdown=False):
        with contextlib.suppress(OSError):
            Path(here).rmdir()
    return not top.exists()


def _pidns() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def sweep_stale() -> None:
    """Remove the subtrees of earlier runs killed before their cleanup: where the run
    was in this PID namespace and its process is gone, kill what is left in the
    subtree (its systemd first) and remove it; a run of another PID namespace's is
    removed only once it is empty."""
    for top in (CGROUP / "systemd").glob(PREFIX + "*"):
        ns, _, pid = top.name[len(PREFIX) :].partition("-")
        pid = pid.split("-")[0]
        if not (ns == str(_pidns()) and pid.isdigit()):
            continue
        if Path(f"/proc/{pid}").exists():
            continue  # a live run's
        for here, _dirs, _files in os.walk(top):
            with contextlib.suppress(OSError, ValueError):
                for p in Path(here, "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        os.kill(int(p), signal.SIGKILL)
    time.sleep(0.1)
    for h in HIERARCHIES:
        for top in (CGROUP / h).glob(PREFIX + "*"):
            remove_tree(top)


def ns_pid_of(host_pid: int) -> int:
    """The pid `host_pid` has in its innermost PID namespace."""
    for line in Path(f"/proc/{host_pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    raise LookupError(host_pid)


class RealSystemd:
    """A real systemd in namespaces of its own; `with RealSystemd(work) as sd:`.

    `work`: a directory of the test's (bound at /run/host inside); `units`: unit
    files (name -> text) put beside the minimal target before boot."""

    def __init__(self, work: Path, units: dict[str, str] | None = None) -> None:
        self.work = Path(work)
        self.units = dict(units or {})
        self.name = f"{PREFIX}{_pidns()}-{os.getpid()}-{time.monotonic_ns()}"
        self.proc: subprocess.Popen | None = None
        self.relay: subprocess.Popen | None = None
        self.guard: subprocess.Popen | None = None
        self.pid = 0  # systemd's pid as this process sees it
        self.console = bytearray()
        self._master = -1
        self._reader: threading.Thread | None = None
        self.address = f"unix:path={self.work / 'systemd-bus.sock'}"
        self._conn = None

    # -- boot and teardown ---------------------------------------------------------------

    def __enter__(self) -> RealSystemd:
        try:
            self.boot()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def cgroup(self, hierarchy: str, path: str = "") -> Path:
        """The host directory of the namespace's cgroup `path` ("/user.slice/...")."""
        return CGROUP / hierarchy / self.name / path.lstrip("/")

    def boot(self, timeout: float = 30.0) -> None:
        sweep_stale()
        units = self.work / "units"
        units.mkdir(parents=True, exist_ok=True)
        for name, text in {**MINIMAL_UNITS, **self.units}.items():
            (units / name).parent.mkdir(parents=True, exist_ok=True)
            (units / name).write_text(text)
        for h in HIERARCHIES:
            self.cgroup(h).mkdir()
        enter = "; ".join(f'echo $$ > "{self.cgroup(h)}/cgroup.procs"' for h in HIERARCHIES)
        master, slave = pty.openpty()
        self._master = master
        self._reader = threading.Thread(target=self._read_console, daemon=True)
        self._reader.start()
        unshare = [
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount",
            "--propagation",
            "private",
            "--mount-proc",
            "--uts",
            "--ipc",
            "--net",
            "--cgroup",
        ]
        self.proc = subprocess.Popen(
            ["sh", "-c", f'{enter}; exec "$@"', "sh", *unshare, "bash", "-c", BOOT, "boot"]
            + [str(self.work)],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        os.close(slave)
        deadline = time.monotonic() + timeout
        self.pid = self._child_of(self.proc.pid, deadline)
        # systemd, PID 1 of its namespace, outlives a killed unshare: a guard kills it
        # when this process dies without its cleanup.
        self.guard = subprocess.Popen(
            [
                "sh",
                "-c",
                "while kill -0 $0 2>/dev/null; do sleep 1; done; kill -9 $1",
                str(os.getpid()),
                str(self.pid),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_for_socket(deadline)
        self._start_relay()
        self._connect(deadline)

    def _read_console(self) -> None:
        while True:
            try:
                data = os.read(self._master, 4096)
            except OSError:
                return
            if not data:
                return
            self.console += data

    def _child_of(self, pid: int, deadline: float) -> int:
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"unshare exited {self.proc.returncode}: {self.log()}")
            with contextlib.suppress(OSError):
                kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                if kids:
                    return int(kids[0])
            time.sleep(0.02)
        raise TimeoutError(f"unshare started no child: {self.log()}")

    def _wait_for_socket(self, deadline: float) -> None:
        sock = Path(f"/proc/{self.pid}/root/run/systemd/private")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"systemd exited {self.proc.returncode}: {self.log()}")
            if sock.exists():
                return
            time.sleep(0.05)
        raise TimeoutError(f"systemd made no private socket: {self.log()}")

    def _start_relay(self) -> None:
        listen = self.work / "systemd-bus.sock"
        target = f"/proc/{self.pid}/root/run/systemd/private"
        self.relay = subprocess.Popen(
            ["nsenter", "-t", str(self.pid), "-p", "--", sys.executable, __file__, "relay"]
            + [str(listen), target],
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + 10
        while not listen.exists():
            if self.relay.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the relay did not start ({self.relay.poll()})")
            time.sleep(0.02)

    def _connect(self, deadline: float) -> None:
        """Connect and ask the version until systemd answers (it may still be starting)."""
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                bus = self.bus(timeout=2)
                try:
                    bus.version()
                finally:
                    bus.close()
                return
            except (OSError, TimeoutError, RuntimeError) as err:
                last = err
                time.sleep(0.1)
        raise TimeoutError(f"systemd did not answer on its private socket ({last}): {self.log()}")

    def close(self) -> None:
        """Kill the namespace (every process in it) and remove the cgroup subtrees."""
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        for p in (self.proc, self.relay, self.guard):
            if p is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
        deadline = time.monotonic() + 10
        while not all(remove_tree(self.cgroup(h)) for h in HIERARCHIES):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if self._master >= 0:
            with contextlib.suppress(OSError):
                os.close(self._master)
            self._master = -1

    def log(self) -> str:
        """The console's last lines (systemd's messages), for failure messages."""
        return bytes(self.console[-3000:]).decode(errors="replace")

    # -- D-Bus -----------------------------------------------------------------------------

    def bus(self, timeout: float = 5.0):
        """A new `SystemdBus` on the real systemd (its private socket, peer to peer)."""
        from fairshare.enforce.systemd import SystemdBus

        return SystemdBus(self.address, timeout=timeout, peer=True)

    def call(self, path: str, interface: str, method: str, signature: str = "", body=()):
        """One method call on systemd (a connection kept for the harness's own calls);
        raises `SystemdError` when systemd answers with an error."""
        from jeepney import DBusAddress, new_method_call

        if self._conn is None:
            self._conn = self.bus()
        msg = new_method_call(
            DBusAddress(path, "org.freedesktop.systemd1", interface), method, signature, body
        )
        return self._conn._call(msg)

    def manager(self, method: str, signature: str = "", body=()):
        return self.call(*MANAGER, method, signature, body)

    def unit_path(self, unit: str) -> str:
        return self.manager("LoadUnit", "s", (unit,))[0]

    def prop(self, unit: str, interface: str, name: str):
        """A property of `unit` (interface: "Unit", "Service", "Slice", "Scope")."""
        iface = f"org.freedesktop.systemd1.{interface}"
        reply = self.call(
            self.unit_path(unit), "org.freedesktop.DBus.Properties", "Get", "ss", (iface, name)
        )
        return reply[0][1]

    def state(self, unit: str) -> str:
        return self.prop(unit, "Unit", "ActiveState")

    def wait_state(self, unit: str, states: set[str], timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            state = self.state(unit)
            if state in states or time.monotonic() > deadline:
                return state
            time.sleep(0.05)

    def start_scope(self, unit: str, slice_: str, pids: list[int]) -> None:
        """A transient scope `unit` in `slice_` holding `pids` (pids in the namespace)."""
        props = [("PIDs", ("au", pids)), ("Slice", ("s", slice_))]
        self.manager("StartTransientUnit", "ssa(sv)a(sa(sv))", (unit, "fail", props, []))
        state = self.wait_state(unit, {"active", "failed"})
        if state != "active":
            raise RuntimeError(f"{unit} is {state}: {self.log()}")

    # -- processes inside --------------------------------------------------------------------

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Run `argv` in the namespace (its PID and mount namespaces), as root."""
        return subprocess.run(
            ["nsenter", "-t", str(self.pid), "-p", "-m", "--", *argv],
            capture_output=True,
            text=True,
            timeout=kw.pop("timeout", 30),
            **kw,
        )

    def spawn(self, command: str = "exec sleep 600") -> tuple[int, int]:
        """Start `command` (sh) in the namespace, double-forked so systemd is its parent,
        in the namespace's root cgroups; its pid inside and as this process sees it."""
        # The shell enters the cgroups before it forks, so the child is in them before
        # anyone (systemd, a test) moves it.
        enter = "; ".join(f"echo $$ > /sys/fs/cgroup/{h}/cgroup.procs" for h in HIERARCHIES)
        script = f"{enter}; ( {command} ) </dev/null >/dev/null 2>&1 & echo $!"
        r = self.run(["sh", "-c", script])
        if r.returncode != 0:
            raise RuntimeError(f"spawn: {r.stderr.strip()}")
        inner = int(r.stdout.split()[-1])
        return inner, self.host_pid(inner)

    def host_pid(self, inner: int) -> int:
        """The pid this process sees for the namespace's pid `inner`."""
        ns = os.readlink(f"/proc/{self.pid}/ns/pid")
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == ns and ns_pid_of(int(name)) == inner:
                    return int(name)
            except (OSError, LookupError):
                continue
        raise LookupError(f"no process {inner} in the namespace")


# -- the relay -------------------------------------------------------------------------------


def relay(listen: str, target: str) -> None:
    """Accept on `listen` and pump bytes both ways between each client and a new
    connection to `target` (runs inside systemd's PID namespace)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(listen + ".new")
    os.rename(listen + ".new", listen)
    server.listen(16)
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ)
    peer: dict[socket.socket, socket.socket] = {}
    while True:
        for key, _ in sel.select():
            s = key.fileobj
            if s is server:
                client, _ = server.accept()
                upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    upstream.connect(target)
                except OSError:
                    client.close()
                    continue
                peer[client], peer[upstream] = upstream, client
                sel.register(client, selectors.EVENT_READ)
                sel.register(upstream, selectors.EVENT_READ)
                continue
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            other = peer.get(s)
            if data and other is not None:
                with contextlib.suppress(OSError):
                    other.sendall(data)
                continue
            for x in (s, other):
                if x is not None and x in peer:
                    sel.unregister(x)
                    peer.pop(x)
                    x.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["relay"] and len(sys.argv) == 4:
        relay(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"usage: {sys.argv[0]} relay LISTEN TARGET")
