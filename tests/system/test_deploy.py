"""A system-wide install and a daemon without systemd, as README.md's "Deploying on one
machine" does them: packaging/install.sh into a throwaway prefix, its commands, manual
pages and completions used by another uid; shrdaemon --detach, --status and --stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from asuser import UIDS, remove, shared_dir

from udb import directives
from udb.session import dispose_all, open_udb

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "packaging" / "install.sh"
COMMANDS = "udbgen udbsee shrtree shradmin shrdaemon shrview shrinfo shrdist shrsync newacct shrsim"


def as_uid(uid: int):
    def drop() -> None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    return drop


@pytest.fixture
def installed():
    base = shared_dir()
    dirs = {
        "PREFIX": base / "opt" / "fairshare",
        "BINDIR": base / "bin",
        "MANDIR": base / "man",
        "SHAREDIR": base / "share",
    }
    env = dict(os.environ, **{k: str(v) for k, v in dirs.items()})
    env.pop("PYTHONPATH", None)  # the venv must run its own copy, not this tree
    r = subprocess.run(["sh", str(INSTALL)], env=env, capture_output=True, text=True, timeout=900)
    try:
        assert r.returncode == 0, r.stderr
        yield dirs, env, r.stdout
    finally:
        remove(base)


@pytest.mark.requires("root")
@pytest.mark.slow
def test_install_sh_gives_every_user_the_commands_their_manual_and_completions(installed):
    dirs, env, said = installed
    assert f"in {dirs['PREFIX']}" in said
    prefix = dirs["PREFIX"]
    # The venv is made from the system's Python, not one under /root.
    cfg = (prefix / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in cfg
    user_env = {
        "PATH": f"{dirs['BINDIR']}:/usr/bin:/bin",
        "HOME": "/",
        "MANPATH": str(dirs["MANDIR"]),
    }
    for c in COMMANDS.split():
        link = dirs["BINDIR"] / c
        assert link.is_symlink() and os.readlink(link) == str(prefix / "bin" / c)
        r = subprocess.run(
            [c, "--version"], env=user_env, capture_output=True, text=True,
            preexec_fn=as_uid(UIDS[0]), timeout=60,
        )  # fmt: skip
        assert (r.returncode, r.stdout) == (0, f"{c} (fairshare) 0.1.0\n"), r.stderr
        completion = (dirs["SHAREDIR"] / "bash-completion" / "completions" / c).read_text()
        assert f"_{c.upper()}_COMPLETE=bash_complete" in completion
        assert (dirs["SHAREDIR"] / "zsh" / "site-functions" / f"_{c}").stat().st_size
        assert (dirs["SHAREDIR"] / "fish" / "vendor_completions.d" / f"{c}.fish").stat().st_size
    for page in (ROOT / "man").iterdir():
        r = subprocess.run(
            ["man", "-w", page.stem], env=user_env, capture_output=True, text=True,
            preexec_fn=as_uid(UIDS[0]), timeout=60,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert (
            Path(r.stdout.strip()).resolve()
            == (prefix / "share" / "man" / f"man{page.suffix[1:]}" / page.name).resolve()
        )
    # A completion script answers a TAB without the user's Python: shrview -d <TAB>.
    r = subprocess.run(
        ["bash", "-c", f"source {dirs['SHAREDIR']}/bash-completion/completions/shrview; "
         "COMP_WORDS=(shrview -d ''); COMP_CWORD=2; _shrview_completion shrview; "
         "printf '%s\\n' \"${COMPREPLY[@]}\""],
        env=user_env, capture_output=True, text=True, preexec_fn=as_uid(UIDS[0]), timeout=60,
    )  # fmt: skip
    assert r.stdout.split() == ["m", "a", "s", "n", "l", "g"], r.stderr
    # --uninstall takes back what it made.
    r = subprocess.run(["sh", str(INSTALL), "--uninstall"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not prefix.exists() and not any(dirs["BINDIR"].iterdir())
    assert not any((dirs["MANDIR"] / "man1").iterdir())


def shrdaemon(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fairshare.cli.shrdaemon", *args],
        capture_output=True, text=True, timeout=60, **kw,
    )  # fmt: skip


def test_detach_says_where_its_pid_and_log_are_and_status_and_stop_use_them(tmp_path):
    url = f"sqlite:///{tmp_path / 'udb.sqlite'}"
    acme = ROOT / "examples" / "acme" / "acme.udb"
    directives.run(open_udb(url, create=True), directives.parse(acme.read_text(), str(acme)))
    dispose_all()
    pid_file, log = tmp_path / "run" / "shrdaemon.pid", tmp_path / "log" / "shrdaemon.log"
    where = ["--pid-file", str(pid_file), "--log-file", str(log)]
    common = ["--udb", url, "--enforcer", "none", "--socket", "", "--host", "detach-test"]
    assert shrdaemon("--status", *where).returncode == 3  # LSB: not running
    r = shrdaemon("--detach", *common, *where)
    pid = int(pid_file.read_text()) if pid_file.exists() else None
    try:
        assert r.returncode == 0, r.stderr
        assert r.stdout == (
            f"shrdaemon: running in the background, pid {pid} (pid file {pid_file}), "
            f"log {log}; stop it with shrdaemon --stop\n"
        )
        os.kill(pid, 0)
        s = shrdaemon("--status", *where)
        assert s.returncode == 0 and s.stdout.startswith(f"shrdaemon: running, pid {pid} since")
        again = shrdaemon("--detach", *common, *where)
        assert again.returncode == 2
        assert f"already running: pid {pid} (pid file {pid_file})" in again.stderr
        end = time.monotonic() + 20
        while "share tree:" not in log.read_text() and time.monotonic() < end:
            time.sleep(0.1)
        assert "share tree:" in log.read_text()  # the daemon logs to its log file
        stop = shrdaemon("--stop", *where)
        assert (stop.returncode, stop.stdout) == (0, f"shrdaemon: stopped pid {pid}\n")
        assert not pid_file.exists()
        assert "every lnode written back" in log.read_text()
        assert shrdaemon("--status", *where).returncode == 3
    finally:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.requires("root")
def test_a_user_added_after_the_udb_was_built_is_scheduled_under_users_within_one_cycle(
    tmp_path,
):
    """The real daemon and collector: a process of a uid the UDB lacks (62001, no passwd
    entry, so it is named uid62001) gets an entry under Users and its lnode there."""
    from click.testing import CliRunner

    from fairshare.store.published import LnodeStore
    from udb.cli.udbgen import main as udbgen

    url = f"sqlite:///{tmp_path / 'udb.sqlite'}"
    assert CliRunner().invoke(udbgen, ["--udb", url, "--init"]).exit_code == 0
    r = subprocess.run(
        [sys.executable, "-m", "fairshare.cli.shradmin", "--udb", url, "-R", "0.5"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    dispose_all()
    user = subprocess.Popen(["sleep", "60"], preexec_fn=as_uid(UIDS[0]))
    daemon = subprocess.Popen(
        [sys.executable, "-m", "fairshare.cli.shrdaemon", "--udb", url, "--enforcer", "none",
         "--socket", "", "--host", "enrol-test", "--cycles", "6"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _, log = daemon.communicate(timeout=60)
        assert daemon.returncode == 0, log
    finally:
        user.kill()
        user.wait()
        if daemon.poll() is None:
            daemon.kill()
    assert f"enrolled uid {UIDS[0]} (uid{UIDS[0]}) under Users with 100 shares" in log
    engine = open_udb(url)
    store = LnodeStore(engine, "enrol-test")
    _head, rows = store.read_published()
    published = {row.name for row in rows}
    assert f"uid{UIDS[0]}" in published, log
    from sqlalchemy import select

    from udb.models import Entry
    from udb.session import read_session

    with read_session(engine) as s:
        entry = s.scalars(select(Entry).where(Entry.uid == UIDS[0])).one()
        users = s.scalars(select(Entry).where(Entry.name == "Users")).one()
    assert (entry.name, entry.resgrp, entry.shares) == (f"uid{UIDS[0]}", users.uid, 100)
