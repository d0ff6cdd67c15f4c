"""Running as a systemd service: sd_notify readiness and watchdog, journald-friendly logs.

- `Notifier` speaks sd_notify(3) itself: one datagram of ``KEY=value`` lines to the
  socket in $NOTIFY_SOCKET (``@name`` is an abstract socket).  It says READY=1 when
  the daemon has set up and taken its baseline, WATCHDOG=1 and a STATUS= line after
  every cycle, STOPPING=1 when it shuts down.  Without $NOTIFY_SOCKET it does nothing.
  WatchdogSec= must therefore exceed the cycle's delta (with room for a slow write-back).
- `log_formatter` makes each log line journald-structured when stderr is the journal
  ($JOURNAL_STREAM names stderr's device and inode, systemd.exec(5)): a ``<N>``
  syslog priority prefix, which journald turns into PRIORITY= and strips, and no
  timestamp (the journal keeps its own).  Elsewhere: a timestamped line.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fairshare.daemon.daemon import DaemonView

#: The `extra` of a log record about a client's mistake (fairshare.server: a request
#: refused or dropped): fairshare.daemon.metrics counts it in
#: fairshare_client_errors_total, not in the daemon's own fairshare_errors_total.
CLIENT_FAULT = {"fault": "client"}

log = logging.getLogger("shrdaemon")

#: logging level -> syslog priority (journald's PRIORITY=).
PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


class Notifier:
    """sd_notify over $NOTIFY_SOCKET (from `environ`); a no-op when it is unset."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        addr = environ.get("NOTIFY_SOCKET", "")
        self.address = "\0" + addr[1:] if addr.startswith("@") else addr
        usec = environ.get("WATCHDOG_USEC", "")
        pid = environ.get("WATCHDOG_PID", "")
        ours = not pid or pid == str(os.getpid())
        #: the watchdog interval systemd set, seconds (None: no watchdog)
        self.watchdog = int(usec) / 1e6 if usec.isascii() and usec.isdigit() and ours else None

    def notify(self, *lines: str) -> bool:
        """Send `lines` (``KEY=value``) as one message; False when there is no socket
        or it cannot be reached (never fatal: systemd may have gone away)."""
        if not self.address:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.connect(self.address)
                s.sendall("\n".join(lines).encode())
        except OSError as err:
            log.debug("sd_notify to %r failed: %s", self.address, err)
            return False
        return True

    # The daemon's hooks (fairshare.daemon.daemon.Observer).

    def started(self, daemon: DaemonView) -> None:
        self.notify(
            "READY=1", f"STATUS=running, enforcer {daemon.enforcer_name}", f"MAINPID={os.getpid()}"
        )

    def cycled(self, daemon: DaemonView, seconds: float) -> None:
        active = int(daemon.table.active.sum()) if daemon.table is not None else 0
        lines = [f"STATUS=cycle {daemon.cycle}: {active} active lnodes, {seconds:.3f} s"]
        if self.watchdog is not None:
            lines.insert(0, "WATCHDOG=1")
        self.notify(*lines)

    def stopping(self, daemon: DaemonView) -> None:
        self.notify("STOPPING=1", "STATUS=writing every lnode back")


def under_journal(environ: Mapping[str, str], fd: int | None) -> bool:
    """True when $JOURNAL_STREAM names the file open on `fd` (device:inode)."""
    if fd is None:
        return False
    try:
        dev, ino = (int(x) for x in environ.get("JOURNAL_STREAM", "").split(":"))
        st = os.fstat(fd)
    except (ValueError, OSError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


class JournalFormatter(logging.Formatter):
    """``<priority>message``: journald takes the prefix as the entry's PRIORITY=."""

    def format(self, record: logging.LogRecord) -> str:
        prio = PRIORITY.get(record.levelno, 6 if record.levelno < logging.WARNING else 3)
        text = super().format(record)
        # Each line of a traceback is its own journal entry: prefix them all.
        return "\n".join(f"<{prio}>{line}" for line in text.splitlines())


def log_formatter(environ: Mapping[str, str] = os.environ, fd: int | None = 2) -> logging.Formatter:
    """The formatter for the daemon's log on `fd`: journald's form when it is the journal."""
    if under_journal(environ, fd):
        return JournalFormatter("%(message)s")
    return logging.Formatter("%(asctime)s shrdaemon[%(process)d]: %(message)s")
