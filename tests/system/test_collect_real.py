"""The procfs collector on the real machine: a real busy process's CPU, and a fake
/proc/PID owned by a test uid (root).  Parsing and deltas: tests/integration/test_collect.py."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from integration.test_collect import fake_proc

from fairshare.collect import GroupReading, procfs
from fairshare.collect.procfs import CLK_TCK, ProcfsCollector


def test_real_busy_process_is_charged_about_what_it_used():
    child = subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"])
    try:
        c = ProcfsCollector()
        c.sample()
        start = time.monotonic()
        time.sleep(1.0)
        s = c.sample()
        wall = time.monotonic() - start
        mine = [p for p in s.processes if p.pid == child.pid]
        assert len(mine) == 1
        p = mine[0]
        assert p.uid == os.getuid()
        # At most one CPU for the wall time (plus a tick); at least something even on
        # a loaded machine.
        assert 0.05 < p.cpu <= wall + 2 / CLK_TCK
        assert s.elapsed == pytest.approx(wall, abs=0.05)
        assert os.getpid() in {q.pid for q in s.processes}
    finally:
        child.kill()
        child.wait()


@pytest.mark.requires("root")  # the fake /proc/PID must be owned by the process's uid
def test_refresh_spares_the_status_of_processes_kept_in_lnode_cgroups(tmp_path, monkeypatch):
    d = fake_proc(tmp_path, 4242, 61001)
    os.chown(d, 61001, 61001)  # as the kernel shows it: owned by the (effective) uid
    members = {"u": GroupReading(1.0, frozenset({4242}))}
    c = ProcfsCollector(proc=str(tmp_path), pids=lambda: [4242], groups=lambda full=True: members)
    status_reads = []
    real = procfs.read_bytes

    def counting(path):
        if path.endswith("/status"):
            status_reads.append(path)
        return real(path)

    monkeypatch.setattr(procfs, "read_bytes", counting)

    def until_refresh():  # the samples up to and including the next full refresh
        for _ in range(ProcfsCollector.STATUS_EVERY):
            s = c.sample(io=False, syscalls=False)
        return s

    c.sample(io=False, syscalls=False)  # first seen: its status is read
    assert len(status_reads) == 1
    assert until_refresh().processes[0].uid == 61001
    assert len(status_reads) == 1  # the refresh read its stat, not its status
    # A setuid changes the owner of /proc/PID: the refresh then reads the status.
    fake_proc(tmp_path, 4242, 61002)
    os.chown(d, 61002, 61002)
    assert until_refresh().processes[0].uid == 61002
    assert len(status_reads) == 2
