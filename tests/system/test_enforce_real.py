"""Enforcers on the real machine: the cgroup v1 hierarchy, nice values and autogroups
of real processes (of test uids 61001..61003 when root), the kernel's process events.

The enforcers on fake cgroup trees and their detection: tests/integration/test_enforce.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from machine_lock import skip_if_a_daemon_runs

from fairshare.enforce.actions import REAL_OS
from fairshare.enforce.base import GroupShare, LnodeTarget
from fairshare.enforce.cgroup1 import Cgroup1Enforcer
from fairshare.enforce.nice import LONG_SLICE_NS, NiceEnforcer, read_autogroup, read_slice

CPU_V1 = Path("/sys/fs/cgroup/cpu")


# -- the real cgroup v1 hierarchy ------------------------------------------------------------


def at_default_nice(p: subprocess.Popen) -> subprocess.Popen:
    """Give `p` the default nice 0, whatever nice the suite runs at (under `nice -n 5`
    every child would start at 5): the tests assert the values the enforcers set from
    the default.  Lowering a nice needs root: without it, skip saying so."""
    try:
        os.setpriority(os.PRIO_PROCESS, p.pid, 0)
    except PermissionError:
        p.kill()
        p.wait()
        pytest.skip(
            f"the suite runs at nice {os.getpriority(os.PRIO_PROCESS, 0)}: giving its "
            "children the default nice 0 needs root (CAP_SYS_NICE)"
        )
    return p


def default_nice() -> None:
    """In a child before exec (as root): the default nice 0, whatever nice the suite runs
    at, for a child that forks at once (its children inherit it)."""
    os.setpriority(os.PRIO_PROCESS, 0, 0)


def sleeper(uid: int | None = None, session: bool = False) -> subprocess.Popen:
    kw = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
    p = subprocess.Popen(["/bin/sleep", "60"], start_new_session=session, cwd="/", **kw)
    return at_default_nice(p)


def cpu_cgroup(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _h, ctl, path = line.split(":", 2)
        if "cpu" in ctl.split(","):
            return path
    raise AssertionError("no cpu cgroup line")


@pytest.fixture
def two_sleepers():
    """Two sleeping processes, and the cpu cgroup they started in, on a cgroup v1
    hierarchy no shrdaemon is using; killed at the end."""
    skip_if_a_daemon_runs()
    if (CPU_V1 / "fairshare").exists():
        pytest.skip("a shrdaemon is using /sys/fs/cgroup/cpu/fairshare")
    a, b = sleeper(), sleeper()
    try:
        yield a, b, cpu_cgroup(a.pid)
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


@pytest.mark.requires("root", "cgroup-v1")
def test_cgroup1_real_moves_weights_and_cleans_up(two_sleepers):
    a, b, origin = two_sleepers
    e = Cgroup1Enforcer(CPU_V1, REAL_OS)
    try:
        e.setup()
        e.apply([LnodeTarget("t_a", (a.pid,), 0.5, 1), LnodeTarget("t_b", (b.pid,), 0.25, 1)])
        assert cpu_cgroup(a.pid) == "/fairshare/t_a"
        assert cpu_cgroup(b.pid) == "/fairshare/t_b"
        assert (CPU_V1 / "fairshare/t_a/cpu.shares").read_text().strip() == "262144"
        assert (CPU_V1 / "fairshare/t_b/cpu.shares").read_text().strip() == "131072"
        # b's lnode is released: its cgroup goes, its process back where it came from.
        e.apply([LnodeTarget("t_a", (a.pid,), 1.0, 1)])
        assert not (CPU_V1 / "fairshare/t_b").exists()
        assert cpu_cgroup(b.pid) == origin
        e.teardown()
        assert cpu_cgroup(a.pid) == origin
        assert not (CPU_V1 / "fairshare").exists()
    finally:
        e.teardown()


@pytest.mark.requires("root", "cgroup-v1")
def test_cgroup1_real_nests_groups_moves_a_user_and_adopts_a_crashed_tree(two_sleepers):
    a, b, origin = two_sleepers
    phys, chem = (GroupShare("Physics", 0.5),), (GroupShare("Chem", 0.5),)
    targets = [
        LnodeTarget("t_a", (a.pid,), 0.5, 1, groups=phys),
        LnodeTarget("t_b", (b.pid,), 0.25, 1, groups=chem),
    ]
    e = Cgroup1Enforcer(CPU_V1, REAL_OS)
    try:
        e.setup()
        e.apply(targets)
        assert cpu_cgroup(a.pid) == "/fairshare/+Physics/t_a"
        assert cpu_cgroup(b.pid) == "/fairshare/+Chem/t_b"
        assert (CPU_V1 / "fairshare/+Chem/cpu.shares").read_text().strip() == "262144"
        # t_b moves to Physics while running: its process follows, Chem's cgroups go.
        moved = LnodeTarget("t_b", (b.pid,), 0.25, 1, groups=phys)
        e.apply([targets[0], moved])
        assert cpu_cgroup(b.pid) == "/fairshare/+Physics/t_b"
        assert not (CPU_V1 / "fairshare/+Chem").exists()
        assert (CPU_V1 / "fairshare/+Physics/t_b/cpu.shares").read_text().strip() == "131072"
        # A daemon that crashed left its tree: the next one adopts it and removes the rest.
        e2 = Cgroup1Enforcer(CPU_V1, REAL_OS)
        e2.setup()
        e2.apply([targets[0]])
        assert cpu_cgroup(a.pid) == "/fairshare/+Physics/t_a"
        assert not (CPU_V1 / "fairshare/+Physics/t_b").exists()
        e2.teardown()
        assert cpu_cgroup(a.pid) != "/fairshare/+Physics/t_a" and cpu_cgroup(b.pid) == "/"
        assert not (CPU_V1 / "fairshare").exists()
    finally:
        e.teardown()
    assert origin is not None


# -- nice ------------------------------------------------------------------------------------


@pytest.mark.requires("root")
def test_nice_per_process_never_lowers_a_users_choice_and_restores():
    skip_if_a_daemon_runs()
    nice_per_process()


def nice_per_process():
    a, b, c = sleeper(61001), sleeper(61002), sleeper(61002)
    try:
        os.setpriority(os.PRIO_PROCESS, c.pid, 15)  # the user chose 15 for this one
        e = NiceEnforcer(REAL_OS, autogroup=False)
        e.setup()
        # alice 1 process at 0.8, bob 2 processes at 0.2: per process 0.8 vs 0.1, a ratio
        # of 8 = 1.25 ** 9.3, so bob's processes get nice 9.
        e.apply(
            [
                LnodeTarget("alice", (a.pid,), 0.8, 1),
                LnodeTarget("bob", (b.pid, c.pid), 0.2, 2),
            ]
        )
        assert os.getpriority(os.PRIO_PROCESS, a.pid) == 0
        assert os.getpriority(os.PRIO_PROCESS, b.pid) == 9
        assert os.getpriority(os.PRIO_PROCESS, c.pid) == 15  # not lowered to 9
        e.teardown()
        assert os.getpriority(os.PRIO_PROCESS, b.pid) == 0
        assert os.getpriority(os.PRIO_PROCESS, c.pid) == 15
    finally:
        for p in (a, b, c):
            p.kill()
            p.wait()


@pytest.mark.requires("root")
def test_nice_restores_children_that_inherited_our_nice():
    skip_if_a_daemon_runs()
    # A user's shell, reniced by us; a child it forks afterwards inherits that nice
    # and must go back to the shell's original value too, not stay where we put it.
    shell = subprocess.Popen(
        ["/bin/sh", "-c", "for i in 1 2; do read x; /bin/sleep 60 & echo $!; done; wait"],
        user=61001, group=61001, extra_groups=[], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, cwd="/",
    )  # fmt: skip
    at_default_nice(shell)  # before it forks: it waits for a line first
    try:
        default = read_slice("self")
        e = NiceEnforcer(REAL_OS, autogroup=False)
        e.apply([LnodeTarget("alice", (shell.pid,), 0.1, 1), LnodeTarget("bob", (), 0.9, 1)])
        assert os.getpriority(os.PRIO_PROCESS, shell.pid) > 0
        release = tuple(int(n) for n in re.findall(r"\d+", os.uname().release)[:2])
        slices = default is not None and release >= (6, 12)  # custom slices since 6.12
        shell.stdin.write("go\n")
        shell.stdin.flush()
        kid = int(shell.stdout.readline())
        inherited = os.getpriority(os.PRIO_PROCESS, kid)
        assert inherited == os.getpriority(os.PRIO_PROCESS, shell.pid)
        e.apply([LnodeTarget("alice", (shell.pid, kid), 0.1, 2), LnodeTarget("bob", (), 0.9, 1)])
        # One more child after the last cycle: no cycle saw it, teardown finds it.
        shell.stdin.write("go\n")
        shell.stdin.flush()
        unseen = int(shell.stdout.readline())
        assert os.getpriority(os.PRIO_PROCESS, unseen) > 0
        if slices:  # the long slice, inherited by the children too
            assert {read_slice(p) for p in (shell.pid, kid, unseen)} == {LONG_SLICE_NS}
        e.teardown()
        assert os.getpriority(os.PRIO_PROCESS, shell.pid) == 0
        assert os.getpriority(os.PRIO_PROCESS, kid) == 0
        assert os.getpriority(os.PRIO_PROCESS, unseen) == 0
        if slices:
            assert {read_slice(p) for p in (shell.pid, kid, unseen)} == {default}
    finally:
        for p in psutil.Process(shell.pid).children():
            p.kill()
        shell.kill()
        shell.wait()


@pytest.mark.requires("root", "autogroup")
def test_nice_through_autogroups_one_session_per_lnode_and_mixed_sessions():
    skip_if_a_daemon_runs()
    nice_autogroups()


def mixed_session(*uids: int) -> tuple[subprocess.Popen, list[int]]:
    """A new session led by a root shell, holding one sleeper of each of `uids`: the
    shell and the sleepers' pids, in the order of `uids`."""
    cmd = " ".join(f"setpriv --reuid={u} --regid={u} --clear-groups /bin/sleep 60 &" for u in uids)
    leader = subprocess.Popen(
        ["/bin/sh", "-c", f"{cmd} wait"], start_new_session=True, cwd="/", preexec_fn=default_nice
    )
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        kids = psutil.Process(leader.pid).children()
        by_uid = {k.uids().real: k.pid for k in kids if k.name() == "sleep"}
        if len(by_uid) == len(uids):
            return leader, [by_uid[u] for u in uids]
        time.sleep(0.02)
    raise AssertionError(f"the sleepers of {uids} did not start")


def nice_autogroups():
    a = sleeper(61001, session=True)
    b1 = sleeper(61002, session=True)
    leader, (mixed1, mixed2) = mixed_session(61001, 61002)
    try:
        e = NiceEnforcer(REAL_OS, autogroup=True)
        e.setup()
        e.apply(
            [
                LnodeTarget("alice", (a.pid, mixed1), 0.8, 2, runnable=frozenset({a.pid})),
                LnodeTarget("bob", (b1.pid, mixed2), 0.2, 2, runnable=frozenset({b1.pid})),
            ]
        )
        # Session groups: alice's holds 1 of her 2 runnable, so 0.4 of the machine;
        # bob's 0.1: a ratio of 4 = 1.25 ** 6.2, nice 6.
        assert read_autogroup(a.pid)[1] == 0
        assert read_autogroup(b1.pid)[1] == 6
        # The shared session holds both users: per-process nice there (0.4 vs 0.1), and
        # the session's own nice is left alone.
        assert os.getpriority(os.PRIO_PROCESS, mixed1) == 0
        assert os.getpriority(os.PRIO_PROCESS, mixed2) == 6
        assert read_autogroup(mixed2) == read_autogroup(leader.pid)
        assert read_autogroup(mixed2)[1] == 0
        e.teardown()
        assert read_autogroup(b1.pid)[1] == 0
        assert os.getpriority(os.PRIO_PROCESS, mixed2) == 0
    finally:
        for p in (a, b1):
            p.kill()
            p.wait()
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


def test_nice_renices_processes_in_no_autogroup_one_by_one(tmp_path):
    """Processes of init's session (a container that never called setsid) show an empty
    /proc/PID/autogroup: they compete one by one with the sessions, so they get their
    lnode's per-process nice.  A fake /proc gives the autogroups; the nice is real."""
    a, b, c = sleeper(), sleeper(), sleeper()
    proc = tmp_path / "proc"
    for p, text in ((a, ""), (b, ""), (c, "/autogroup-9 nice 0\n")):
        (proc / str(p.pid)).mkdir(parents=True)
        (proc / str(p.pid) / "autogroup").write_text(text)
    try:
        assert read_autogroup(a.pid, str(proc)) == ("", 0)
        e = NiceEnforcer(REAL_OS, autogroup=True, proc=str(proc))
        # One scale for everything at the top: alice's loose process holds 0.4, bob's
        # loose process and his session 0.1 each (half his share apiece): nice 0, 6, 6.
        e.apply(
            [
                LnodeTarget("alice", (a.pid,), 0.4, 1, runnable=frozenset({a.pid})),
                LnodeTarget("bob", (b.pid, c.pid), 0.2, 2, runnable=frozenset({b.pid, c.pid})),
            ]
        )
        assert os.getpriority(os.PRIO_PROCESS, a.pid) == 0
        assert os.getpriority(os.PRIO_PROCESS, b.pid) == 6
        assert os.getpriority(os.PRIO_PROCESS, c.pid) == 0  # in a session: its group's nice
        assert (proc / str(c.pid) / "autogroup").read_text() == "6"
    finally:
        for p in (a, b, c):
            p.kill()
            p.wait()


@pytest.mark.requires("root")
def test_the_kernel_reports_a_setuid():
    from fairshare.enforce.events import ProcessEvents

    got = []
    ev = ProcessEvents()
    if not ev.start(lambda pid, uid: got.append((pid, uid))):
        pytest.skip(
            "no process events here: a kernel without the connector, or a nested PID namespace"
        )
    try:
        child = sleeper(61003)
        deadline = time.monotonic() + 5
        while (child.pid, 61003) not in got and time.monotonic() < deadline:
            time.sleep(0.01)
        child.kill()
        child.wait()
    finally:
        ev.stop()
    assert (child.pid, 61003) in got
    # The listener sleeps until an event (no timeout): stop must wake it to end it.
    assert "process-events" not in [t.name for t in threading.enumerate()]
