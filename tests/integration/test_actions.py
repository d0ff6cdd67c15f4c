"""The daemon's OS actions: `shrdaemon --simulate` never reaches the real OS, a simulated
SIGKILL stops the simulated process, and the UDB's nice is applied through the actions
(fairshare.enforce.actions, fairshare.enforce.renice)."""

from __future__ import annotations

import errno
import logging
import os
import re
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from busy import RecordedOs
from sqlalchemy import select

from fairshare.core.consts import NOSCHED
from fairshare.daemon.daemon import Daemon
from fairshare.enforce.actions import REAL_OS
from fairshare.enforce.base import LnodeTarget
from fairshare.enforce.cgroup1 import Cgroup1Enforcer
from fairshare.enforce.cgroup2 import Cgroup2Enforcer, enable_cpu
from fairshare.enforce.nice import LONG_SLICE_NS, NiceEnforcer
from fairshare.enforce.none import NoEnforcer
from fairshare.enforce.renice import Renicer, user_floor
from fairshare.enforce.systemd import SystemdEnforcer
from fairshare.sim.daemon import simulated_daemon
from fairshare.sim.machine import PID_BASE, SimOs
from fairshare.store.config import load_consts, save_consts
from udb.models import Entry
from udb.session import open_udb, read_session, write_session

ROOT = Path(__file__).resolve().parents[2]

#: alice has a 30 CPU s quota and runs two CPU-bound processes on 2 CPUs: she passes the
#: quota plus the 3 s threshold within a minute and gets SIGKILL.  Her UDB nice is 5.
QUOTA = """
cpus = 2
duration = "10m"
delta = "4s"
directives = '''
create:Idle:uid:11:shares:0:
create:alice:uid:1001:shares:1:cpuquota:30:nice:5:
create:bob:uid:1002:shares:1:
'''

[consts]
halflife = "1h"

[[workload]]
name = "alice"
procs = 2

[[workload]]
name = "bob"
procs = 1
"""


def scenario(tmp_path: Path, text: str = QUOTA) -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    return path


def cycles(daemon, n=1):
    for _ in range(n):
        daemon.clock.sleep(daemon.consts.delta, daemon.loop.wake)
        daemon.step()


@pytest.mark.requires("strace")
def test_simulated_quota_run_makes_no_real_kill_or_setpriority(tmp_path):
    """The old daemon sent 286 real kill() calls to made-up pids in this run."""
    trace = tmp_path / "strace.txt"
    r = subprocess.run(
        [
            "strace",
            "-f",
            "-e",
            "trace=kill,tgkill,tkill,setpriority,sched_setattr",
            "-o",
            str(trace),
            sys.executable,
            "-m",
            "fairshare.cli.shrdaemon",
            "--udb",
            str(tmp_path / "udb.sqlite"),
            "--simulate",
            str(scenario(tmp_path)),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "alice: CPU quota 30.0 s exceeded" in r.stderr and "SIGKILL" in r.stderr
    calls = [
        line
        for line in trace.read_text().splitlines()
        if re.match(r"\d+\s+(kill|tgkill|tkill|setpriority|sched_setattr)\(", line)
    ]
    assert calls == []


def test_a_simulated_sigkill_stops_the_processes_and_releases_the_lnode(tmp_path, udb_url):
    engine = open_udb(udb_url)
    d, _model, _length = simulated_daemon(engine, str(scenario(tmp_path)), epoch=1_000_000.0)
    world = d.actions.world
    d.start()
    alice = d.tree.node("alice")
    cycles(d, 12)  # 2 CPUs, 3 processes: alice gets 2/3 of 8 CPU s per cycle
    kills = [(pid, sig) for pid, sig in world.signals if sig == signal.SIGKILL]
    assert sorted(pid for pid, _sig in kills) == [PID_BASE, PID_BASE + 1]
    assert world.pids(0) == [] and world.pids(1) == [PID_BASE + 1000]
    with pytest.raises(ProcessLookupError):
        d.actions.signal(PID_BASE, signal.SIGKILL)  # gone: as os.kill says
    cycles(d, 1)
    assert d.table.refs[alice] == 0
    cycles(d, 16)  # past the 60 s write-back interval
    assert not d.table.active[alice]  # released
    with read_session(engine) as s:
        shextime = s.scalars(select(Entry.shextime).where(Entry.name == "alice")).one()
    assert shextime > 1_000_000.0  # written back when released
    before = d.table.cpu_seconds[d.tree.node("bob")]
    cycles(d, 1)
    assert d.table.cpu_seconds[d.tree.node("bob")] - before == pytest.approx(4.0)


def test_a_simulated_sigxcpu_ends_the_process_as_linux_does_but_sigurg_does_not(tmp_path, udb_url):
    """A simulated program handles no signal, as a real job that does not expect one:
    SIGXCPU's Linux default ends it (`sleep 100 & kill -XCPU $!` exits with 152), so
    it cannot be the quota's warning; SIGURG's is to ignore it."""
    d, _model, _length = simulated_daemon(open_udb(udb_url), str(scenario(tmp_path)), epoch=0.0)
    d.actions.signal(PID_BASE, signal.SIGURG)
    d.actions.signal(PID_BASE, signal.SIGWINCH)
    assert d.actions.world.pids(0) == [PID_BASE, PID_BASE + 1]
    d.actions.signal(PID_BASE, signal.SIGXCPU)
    assert d.actions.world.pids(0) == [PID_BASE + 1]


def test_the_simulated_machine_has_no_files_and_no_real_pids(tmp_path, udb_url):
    d, _model, _length = simulated_daemon(open_udb(udb_url), str(scenario(tmp_path)), epoch=0.0)
    with pytest.raises(OSError):
        d.actions.write_file(tmp_path / "x", "1")
    assert not (tmp_path / "x").exists()
    with pytest.raises(ProcessLookupError):
        d.actions.signal(os.getpid(), 0)  # a real pid is not a simulated process
    assert PID_BASE > 2**22  # above any pid_max Linux allows


def test_the_daemon_refuses_an_enforcer_that_acts_on_another_machine(tmp_path, udb_url):
    engine = open_udb(udb_url)
    d, _model, _length = simulated_daemon(engine, str(scenario(tmp_path)), epoch=0.0)
    with pytest.raises(ValueError, match="real machine, the daemon on the simulated"):
        real = NiceEnforcer(REAL_OS, autogroup=False)
        Daemon(engine, d.collector, real, d.store, d.actions)
    with pytest.raises(ValueError):
        Daemon(engine, d.collector, d.enforcement.enforcer, d.store, REAL_OS)


def test_no_enforcer_is_built_without_the_machine_it_changes(tmp_path):
    """No enforcer falls back on the real machine: each is told its OsActions."""
    for build in (
        lambda: NoEnforcer(),
        lambda: NiceEnforcer(autogroup=False),
        lambda: Cgroup1Enforcer(tmp_path),
        lambda: Cgroup2Enforcer(tmp_path),
        lambda: SystemdEnforcer(tmp_path),
        lambda: enable_cpu(tmp_path),
    ):
        with pytest.raises(TypeError, match="actions"):
            build()


# -- the UDB's nice ---------------------------------------------------------------------------


def test_user_floor():
    assert user_floor(0, 5) == 5  # the default nice takes the UDB's
    assert user_floor(0, -5) == -5  # including a boost
    assert user_floor(3, 5) == 5  # a lower chosen nice is raised to the UDB's
    assert user_floor(10, 5) == 10  # a higher chosen nice is kept
    assert user_floor(-3, -5) == -3
    assert user_floor(-3, 0) == -3  # no UDB nice (0): a boost root gave is kept
    assert user_floor(7, 0) == 7


def test_renicer_never_lowers_a_chosen_nice_and_restores_only_its_own():
    os_ = RecordedOs({7: 0, 8: 12, 9: 0})
    r = Renicer(os_)
    assert r.renice(7, 2, udb_nice=5) == 5
    assert r.renice(8, 2, udb_nice=5) == 12
    assert r.renice(9, 9, udb_nice=5) == 9
    os_.nice[9] = 15  # the user reniced it since
    assert r.renice(9, 9, udb_nice=5) == 15
    os_.nice[7] = 19
    assert r.renice(7, 2, udb_nice=5) == 19
    os_.nice[7] = 5  # back to our value: restore must not touch a value the user set
    r.renice(7, 2, udb_nice=5)
    r.restore()
    assert os_.nice == {7: 5, 8: 12, 9: 15}  # 7: the user's 5 since; 9: the user's 15


def test_nice_enforcer_takes_the_larger_of_its_value_and_the_udb_nice(tmp_path):
    os_ = RecordedOs({1: 0, 2: 0, 3: 8})
    e = NiceEnforcer(autogroup=False, actions=os_, proc=str(tmp_path))  # made-up pids
    e.apply(
        [
            LnodeTarget("alice", (1,), e_share=0.5, nrun=1, nice=5),
            LnodeTarget("bob", (2, 3), e_share=0.5, nrun=2, nice=0),
        ]
    )
    # alice's per-process share is the largest (nice 0) but her UDB nice is 5; bob's
    # processes get nice 3 for half alice's per-process share, pid 3 keeps its chosen 8.
    assert os_.nice == {1: 5, 2: 3, 3: 8}
    e.teardown()
    assert os_.nice == {1: 0, 2: 0, 3: 8}


def test_nice_enforcer_gives_busy_lnodes_a_long_slice_and_light_ones_the_kernels(tmp_path):
    """A long slice for the processes of an lnode using its share, whatever their nice;
    the kernel's short one for a light lnode's, so that they preempt the busy ones on
    waking (PREEMPT_SHORT)."""
    os_ = RecordedOs({1: 0, 2: 0, 3: 0})
    e = NiceEnforcer(autogroup=False, actions=os_, proc=str(tmp_path))  # made-up pids
    targets = [
        LnodeTarget("light", (1,), e_share=0.5, nrun=1, light=True),
        LnodeTarget("heavy", (2, 3), e_share=0.5, nrun=2),
    ]
    e.apply(targets)
    assert os_.nice == {1: 0, 2: 3, 3: 3}
    assert os_.slice == {2: LONG_SLICE_NS, 3: LONG_SLICE_NS}
    calls = len(os_.slice)
    e.apply(targets)
    assert len(os_.slice) == calls  # nothing changed: no call
    # heavy now ranks first, at nice 0: still busy, it keeps its long slice; light's
    # nice rises, and it keeps the kernel's slice while it stays light...
    e.apply([replace(targets[0], e_share=0.1), replace(targets[1], e_share=0.9)])
    assert os_.nice == {1: 7, 2: 0, 3: 0}  # 0.45 per process against 0.1: 1.25 ** 6.7
    assert os_.slice == {2: LONG_SLICE_NS, 3: LONG_SLICE_NS}
    # ...until it wants more than its target: then it is a busy one too.
    e.apply([replace(targets[0], light=False), replace(targets[1], light=True)])
    assert os_.slice == {1: LONG_SLICE_NS, 2: 0, 3: 0}
    e.teardown()
    assert os_.nice == {1: 0, 2: 0, 3: 0} and os_.slice == {1: 0, 2: 0, 3: 0}


def test_a_nice_value_weighs_a_thread_so_a_process_of_many_threads_counts_each(tmp_path):
    """16 busy threads in one process against two single-threaded processes: each of
    the 16 gets a sixteenth of its lnode's share, not all of it (the benchmark's threads
    workload under nice: 38 pp off, as with no daemon)."""
    os_ = RecordedOs({1: 0, 2: 0, 3: 0})
    e = NiceEnforcer(autogroup=False, actions=os_, proc=str(tmp_path))
    e.apply([
        LnodeTarget("threads", (1,), e_share=0.5, nrun=1, want=16.0),
        LnodeTarget("two", (2, 3), e_share=0.5, nrun=2, want=2.0),
    ])  # fmt: skip
    assert os_.nice == {1: 9, 2: 0, 3: 0}  # a thread at 1/8 of the others': 1.25 ** 9.3


def test_real_os_renices_every_thread_of_a_process():
    """setpriority(pid) sets the main thread's nice only; RealOs sets every thread's."""
    code = (
        "import threading, time, sys\n"
        "go = threading.Event()\n"
        "for _ in range(3): threading.Thread(target=go.wait, daemon=True).start()\n"
        "print('ready', flush=True); sys.stdin.readline()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        REAL_OS.set_nice(child.pid, 7)  # raising one's own nice needs no privilege
        tids = os.listdir(f"/proc/{child.pid}/task")
        assert len(tids) == 4
        assert {os.getpriority(os.PRIO_PROCESS, int(t)) for t in tids} == {7}
    finally:
        child.kill()
        child.wait()


def test_a_kernel_that_refuses_slices_still_gets_its_nice_values(tmp_path, caplog, monkeypatch):
    class OldKernel(RecordedOs):
        def set_slice(self, pid: int, nice: int, slice_ns: int) -> None:
            raise OSError(errno.EINVAL, "Invalid argument")

    os_ = OldKernel({1: 0, 2: 0})
    e = NiceEnforcer(autogroup=False, actions=os_, proc=str(tmp_path))
    targets = [LnodeTarget("a", (1,), 0.8, 1), LnodeTarget("b", (2,), 0.2, 1)]
    # shrdaemon's setup stops propagation once any test ran it: caplog's handler on the
    # logger itself, and no propagation, see each record once whatever ran before.
    logger = logging.getLogger("shrdaemon")
    monkeypatch.setattr(logger, "propagate", False)
    logger.addHandler(caplog.handler)
    try:
        e.apply(targets)
        e.apply(targets)
    finally:
        logger.removeHandler(caplog.handler)
    assert os_.nice == {1: 0, 2: 6}
    assert caplog.text.count("refused a time slice") == 1
    e.teardown()
    assert os_.nice == {1: 0, 2: 0}


NICE_SCENARIO = """
cpus = 1
duration = "1h"
delta = "4s"
enforcer = "{model}"
directives = '''
create:alice:uid:1001:shares:1:nice:5:
create:bob:uid:1002:shares:1:
'''

[[workload]]
name = "alice"
procs = 1

[[workload]]
name = "alice"
procs = 1
nice = 10

[[workload]]
name = "alice"
procs = 1
nice = 2

[[workload]]
name = "bob"
procs = 1
"""


@pytest.mark.parametrize("model", ["cgroup", "nice"])
def test_the_simulated_daemon_applies_the_udb_nice_as_a_floor(tmp_path, udb_url, model):
    engine = open_udb(udb_url)
    d, _model, _length = simulated_daemon(
        engine, str(scenario(tmp_path, NICE_SCENARIO.format(model=model))), epoch=0.0
    )
    world = d.actions.world
    d.start()
    cycles(d, 2)
    # alice's processes: default 0 -> her UDB nice 5; a chosen 10 kept; a chosen 2
    # raised to 5.  bob has no UDB nice.
    assert [world.nice_of(i) for i in range(4)] == [5, 10, 5, 0]
    if model == "cgroup":
        # In alice's cgroup her processes split her weight by nice: 335 : 110 : 335.
        got = world.run(world.clock.now, 4.0)
        assert got[0] / got[1] == pytest.approx(335 / 110)
        assert got[0] == pytest.approx(got[2])
    d.shutdown()  # the daemon puts back what it changed
    assert [world.nice_of(i) for i in range(4)] == [0, 10, 2, 0]


def test_none_and_nosched_leave_the_nice_alone(tmp_path, udb_url):
    engine = open_udb(udb_url)
    d, _model, _length = simulated_daemon(
        engine, str(scenario(tmp_path, NICE_SCENARIO.format(model="none"))), epoch=0.0
    )
    world = d.actions.world
    d.start()
    cycles(d, 2)
    assert [world.nice_of(i) for i in range(4)] == [0, 10, 2, 0]

    path = scenario(tmp_path, NICE_SCENARIO.format(model="cgroup"))
    engine2 = open_udb(f"sqlite:///{tmp_path / 'two.sqlite'}", create=True)  # as udbgen does
    d2, _model, _length = simulated_daemon(engine2, str(path), epoch=0.0)
    world2 = d2.actions.world
    d2.start()
    cycles(d2, 1)
    assert world2.nice_of(0) == 5
    with write_session(engine2) as s:
        save_consts(s, load_consts(s).replace(flags=NOSCHED))
    cycles(d2, 1)
    assert [world2.nice_of(i) for i in range(4)] == [0, 10, 2, 0]  # restored: plain Linux


def test_sim_os_is_the_enforcers_actions(tmp_path, udb_url):
    d, _model, _length = simulated_daemon(open_udb(udb_url), str(scenario(tmp_path)), epoch=0.0)
    assert isinstance(d.actions, SimOs) and d.enforcement.enforcer.actions is d.actions


def test_same_process_tells_a_pid_from_the_process_that_had_it():
    """fairshare.enforce.actions.same_process on the real machine: the start time the collector
    reads is the process's own; another start, or a process gone, is not it."""
    from fairshare.collect.procfs import ProcfsCollector
    from fairshare.enforce.actions import same_process

    child = subprocess.Popen(["/bin/sleep", "30"])
    try:
        sampled = {p.pid: p for p in ProcfsCollector().sample().processes}[child.pid]
        assert same_process(REAL_OS, child.pid, sampled.create_time)
        assert not same_process(REAL_OS, child.pid, sampled.create_time - 1.0)
        assert same_process(REAL_OS, child.pid, None)  # nothing known: taken as it
    finally:
        child.kill()
        child.wait()
    assert not same_process(REAL_OS, child.pid, sampled.create_time)  # gone
