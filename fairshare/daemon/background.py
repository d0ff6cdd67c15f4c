"""shrdaemon without systemd: --detach into the background with a pid file and a log,
--status and --stop from that pid file (README.md, "Without systemd"; shrdaemon(8)).

The pid file and log default to /run/fairshare/shrdaemon.pid and
/var/log/fairshare/shrdaemon.log for root, and under $XDG_STATE_HOME/fairshare
(~/.local/state/fairshare) for anyone else.  The detached daemon writes its pid file
once it has left the terminal and removes it when it exits, if it still names it.
"""

from __future__ import annotations

import atexit
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from udb.errors import OptionError

#: How long --stop waits for the daemon to write everything back and exit.
STOP_WAIT = 15.0


@dataclass(frozen=True)
class Where:
    """Where a background daemon keeps its pid file and log."""

    pid_file: Path
    log_file: Path


def default_where(uid: int | None = None) -> Where:
    """Root's system paths, or the user's state directory."""
    if (os.geteuid() if uid is None else uid) == 0:
        return Where(Path("/run/fairshare/shrdaemon.pid"), Path("/var/log/fairshare/shrdaemon.log"))
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local/state") / "fairshare"
    return Where(state / "shrdaemon.pid", state / "shrdaemon.log")


def read_pid(pid_file: Path) -> int | None:
    """The pid of the live process `pid_file` names; None when there is no file, it holds
    no number, or that process is gone (a stale file left by a killed daemon)."""
    try:
        text = pid_file.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise OptionError(f"cannot read the pid file {pid_file}: {err.strerror}") from None
    if not text.isdigit():
        return None
    pid = int(text)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None  # gone
    return pid if b"shrdaemon" in cmdline else None  # else a reused pid: the file is stale


def detach(where: Where) -> None:
    """Fork into the background (double fork, new session, stdin and stdout on /dev/null,
    stderr on the log) and write the pid file.  The parent prints where the pid and log
    are and exits 0 once the pid file is written; a daemon already running on that pid
    file is refused first."""
    running = read_pid(where.pid_file)
    if running is not None:
        raise OptionError(f"already running: pid {running} (pid file {where.pid_file})")
    for path in (where.pid_file, where.log_file):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    log_fd = os.open(where.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    r, w = os.pipe()
    if os.fork():
        os.close(w)
        with os.fdopen(r) as pipe:
            pid = pipe.read().strip()
        if not pid:
            print(f"shrdaemon: did not start; see {where.log_file}", flush=True)
            os._exit(1)
        print(
            f"shrdaemon: running in the background, pid {pid} (pid file {where.pid_file}), "
            f"log {where.log_file}; stop it with shrdaemon --stop",
            flush=True,
        )
        os._exit(0)
    os.close(r)
    os.setsid()
    if os.fork():
        os._exit(0)
    os.chdir("/")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(log_fd, 2)
    os.close(null)
    os.close(log_fd)
    write_pid_file(where.pid_file)
    os.write(w, f"{os.getpid()}\n".encode())
    os.close(w)


def write_pid_file(pid_file: Path) -> None:
    """Write this process's pid to `pid_file` (atomically) and remove it at exit."""
    pid = os.getpid()
    tmp = pid_file.with_name(f".{pid_file.name}.{pid}")
    tmp.write_text(f"{pid}\n")
    tmp.chmod(0o644)
    tmp.replace(pid_file)

    def remove() -> None:
        try:
            if pid_file.read_text().strip() == str(pid):
                pid_file.unlink()
        except OSError:
            pass

    atexit.register(remove)


def status(where: Where) -> tuple[int, str]:
    """(exit status, line) for --status: 0 running, 3 not running (LSB's codes)."""
    pid = read_pid(where.pid_file)
    if pid is None:
        return 3, f"shrdaemon: not running (no live pid in {where.pid_file})"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.stat(f"/proc/{pid}").st_mtime))
    return 0, (
        f"shrdaemon: running, pid {pid} since {started} (pid file {where.pid_file}), "
        f"log {where.log_file}"
    )


def stop(where: Where, wait: float = STOP_WAIT) -> tuple[int, str]:
    """(exit status, line) for --stop: SIGTERM the daemon and wait until it has exited
    (it writes everything back first); 0 when it stopped or was not running, 1 when it
    outlived `wait` seconds."""
    pid = read_pid(where.pid_file)
    if pid is None:
        return 0, f"shrdaemon: not running (no live pid in {where.pid_file})"
    try:
        os.kill(pid, signal.SIGTERM)
    except PermissionError:
        raise OptionError(f"pid {pid} ({where.pid_file}) is not yours to stop") from None
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return 0, f"shrdaemon: stopped pid {pid}"
        time.sleep(0.05)
    return 1, f"shrdaemon: pid {pid} still running {wait:g} s after SIGTERM"
