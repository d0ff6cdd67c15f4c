"""Real-machine proof of the guide's 4.7: at the CPU quota the user is warned and the job
keeps running; past the quota by the threshold it is killed.

"When a user reaches the quota, a SIGCPULIM signal is sent to the user's processes.
(The SIGCPULIM signal is ignored by default.) When the user reaches a specified
threshold above the quota (the default is 3 seconds), the kernel sends a SIGKILL
signal to all the user's processes and terminates them."

A test uid (61003, with a UDB entry and a quota of 1 CPU s) runs one CPU-bound /bin/sh
loop that handles no signal, on a pseudo-terminal of its own (its controlling
terminal, owned by the uid, as a login's is).  shrdaemon (delta 0.5 s, threshold 2 s,
the default warning: no signal) must write the warning on that terminal while the loop
still runs, and the loop must die of SIGKILL once it has used about 3 CPU s.  Under
the old warning, SIGXCPU, the loop died at the warning (Linux's default for SIGXCPU
ends the process; `sleep 100 & kill -XCPU $!` exits with 152).

Needs root (a setuid child); run with ``pytest -s`` to see the figures.  About 10 s.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from machine_lock import skip_if_a_daemon_runs

from fairshare.core.consts import Consts
from fairshare.store.config import save_consts
from udb.models import Entry
from udb.session import open_udb, write_session

pytestmark = pytest.mark.requires("root", "real-cpu")  # a setuid child

UID = 61003
QUOTA = 1.0  # CPU s
THRESHOLD = 2.0  # CPU s past the quota before SIGKILL
_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def term_with_parent() -> None:
    """In a child before exec: SIGKILL it when the test process dies."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def make_udb(tmp_path: Path, **consts) -> str:
    url = f"sqlite:///{tmp_path / 'udb.sqlite'}"
    engine = open_udb(url, create=True)
    with write_session(engine) as s:
        s.add_all(
            [
                Entry(name="Idle", uid=11, shares=0),
                Entry(name="unknown", uid=12, shares=1),
                Entry(name="tq", uid=UID, shares=1, cpuquota=QUOTA),
            ]
        )
        save_consts(s, Consts(delta=0.5, halflife=10.0, quota_threshold=THRESHOLD, **consts))
    return url


def busy_on_a_terminal() -> tuple[subprocess.Popen, int]:
    """(a /bin/sh busy loop as UID with a new pseudo-terminal as its controlling
    terminal, the terminal's master side, non-blocking)."""
    master, slave = os.openpty()
    os.chown(os.ttyname(slave), UID, -1)
    fcntl.fcntl(master, fcntl.F_SETFL, os.O_NONBLOCK)
    child = subprocess.Popen(
        ["setsid", "--ctty", "/bin/sh", "-c", "while :; do :; done"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        user=UID,
        group=UID,
        extra_groups=[],
        cwd="/",
        preexec_fn=term_with_parent,
    )
    os.close(slave)
    return child, master


def read_terminal(master: int, wait: float) -> str:
    ready, _, _ = select.select([master], [], [], wait)
    if not ready:
        return ""
    try:
        return os.read(master, 4096).decode(errors="replace")
    except OSError:  # EIO once the last process holding the terminal is gone
        return ""


def cpu_of(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def run(tmp_path: Path, **consts) -> dict:
    """The busy loop under shrdaemon: what the terminal showed and when (CPU s used)."""
    skip_if_a_daemon_runs()
    url = make_udb(tmp_path, **consts)
    log = tmp_path / "shrdaemon.log"
    child, master = busy_on_a_terminal()
    proc = psutil.Process(child.pid)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "fairshare.cli.shrdaemon", "--udb", url, "--enforcer", "none"],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        start_new_session=True,
        preexec_fn=term_with_parent,
    )
    out: dict = {"text": "", "warned_at": None, "alive_after_warning": None}
    try:
        deadline = time.monotonic() + 40
        while child.poll() is None and time.monotonic() < deadline:
            text = read_terminal(master, 0.05)
            if text:
                out["text"] += text
            try:
                out["last_cpu"] = cpu_of(proc)  # the last reading before it ended
            except psutil.Error:
                break
            if out["warned_at"] is None and "reached" in out["text"]:
                out["warned_at"] = out["last_cpu"]
                time.sleep(0.5)  # the loop runs on after the warning
                out["alive_after_warning"] = child.poll() is None
        child.wait(timeout=5)
        out["text"] += read_terminal(master, 0.2)
        out["status"] = child.returncode
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=10)
        os.close(master)
    out["log"] = log.read_text()
    return out


def test_a_job_that_handles_nothing_survives_the_quota_warning_and_dies_after_the_grace(
    tmp_path,
):
    out = run(tmp_path)
    print(
        f"\nwarned at {out['warned_at']} CPU s (quota {QUOTA}), killed at about "
        f"{out.get('last_cpu')} CPU s (quota + threshold {QUOTA + THRESHOLD}); "
        f"status {out['status']}; terminal: {out['text']!r}"
    )
    assert out["warned_at"] is not None, out["log"]
    assert out["alive_after_warning"], out["text"]
    assert "tq: CPU quota of 1 s reached" in out["text"]
    assert "killed when they have used 2 CPU s more" in out["text"]
    assert out["status"] == -signal.SIGKILL
    assert "being killed (SIGKILL)" in out["text"]
    # killed past the quota plus the threshold, not at the warning
    assert out["last_cpu"] >= QUOTA + THRESHOLD - 0.5
    assert "tq: CPU quota 1.0 s reached" in out["log"]  # and in the journal (the log)


def test_with_sigxcpu_as_the_warning_the_same_job_dies_at_the_quota(tmp_path):
    """Why SIGXCPU is not the default warning: set it (shradmin --quota-signal SIGXCPU)
    and the same job ends at the quota, with no grace, of Linux's default action."""
    out = run(tmp_path, quota_signal="SIGXCPU")
    print(f"\nSIGXCPU: status {out['status']}, about {out.get('last_cpu')} CPU s used")
    assert "(SIGXCPU sent to them)" in out["text"]
    assert out["status"] == -signal.SIGXCPU
    assert out["last_cpu"] < QUOTA + THRESHOLD - 0.5
