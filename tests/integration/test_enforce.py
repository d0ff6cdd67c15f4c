"""Enforcer backends and detection on fake cgroup trees, the daemon's lock, process
events parsed.  On the real machine (cgroups, nice, events): tests/system/test_enforce_real.py."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from busy import RecordedOs

from fairshare.cli.shrdaemon import enforcer_line
from fairshare.collect import GroupReading
from fairshare.daemon.lock import AlreadyRunning, DaemonLock
from fairshare.enforce import cgroupfs
from fairshare.enforce.actions import REAL_OS
from fairshare.enforce.base import GroupShare, LnodeTarget
from fairshare.enforce.cgroup1 import Cgroup1Enforcer
from fairshare.enforce.cgroup2 import Cgroup2Enforcer
from fairshare.enforce.detect import detect, make_enforcer
from fairshare.enforce.mapping import MAX_GROUP_LEVELS
from udb.errors import OptionError

CPU_V1 = Path("/sys/fs/cgroup/cpu")

MOUNTS_V1 = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""


def fake_proc(tmp_path: Path, pids: list[int], line: str) -> str:
    proc = tmp_path / "proc"
    for pid in pids:
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(line)
    return str(proc)


def fake_v2(tmp_path: Path) -> Path:
    mount = tmp_path / "cg2"
    mount.mkdir()
    (mount / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (mount / "cgroup.subtree_control").write_text("")
    (mount / "cgroup.procs").write_text("")
    # A real cgroupfs makes these files itself when the directory is created.
    (mount / "fairshare").mkdir()
    (mount / "fairshare" / "cgroup.subtree_control").write_text("")
    return mount


# -- detection ---------------------------------------------------------------------------


def test_detect_prefers_cgroup2_with_cpu(tmp_path):
    mount = fake_v2(tmp_path)
    mounts = f"cgroup2 {mount} cgroup2 rw 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n"
    c = detect("auto", euid=0, mounts_text=mounts, systemd_booted=False)
    assert c.name == "cgroup2" and c.mount == mount and "offers the cpu controller" in c.reason


def test_detect_prefers_systemd_where_it_is_pid1_on_cgroup2(tmp_path):
    mount = fake_v2(tmp_path)
    mounts = f"cgroup2 {mount} cgroup2 rw 0 0\n"
    c = detect("auto", euid=0, mounts_text=mounts, systemd_booted=True)
    assert c.name == "systemd" and c.mount == mount and "systemd is PID 1" in c.reason
    assert detect("systemd", euid=0, mounts_text=mounts, systemd_booted=True).name == "systemd"
    with pytest.raises(OptionError, match="--enforcer systemd: systemd is not PID 1"):
        detect("systemd", euid=0, mounts_text=mounts, systemd_booted=False)
    # systemd on cgroup v1 (cpu bound to v1): the cgroup1 enforcer, as before.
    c = detect("auto", euid=0, mounts_text=MOUNTS_V1, systemd_booted=True)
    assert c.name == "cgroup1"
    with pytest.raises(OptionError, match="--enforcer systemd: no cgroup v2"):
        detect("systemd", euid=0, mounts_text="", systemd_booted=True)


def test_detect_systemd_by_name_in_legacy_mode():
    """systemd in legacy mode (its name=systemd hierarchy, cpu on cgroup v1): asked for
    by name, the systemd enforcer on the cpu hierarchy; auto keeps cgroup1."""
    legacy = MOUNTS_V1 + "cgroup /sys/fs/cgroup/systemd cgroup rw,name=systemd 0 0\n"
    c = detect("systemd", euid=0, mounts_text=legacy, systemd_booted=True)
    assert c.name == "systemd" and c.mount == CPU_V1 and "legacy mode" in c.reason
    assert detect("auto", euid=0, mounts_text=legacy, systemd_booted=True).name == "cgroup1"
    with pytest.raises(OptionError, match="systemd is not PID 1"):
        detect("systemd", euid=0, mounts_text=legacy, systemd_booted=False)
    with pytest.raises(OptionError, match="--enforcer systemd: cgroup v2 at"):
        detect("systemd", euid=0, mounts_text=MOUNTS_V1, systemd_booted=True)


def test_detect_this_layout_picks_cgroup1_and_says_why(tmp_path):
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("hugetlb\n")
    mounts = MOUNTS_V1.replace("/sys/fs/cgroup/unified", str(unified))
    c = detect("auto", euid=0, mounts_text=mounts, systemd_booted=False)
    assert c.name == "cgroup1" and c.mount == Path("/sys/fs/cgroup/cpu")
    assert "lacks the cpu controller" in c.reason and "cgroup v1 cpu hierarchy" in c.reason
    assert c.acct == Path("/sys/fs/cgroup/cpuacct")
    assert "CPU counted by cpuacct at /sys/fs/cgroup/cpuacct" in c.reason
    no_acct = "".join(ln for ln in MOUNTS_V1.splitlines(True) if "cpuacct" not in ln)
    c = detect("cgroup1", euid=0, mounts_text=no_acct)
    assert c.acct is None and "no cpuacct hierarchy: CPU sampled per process" in c.reason


def test_detect_falls_back_to_nice_then_none():
    assert detect("auto", euid=0, mounts_text="").name == "nice"
    c = detect("auto", euid=1000, mounts_text=MOUNTS_V1)
    assert c.name == "none" and "not root (euid 1000)" in c.reason
    assert detect("none", euid=0, mounts_text=MOUNTS_V1).name == "none"


def test_nosched_keeps_the_choice_and_says_none_at_start():
    # NOSCHED/NOSHARE is Consts.scheduling, read by the daemon each cycle: the enforcer
    # chosen stays the machine's (it takes over when they are cleared); the start-up
    # line says none is in force and which enforcer waits.
    c = detect("cgroup1", euid=0, mounts_text=MOUNTS_V1)
    assert c.name == "cgroup1"
    line = enforcer_line(c, scheduling=False)
    assert line.startswith("enforcer none: NOSCHED or NOSHARE is set, accounting only")
    assert f"(cgroup1 when cleared: {c.reason})" in line
    assert enforcer_line(c, scheduling=True) == f"enforcer cgroup1: {c.reason}"
    none = detect("none", euid=0, mounts_text=MOUNTS_V1)
    assert enforcer_line(none, scheduling=False) == f"enforcer none: {none.reason}"


def test_detect_named_enforcer_that_cannot_work_is_an_error():
    with pytest.raises(OptionError, match="--enforcer cgroup2: no cgroup v2 hierarchy"):
        v1_only = "".join(ln for ln in MOUNTS_V1.splitlines(True) if "cgroup2" not in ln)
        detect("cgroup2", euid=0, mounts_text=v1_only)
    with pytest.raises(OptionError, match="--enforcer cgroup1: no cgroup v1 cpu"):
        detect("cgroup1", euid=0, mounts_text="")
    with pytest.raises(OptionError, match="expected one of"):
        detect("cgroup3", euid=0, mounts_text="")


# -- cgroup v2 on a fake tree --------------------------------------------------------------


def test_cgroup2_writes_weights_idle_and_places_processes(tmp_path):
    mount = fake_v2(tmp_path)
    proc = fake_proc(tmp_path, [101, 102, 103], "0::/user.slice/session-1.scope\n")
    e = Cgroup2Enforcer(mount, REAL_OS, proc=proc)
    e.setup()
    assert (mount / "cgroup.subtree_control").read_text() == "+cpu"
    assert (mount / "fairshare" / "cgroup.subtree_control").read_text() == "+cpu"
    # The fair-share group weighs like one nice-0 process (100) per CPU at the root.
    assert (mount / "fairshare" / "cpu.weight").read_text() == str(100 * os.cpu_count())
    e.apply(
        [
            LnodeTarget("alice", (101,), e_share=0.6, nrun=1),
            LnodeTarget("bob", (102,), e_share=0.3, nrun=1),
            LnodeTarget("carol", (103,), e_share=0.1, nrun=1, background=True),
        ]
    )
    fs = mount / "fairshare"
    assert (fs / "alice" / "cpu.weight").read_text() == "10000"
    assert (fs / "bob" / "cpu.weight").read_text() == "5000"  # 0.3 / 0.6 of 10000
    assert (fs / "carol" / "cpu.weight").read_text() == "1"
    assert (fs / "alice" / "cgroup.procs").read_text() == "101"
    assert (fs / "bob" / "cgroup.procs").read_text() == "102"
    # Nothing changed: nothing is written again.
    (fs / "alice" / "cgroup.procs").write_text("sentinel")
    (fs / "alice" / "cpu.weight").write_text("sentinel")
    e.apply(
        [
            LnodeTarget("alice", (101,), e_share=0.6, nrun=1),
            LnodeTarget("bob", (102,), e_share=0.3, nrun=1),
            LnodeTarget("carol", (103,), e_share=0.1, nrun=1, background=True),
        ]
    )
    assert (fs / "alice" / "cgroup.procs").read_text() == "sentinel"
    assert (fs / "alice" / "cpu.weight").read_text() == "sentinel"
    # Each lnode's CPU from its cpu.stat (usage_usec), and who is in it.
    (fs / "alice" / "cgroup.procs").write_text("101\n104\n")
    (fs / "alice" / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n")
    (fs / "bob" / "cgroup.procs").write_text("")
    (fs / "bob" / "cpu.stat").write_text("usage_usec 25\n")
    got = e.read_groups()
    assert got["alice"] == GroupReading(1.5, frozenset({101, 104}))
    assert got["bob"] == GroupReading(25e-6, frozenset())
    assert "carol" not in got  # no cpu.stat: unreadable, left out


def test_cgroup2_idle_flag_written_when_the_kernel_has_it(tmp_path):
    mount = fake_v2(tmp_path)
    proc = fake_proc(tmp_path, [7], "0::/\n")
    e = Cgroup2Enforcer(mount, REAL_OS, proc=proc)
    e.setup()
    for name in ("a", "b"):
        (mount / "fairshare" / name).mkdir()
        (mount / "fairshare" / name / "cpu.idle").write_text("0")
    e.apply([LnodeTarget("a", (7,), 0.9, 1), LnodeTarget("b", (), 0.1, 0, background=True)])
    assert (mount / "fairshare" / "a" / "cpu.idle").read_text() == "0"
    assert (mount / "fairshare" / "b" / "cpu.idle").read_text() == "1"


def test_cgroup_tree_left_by_a_crashed_daemon_is_adopted(tmp_path):
    mount = fake_v2(tmp_path)
    proc = fake_proc(tmp_path, [9], "0::/\n")
    stale = mount / "fairshare" / "gone"
    stale.mkdir()
    (mount / "fairshare" / "kept").mkdir()
    (mount / "fairshare" / "kept" / "cpu.weight").write_text("77")
    e = Cgroup2Enforcer(mount, REAL_OS, proc=proc)
    e.setup()
    e.apply([LnodeTarget("kept", (9,), 1.0, 1)])
    assert (mount / "fairshare" / "kept" / "cpu.weight").read_text() == "10000"
    assert not stale.exists()  # its lnode is not active: removed


def test_cgroup1_shares_on_a_fake_tree(tmp_path):
    mount = tmp_path / "cpu"
    mount.mkdir()
    (mount / "cgroup.procs").write_text("")
    proc = fake_proc(tmp_path, [5, 6], "4:memory:/x\n1:cpu:/\n2:cpuacct:/\n")
    e = Cgroup1Enforcer(mount, REAL_OS, proc=proc)
    e.setup()
    e.apply([LnodeTarget("u1", (5,), 0.75, 1), LnodeTarget("u2", (6,), 0.25, 1)])
    assert (mount / "fairshare" / "u1" / "cpu.shares").read_text() == "262144"
    assert (mount / "fairshare" / "u2" / "cpu.shares").read_text() == "87381"  # 262144 / 3
    assert e._origin == {5: ("/",), 6: ("/",)}
    assert e.read_groups() == {}  # no cpuacct hierarchy: no counter, CPU sampled per process


def test_cgroup1_with_cpuacct_apart_places_in_both_and_reads_the_counters(tmp_path, monkeypatch):
    cpu, acct = tmp_path / "cpu", tmp_path / "cpuacct"
    for m in (cpu, acct):
        m.mkdir()
        (m / "cgroup.procs").write_text("")
    (acct / "users").mkdir()
    (acct / "users" / "cgroup.procs").write_text("")
    proc = fake_proc(tmp_path, [5, 6, 7], "2:cpuacct:/users\n1:cpu:/\n")
    e = Cgroup1Enforcer(cpu, REAL_OS, proc=proc, acct=acct)
    e.setup()
    assert (cpu / "fairshare" / "cpu.shares").read_text() == str(1024 * os.cpu_count())
    e.apply([LnodeTarget("u1", (5,), 0.5, 1), LnodeTarget("u 2", (6,), 0.5, 1)])
    for m in (cpu, acct):  # made, and the processes placed, in both hierarchies
        assert (m / "fairshare" / "u1" / "cgroup.procs").read_text() == "5"
        assert (m / "fairshare" / "u_202" / "cgroup.procs").read_text() == "6"
    assert e._origin[5] == ("/", "/users")
    # The kernel's counters (ns) and members, as cgroupfs would show them:
    (acct / "fairshare" / "u1" / "cpuacct.usage").write_text("2500000000\n")
    (acct / "fairshare" / "u1" / "cgroup.procs").write_text("5\n9\n")
    (acct / "fairshare" / "u_202" / "cpuacct.usage").write_text("0\n")
    got = e.read_groups()
    assert got == {
        "u1": GroupReading(2.5, frozenset({5, 9})),
        "u_202": GroupReading(0.0, frozenset({6})),
    }
    # The counters are read again through descriptors kept open: new values are seen.
    (acct / "fairshare" / "u1" / "cpuacct.usage").write_text("3000000000\n")
    assert e.read_groups(members=False)["u1"].cpu == 3.0
    assert sorted(e._counters._fd) == ["u1", "u_202"]
    # A new session of u3 between cycles: its cgroup is made at the top weight at once.
    e.place(7, "u3")
    assert (cpu / "fairshare" / "u3" / "cpu.shares").read_text() == "262144"
    assert (acct / "fairshare" / "u3" / "cgroup.procs").read_text() == "7"
    # The next cycle, sampled before the placement, does not know u3: it is kept.
    e.apply([LnodeTarget("u1", (5,), 1.0, 1)])
    assert "u3" in e._weight  # (u_202 stays listed only because a fake dir cannot go)
    # u 2's process is back where it came from in each hierarchy (a fake tree keeps the
    # emptied directories: its files are not cgroupfs's).
    assert (acct / "users" / "cgroup.procs").read_text() == "6"
    assert (cpu / "cgroup.procs").read_text() == "6"
    # 5 and 7 (placed between cycles: its origin is kept) both go back to /users (the
    # fake file keeps only the last write: the writes are what the kernel is told).
    assert e._origin[5] == e._origin[7] == ("/", "/users")
    written: list[tuple[Path, str]] = []
    real_write = REAL_OS.write_file

    def recorded(path: Path, text: str) -> None:
        written.append((path, text))
        real_write(path, text)

    monkeypatch.setattr(REAL_OS, "write_file", recorded)
    e.teardown()
    back = sorted(text for path, text in written if path == acct / "users" / "cgroup.procs")
    assert back == ["5", "7"]
    assert e._counters._fd == {}  # every descriptor closed


def test_make_enforcer_names():
    from fairshare.enforce.detect import Choice

    actions = RecordedOs()
    for choice, name in [
        (Choice("none", "x"), "none"),
        (Choice("nice", "x"), "nice"),
        (Choice("cgroup1", "x", CPU_V1), "cgroup1"),
        (Choice("cgroup2", "x", Path("/x")), "cgroup2"),
        (Choice("systemd", "x", Path("/x")), "systemd"),
    ]:
        e = make_enforcer(choice, actions)
        assert e.name == name and e.actions is actions
    assert make_enforcer(Choice("systemd", "x", Path("/x")), actions, by_account=True).by_account


# -- the lock ----------------------------------------------------------------------------------

HOLD = """
import sys, time
from pathlib import Path
from fairshare.daemon.lock import DaemonLock
lock = DaemonLock("sqlite:///x", "x", Path(sys.argv[1]))
lock.acquire()
print("held", flush=True)
time.sleep(30)
"""


def test_lock_second_holder_is_told_who_has_it(tmp_path):
    path = tmp_path / "shrdaemon.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(AlreadyRunning) as err:
            DaemonLock("sqlite:///x", "/x.sqlite", path).acquire()
        assert str(err.value) == (
            f"UDB /x.sqlite is already served by pid {holder.pid} (lock {path})"
        )
    finally:
        holder.kill()
        holder.wait()
    # The kernel dropped the dead holder's lock: we get it.
    lock = DaemonLock("sqlite:///x", "/x.sqlite", path)
    lock.acquire()
    assert path.read_text().strip() == str(os.getpid())
    lock.release()


# -- process events ------------------------------------------------------------------------


def uid_event(what: int, tgid: int, ruid: int) -> bytes:
    from fairshare.enforce import events as ev

    data = ev.UID_EVENT.pack(tgid + 1, tgid, ruid, ruid)
    body = ev.EVENT_HDR.pack(what, 0, 123) + data
    cn = ev.CN_MSG.pack(ev.CN_IDX_PROC, ev.CN_VAL_PROC, 0, 0, len(body), 0) + body
    return ev.NLMSG_HDR.pack(ev.NLMSG_HDR.size + len(cn), 3, 0, 0, 0) + cn


def test_uid_events_are_parsed_and_other_events_ignored():
    from fairshare.enforce.events import PROC_EVENT_UID, parse_uid_events

    fork = 0x00000001
    msgs = uid_event(PROC_EVENT_UID, 4242, 61001) + uid_event(fork, 77, 0)
    msgs += uid_event(PROC_EVENT_UID, 4343, 0)
    assert parse_uid_events(msgs) == [(4242, 61001), (4343, 0)]
    assert parse_uid_events(b"") == []


def test_a_child_forked_while_its_cgroup_is_emptied_is_moved_out_too(tmp_path):
    """The kernel refuses to remove a cgroup a process is still in (EBUSY): a child
    forked while its parent was being moved out.  The cgroup is emptied again."""
    mount = tmp_path / "cpu"
    mount.mkdir()
    (mount / "cgroup.procs").write_text("")
    proc = fake_proc(tmp_path, [5, 6], "1:cpu:/\n")
    real = REAL_OS

    class ForkDuringMove:
        """The real file operations, but the first rmdir finds child 6 born in the cgroup."""

        def __init__(self):
            self.busy = 1

        def __getattr__(self, name):
            return getattr(real, name)

        def rmdir(self, path):
            if self.busy and path.name == "u1":
                self.busy -= 1
                (path / "cgroup.procs").write_text("6")
                raise OSError(errno.EBUSY, "busy", str(path))
            for f in path.iterdir():  # a fake cgroup's files go with it, as in cgroupfs
                f.unlink()
            real.rmdir(path)

    e = Cgroup1Enforcer(mount, ForkDuringMove(), proc=proc)
    e.setup()
    e.apply([LnodeTarget("u1", (5,), 1.0, 1)])
    e.teardown()
    assert not (mount / "fairshare").exists()
    assert (mount / "cgroup.procs").read_text() == "6"  # the last one moved back


def test_process_events_are_not_used_in_a_nested_pid_namespace(tmp_path):
    """In a container's PID namespace the connector's pids are the initial namespace's:
    the daemon then places new sessions at the next cycle instead."""
    from fairshare.enforce.events import nested_pid_namespace

    ns = os.stat("/proc/self/ns/pid").st_ino
    for name, nspid in (("host", "4242"), ("below", "4242\t17")):
        (tmp_path / name / "ns").mkdir(parents=True)
        os.symlink("/proc/self/ns/pid", tmp_path / name / "ns" / "pid")
        (tmp_path / name / "status").write_text(f"Name:\tx\nNSpid:\t{nspid}\n")
    in_init = ns == 0xEFFFFFFC
    assert nested_pid_namespace(str(tmp_path / "host")) is not in_init
    assert nested_pid_namespace(str(tmp_path / "below"))
    assert not nested_pid_namespace(str(tmp_path / "missing"))


# -- nested cgroups on a fake tree ---------------------------------------------------------


class FakeCgroupFs:
    """REAL_OS on a fake tree, with what cgroupfs does: writing a pid to a cgroup.procs
    moves it there (out of every other cgroup of that hierarchy), and rmdir removes a
    cgroup with no child cgroup and no process (its interface files go with it)."""

    name = "fake-cgroupfs"

    def __init__(self, mounts: list[Path]):
        self.mounts = mounts

    def write_file(self, path: Path, text: str) -> None:
        path = Path(path)
        if path.name != "cgroup.procs":
            path.write_text(text)
            return
        mount = next(m for m in self.mounts if path.is_relative_to(m))
        for procs in mount.rglob("cgroup.procs"):
            pids = [p for p in procs.read_text().split() if p != text]
            procs.write_text("\n".join(pids + ([text] if procs == path else [])))

    def mkdir(self, path: Path) -> None:
        Path(path).mkdir(exist_ok=True)
        if not (Path(path) / "cgroup.procs").exists():
            (Path(path) / "cgroup.procs").write_text("")

    def rmdir(self, path: Path) -> None:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, "gone", str(path))
        if any(d.is_dir() for d in path.iterdir()) or (path / "cgroup.procs").read_text():
            raise OSError(errno.EBUSY, "busy", str(path))
        for f in path.iterdir():
            f.unlink()
        path.rmdir()


def nested(*groups: tuple[str, float]) -> tuple[GroupShare, ...]:
    return tuple(GroupShare(name, e) for name, e in groups)


def test_cgroup2_nests_groups_and_weighs_siblings(tmp_path):
    mount = fake_v2(tmp_path)
    proc = fake_proc(tmp_path, [1, 2, 3, 4], "0::/user.slice\n")
    (mount / "user.slice").mkdir()
    (mount / "user.slice" / "cgroup.procs").write_text("1\n2\n3\n4")
    e = Cgroup2Enforcer(mount, FakeCgroupFs([mount]), proc=proc)
    e.setup()
    phys, chem = ("Physics", 0.5), ("Chem", 0.5)
    targets = [
        LnodeTarget("u1", (1,), 0.3, 8, groups=nested(phys)),
        LnodeTarget("u2", (2,), 0.2, 1, groups=nested(phys)),
        LnodeTarget("u3", (3,), 0.1, 1, groups=nested(chem)),
        LnodeTarget("u4", (4,), 0.4, 1, groups=nested(chem)),
    ]
    e.apply(targets)
    fs = mount / "fairshare"
    assert sorted(p.name for p in fs.iterdir() if p.is_dir()) == ["+Chem", "+Physics"]
    # Each cgroup weighed among its siblings: the groups equal, u3 a quarter of u4.
    assert (fs / "+Physics" / "cpu.weight").read_text() == "10000"
    assert (fs / "+Chem" / "cpu.weight").read_text() == "10000"
    assert (fs / "+Physics" / "u2" / "cpu.weight").read_text() == "6667"
    assert (fs / "+Chem" / "u3" / "cpu.weight").read_text() == "2500"
    assert (fs / "+Chem" / "cgroup.subtree_control").read_text() == "+cpu"
    assert (fs / "+Chem" / "u4" / "cgroup.procs").read_text() == "4"
    assert (fs / "+Chem" / "cgroup.procs").read_text() == ""  # processes only in leaves
    # The counters come from the lnode cgroups, by the lnode's name.
    (fs / "+Chem" / "u4" / "cpu.stat").write_text("usage_usec 2000000\n")
    (fs / "+Chem" / "cpu.stat").write_text("usage_usec 9000000\n")
    assert e.read_groups()["u4"] == GroupReading(2.0, frozenset({4}))
    assert "+Chem" not in e.read_groups()
    # A new session of u5, in Chem, between cycles: at once in its nested cgroup.
    proc5 = Path(proc) / "5"
    proc5.mkdir()
    (proc5 / "cgroup").write_text("0::/user.slice\n")
    e.place(5, "u5", ["Chem"])
    assert (fs / "+Chem" / "u5" / "cgroup.procs").read_text() == "5"
    # u4 moves to Physics while running; Chem's u3 and the new u5 leave: the processes
    # follow, the empty cgroups go (u5's stays one cycle: the sample did not see it).
    e.apply([replace(targets[3], groups=nested(phys)), *targets[:2]])
    assert (fs / "+Physics" / "u4" / "cgroup.procs").read_text() == "4"
    assert not (fs / "+Chem" / "u4").exists() and not (fs / "+Chem" / "u3").exists()
    assert (mount / "user.slice" / "cgroup.procs").read_text() == "3"  # back where it was
    e.read_groups()  # the next cycle's sample
    e.apply([replace(targets[3], groups=nested(phys)), *targets[:2]])
    assert not (fs / "+Chem").exists()
    # Teardown: everyone back, every cgroup removed.
    e.teardown()
    assert sorted((mount / "user.slice" / "cgroup.procs").read_text().split()) == list("12345")
    assert not fs.exists()


def test_nested_tree_left_by_a_crashed_daemon_is_adopted(tmp_path):
    mount = fake_v2(tmp_path)
    proc = fake_proc(tmp_path, [9], "0::/\n")
    fs = mount / "fairshare"
    for d in ("+Old/gone", "+Old/+Deep/x", "+Kept/kept"):
        (fs / d).mkdir(parents=True)
    (fs / "+Kept" / "kept" / "cpu.weight").write_text("77")
    os_ = FakeCgroupFs([mount])
    for d in ("+Old", "+Old/gone", "+Old/+Deep", "+Old/+Deep/x", "+Kept", "+Kept/kept"):
        os_.mkdir(fs / d)
    e = Cgroup2Enforcer(mount, os_, proc=proc)
    e.setup()
    e.apply([LnodeTarget("kept", (9,), 1.0, 1, groups=nested(("Kept", 1.0)))])
    assert (fs / "+Kept" / "kept" / "cpu.weight").read_text() == "10000"
    assert (fs / "+Kept" / "cpu.weight").read_text() == "10000"
    assert not (fs / "+Old").exists()  # its lnodes are not active: removed, deepest first


def test_trees_deeper_than_the_limit_are_collapsed_and_logged_once(tmp_path, monkeypatch):
    mount = tmp_path / "cpu"
    mount.mkdir()
    (mount / "cgroup.procs").write_text("")
    proc = fake_proc(tmp_path, [5, 6], "1:cpu:/\n2:cpuacct:/\n")
    e = Cgroup1Enforcer(mount, FakeCgroupFs([mount]), proc=proc)
    e.setup()
    deep = nested(*[(f"g{i}", 1.0) for i in range(MAX_GROUP_LEVELS + 2)])
    targets = [
        LnodeTarget("a", (5,), 0.75, 1, groups=deep),
        LnodeTarget("b", (6,), 0.25, 1, groups=deep[:-1]),
    ]
    said = []
    monkeypatch.setattr(cgroupfs.log, "info", lambda msg, *args: said.append(msg % args))
    e.apply(targets)
    e.apply(targets)
    kept = mount / "fairshare" / "/".join(f"+g{i}" for i in range(MAX_GROUP_LEVELS))
    assert (kept / "a" / "cpu.shares").read_text() == "262144"
    assert (kept / "b" / "cpu.shares").read_text() == "87381"  # siblings there now
    assert len(said) == 1 and "collapsed" in said[0]


def test_cgroup1_nests_in_both_hierarchies_when_cpuacct_is_apart(tmp_path):
    cpu, acct = tmp_path / "cpu", tmp_path / "cpuacct"
    for m in (cpu, acct):
        m.mkdir()
        (m / "cgroup.procs").write_text("5")
    proc = fake_proc(tmp_path, [5], "2:cpuacct:/\n1:cpu:/\n")
    e = Cgroup1Enforcer(cpu, FakeCgroupFs([cpu, acct]), proc=proc, acct=acct)
    e.setup()
    e.apply([LnodeTarget("u1", (5,), 0.5, 1, groups=nested(("P", 0.5)))])
    for m in (cpu, acct):
        assert (m / "fairshare" / "+P" / "u1" / "cgroup.procs").read_text() == "5"
    assert (cpu / "fairshare" / "+P" / "cpu.shares").read_text() == "262144"
    (acct / "fairshare" / "+P" / "u1" / "cpuacct.usage").write_text("1000000000\n")
    assert e.read_groups() == {"u1": GroupReading(1.0, frozenset({5}))}
    e.teardown()
    for m in (cpu, acct):
        assert (m / "cgroup.procs").read_text() == "5" and not (m / "fairshare").exists()


def test_cgroups_removed_behind_the_daemons_back_are_made_again(tmp_path):
    """Another daemon on the machine (a second UDB's, a test's shrdaemon --once) adopts
    the tree at its start and removes it at its exit: this daemon then wrote to cgroups
    that were no more and counted nothing of its lnodes' processes until they ended.
    The counter it cannot read, with its cgroup gone, makes it forget them: the next
    cycle makes them again, the parent too, and moves the processes back."""
    cpu, acct = tmp_path / "cpu", tmp_path / "cpuacct"
    for m in (cpu, acct):
        m.mkdir()
        (m / "cgroup.procs").write_text("5")
    proc = fake_proc(tmp_path, [5], "2:cpuacct:/\n1:cpu:/\n")
    fs = FakeCgroupFs([cpu, acct])
    e = Cgroup1Enforcer(cpu, fs, proc=proc, acct=acct)
    e.setup()
    target = [LnodeTarget("u1", (5,), 0.5, 1, groups=nested(("P", 0.5)))]
    e.apply(target)
    (acct / "fairshare" / "+P" / "u1" / "cpuacct.usage").write_text("1000000000\n")
    assert e.read_groups()["u1"].cpu == 1.0
    other = Cgroup1Enforcer(cpu, fs, proc=proc, acct=acct)  # another daemon's whole run
    other.setup()
    other.teardown()
    assert not (acct / "fairshare").exists() and (acct / "cgroup.procs").read_text() == "5"
    assert e.read_groups() == {}  # nothing to count this cycle
    e.apply(target)
    for m in (cpu, acct):
        assert (m / "fairshare" / "+P" / "u1" / "cgroup.procs").read_text() == "5"
    assert (cpu / "fairshare" / "cpu.shares").read_text() == str(1024 * os.cpu_count())
    (acct / "fairshare" / "+P" / "u1" / "cpuacct.usage").write_text("200000000\n")
    assert e.read_groups()["u1"] == GroupReading(0.2, frozenset({5}))
