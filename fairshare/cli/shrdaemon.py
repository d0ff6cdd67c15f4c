"""shrdaemon: the fair-share daemon (see man/shrdaemon.8).

Parses options, chooses the collector, enforcer and clock (the real machine, or
the simulator with --simulate), takes the per-UDB lock and runs
fairshare.daemon.daemon.Daemon.  Logs go to stderr through Python's logging, so
journald picks them up under systemd; the first line says which enforcer is
in force and why.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import logging
import math
import os
import socket
import sys
from functools import partial
from pathlib import Path

import click

from fairshare.admin.shrdist import auth_path
from fairshare.daemon import background
from fairshare.daemon.daemon import Daemon, Options
from fairshare.daemon.enrol import parse_new_uids
from fairshare.daemon.grid import GRID_INTERVAL, remote_now
from fairshare.daemon.lock import AlreadyRunning, DaemonLock
from fairshare.daemon.service import Notifier, log_formatter
from fairshare.daemon.spool import Spool, default_spool
from fairshare.enforce.actions import RealOs
from fairshare.enforce.detect import ENFORCERS, detect, make_enforcer
from fairshare.server.server import Limits, Server
from fairshare.sim.scenario import scenario_brings_udb
from fairshare.store.config import load_consts
from fairshare.store.published import LnodeStore
from udb.cli.common import HELP, Command, FiniteFloat, handle_errors, udb_option, version_option
from udb.errors import OptionError, UdbError
from udb.jsonout import echo_json
from udb.remote import DEFAULT_SOCKET
from udb.rules import MAX_ID
from udb.session import display_name, open_udb, quick_check, read_session, resolve_url

log = logging.getLogger("shrdaemon")


def setup_logging(verbose: int, log_file: str | None) -> None:
    """Log to stderr (or `log_file`): INFO by default, DEBUG with -v; with a <N>
    priority prefix per line when stderr is the journal (fairshare.daemon.service)."""
    if log_file:
        handler = logging.FileHandler(log_file)
        handler.setFormatter(log_formatter({}))
    else:
        handler = logging.StreamHandler(sys.stderr)
        try:
            fd = sys.stderr.fileno()
        except (OSError, ValueError):  # not a file (click's test runner)
            fd = None
        handler.setFormatter(log_formatter(os.environ, fd))
    log.handlers[:] = [handler]
    log.setLevel(logging.DEBUG if verbose else logging.INFO)
    log.propagate = False
    # The library's log (a site hook or plug-in skipped, a stored constant ignored) to
    # the same place; it still propagates, to no handler of the root's but a host's.
    library = logging.getLogger("fairshare")
    library.handlers[:] = [handler]
    library.setLevel(logging.INFO)
    # A fatal signal (SIGBUS from a mapped file on a full disk, SIGSEGV) is written to
    # the log with the stack before the daemon dies: never silently.
    try:
        faulthandler.enable(file=handler.stream, all_threads=True)
    except (AttributeError, ValueError, OSError):  # not a real file (click's test runner)
        pass


@click.command(cls=Command, context_settings=HELP)
@version_option
@udb_option
@click.option(
    "--enforcer",
    type=click.Choice(ENFORCERS),
    default="auto",
    show_default=True,
    help="How shares reach the kernel: auto picks systemd (cgroup v2 with systemd as "
    "PID 1), else cgroup2, else cgroup1, else nice; "
    "none only accounts.  Without root it is always none.",
)
@click.option("--once", is_flag=True, help="Run one cycle (one delta after start), then stop.")
@click.option(
    "--cycles",
    type=click.IntRange(min=1, max=10**9),
    metavar="N",
    help="Run N cycles (1 to 10^9), then stop.",
)
@click.option(
    "--foreground/--detach",
    default=True,
    show_default=True,
    help="Stay attached to the terminal (the default, what systemd wants) or fork into "
    "the background with a pid file and a log (it prints where they are).",
)
@click.option(
    "--pid-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --detach, --status, --stop: the pid file (default /run/fairshare/shrdaemon.pid "
    "for root, else ~/.local/state/fairshare/shrdaemon.pid).",
)
@click.option(
    "--status",
    "control",
    flag_value="status",
    help="Say whether the daemon of the pid file runs (exit 0) or not (exit 3).",
)
@click.option(
    "--stop",
    "control",
    flag_value="stop",
    help="Stop the daemon of the pid file (SIGTERM) and wait until it has exited.",
)
@click.option(
    "--simulate",
    "scenario",
    metavar="SCENARIO",
    type=click.Path(exists=True, dir_okay=False),
    help="Drive the same loop with the simulator's machine and clock (no root, no "
    "sleeping; signals, nice values and cgroup writes go to the simulated machine, "
    "never to a real process).",
)
@click.option(
    "--enforce-min-uid",
    type=click.IntRange(min=0, max=MAX_ID),
    default=1000,
    show_default=True,
    metavar="UID",
    help="Processes of lower uids (root, system daemons) are charged but never moved or reniced.",
)
@click.option(
    "--new-uids",
    default="enrol:Users:100",
    show_default=True,
    metavar="enrol[:GROUP[:SHARES]]|unknown",
    help="Processes of a uid without an entry (at or above --enforce-min-uid): enrol the "
    "uid under GROUP with SHARES, scheduled from the next cycle, or charge it to unknown.",
)
@click.option(
    "--host",
    metavar="NAME",
    help="Host name keying the published rows and the checkpoint (default: this host's "
    "name; with --simulate: simulator, or one of a site scenario's hosts).  One daemon "
    "per UDB and host name: a second one is refused.",
)
@click.option(
    "--show",
    is_flag=True,
    help="When the run ends (--once, --cycles, --simulate), print the last published lnode table.",
)
@click.option("--json", "as_json", is_flag=True, help="With --show: print it as JSON.")
@click.option(
    "--socket",
    "socket_",
    metavar="PATH",
    envvar="FAIRSHARE_SOCKET",
    show_envvar=True,
    default=DEFAULT_SOCKET,
    show_default=True,
    help="Serve the commands of users other than root on this Unix socket "
    "(see shrdaemon-protocol(7)); '' serves none.",
)
@click.option(
    "--auth",
    metavar="PATH",
    envvar="SHRDIST_AUTH",
    show_envvar=True,
    help="shrdist's authorisation file for requests on the socket (default /etc/shrdist.auth).",
)
@click.option("--log-file", type=click.Path(dir_okay=False), help="Log here instead of stderr.")
@click.option(
    "--spool",
    "spool_at",
    type=click.Path(dir_okay=False),
    help="Keep what the UDB cannot take (down, full, read-only) in this file until it can "
    "(default: /var/lib/fairshare/shrdaemon-HOST-DIGEST.spool for root, else under "
    "$XDG_STATE_HOME/fairshare); '' keeps it in memory only.  With --simulate: only the "
    "file given (default: none).",
)
@click.option(
    "--metrics",
    "metrics_at",
    metavar="HOST:PORT",
    help="Serve Prometheus metrics over HTTP at HOST:PORT (/metrics); see METRICS in shrdaemon(8).",
)
@click.option(
    "--metrics-lnodes",
    type=click.IntRange(min=0),
    default=10000,
    show_default=True,
    metavar="N",
    help="Export at most N lnodes (those with the largest usage), bounding the series.",
)
@click.option(
    "--site-hook",
    "site_hooks",
    multiple=True,
    metavar="NAME|MODULE:ATTR",
    help="Run this site hook every cycle before the enforcer (repeatable): an entry point "
    "of the group fairshare.site_hooks, or MODULE:ATTR; 'none' runs none.  Default: every "
    "hook installed.  See SITE EXITS in shrdaemon(8).",
)
@click.option(
    "--speed",
    type=FiniteFloat(0, 1000, min_open=True),
    metavar="FACTOR",
    help="This host's speed factor: a CPU-second here is charged as FACTOR CPU-seconds "
    "(default the UDB's, shradmin --speed, 1): for a host faster or slower than the "
    "site's others.",
)
@click.option(
    "--grid-interval",
    type=FiniteFloat(0, 86400),
    default=GRID_INTERVAL,
    show_default=True,
    metavar="SECONDS",
    help="A grid: fetch the mounted policies and pull the peers' usage records this often "
    "(0: never); see RUNNING A GRID in shrdaemon(8).",
)
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Also log every lnode created, released, written back and checkpointed.",
)
@handle_errors
def main(
    udb,
    enforcer,
    once,
    cycles,
    foreground,
    scenario,
    enforce_min_uid,
    host,
    show,
    as_json,
    socket_,
    auth,
    log_file,
    spool_at,
    metrics_at,
    metrics_lnodes,
    site_hooks,
    speed,
    grid_interval,
    verbose,
    pid_file,
    control,
    new_uids,
):
    """The fair-share daemon: every delta seconds, charge each active lnode for what
    its processes used, run the UNICOS fair-share cycle, make the kernel deliver the
    effective shares, and publish the lnode table for shrview.  Released lnodes are
    written back to the UDB every write-back interval (shradmin -n, 60 s), active ones
    checkpointed every 300 s and recovered after a crash.  SIGTERM or SIGINT writes
    everything back and exits 0; SIGHUP re-reads the share tree."""
    if once:
        if cycles:
            raise OptionError("--once and --cycles: give one of them")
        cycles = 1
    new_uids = parse_new_uids(new_uids)
    log_file = control_or_detach(control, foreground, scenario, pid_file, log_file)
    setup_logging(verbose, log_file)
    observers = [Notifier()]
    if metrics_at:
        from fairshare.daemon.metrics import Metrics, parse_address

        observers.append(Metrics(parse_address(metrics_at), metrics_lnodes))
    url = resolve_url(udb)
    # Only a simulation that brings its own UDB (the scenario's udb or directives) may
    # create one; the real daemon never does.
    engine = open_udb(url, create=bool(scenario) and scenario_brings_udb(scenario))
    quick_check(engine)  # a damaged file is refused before the daemon starts, not mid-way
    with read_session(engine) as s:
        consts = load_consts(s)
    # One daemon per UDB and host name: a second one with the same --host is refused.
    host = host or ("simulator" if scenario else socket.gethostname())
    lock = DaemonLock(url, f"{display_name(url)} (host {host})", host=host, engine=engine)
    if scenario:
        serve(observers)
        with lock:
            args = (engine, scenario, cycles, enforcer, host, observers, site_exits(site_hooks))
            # A simulation spools only to a file named (never to the real daemon's).
            spool = Spool(Path(spool_at), host) if spool_at else None
            run_simulation(*args, grid_interval, spool)
        if show:
            show_published(LnodeStore(engine, host), as_json)
        return
    options = Options(
        enforce_min_uid=enforce_min_uid,
        site_exits=site_exits(site_hooks),
        new_uids=new_uids,
        speed=speed,
        grid_interval=grid_interval,
        grid_background=True,
    )
    spool = Spool(None if spool_at == "" else Path(spool_at or default_spool(url, host)), host)
    args = (observers, enforcer, options, socket_, auth, cycles, spool)
    store = run_real(engine, lock, consts, *args)
    if show:
        show_published(store, as_json)


def control_or_detach(control, foreground, scenario, pid_file, log_file) -> str | None:
    """--status or --stop (answered, then exit), or --detach (the daemon goes to the
    background, its stderr the log); returns the log file from here on (None: stderr)."""
    where = background.default_where()
    where = background.Where(pid_file or where.pid_file, Path(log_file or where.log_file))
    if control:
        code, line = (background.status if control == "status" else background.stop)(where)
        click.echo(line)
        sys.exit(code)
    if not foreground:
        if scenario:
            raise OptionError("--detach and --simulate: a simulation runs in the foreground")
        background.detach(where)  # stderr is the log from here on
        return None
    return log_file


def site_exits(specs: tuple[str, ...]) -> tuple:
    """The site hooks --site-hook names (none given: every one installed; "none": none),
    loaded (fairshare.core.plugins), each logged."""
    from fairshare.core.plugins import load_site_hooks

    if specs == ("none",):
        return ()
    exits = tuple(load_site_hooks(specs or None))
    for e in exits:
        log.info("site hook %s runs every cycle before the enforcer", e.name)
    return exits


def run_real(
    engine, lock, consts, observers, enforcer, options, socket_, auth, cycles, spool
) -> LnodeStore:
    """Run the daemon on this machine under `lock` (serving `socket_` unless '';
    spooling to `spool`) until it stops; returns its store, which holds the last
    published lnode table.  AlreadyRunning (exit 2) when it stopped because another
    daemon took the host's lock."""
    limits = server_limits(os.environ.get(LIMITS_ENV))
    lock.acquire()
    try:
        choice = detect(enforcer)
        log.info("%s", enforcer_line(choice, consts.scheduling))
        log.info("UDB %s, host %s, lock %s", display_name(lock.url), lock.host, lock.where)
        daemon = make_daemon(engine, choice, lock.host, options, consts.share_by_account)
        daemon.lock, daemon.ledger.spool = lock, spool
        log.info("uids without an entry: --new-uids %s", options.new_uids or "unknown")
        daemon.observers.extend(observers)
        serve(observers)
        server = None
        if socket_:
            server = Server(
                socket_, engine, daemon.store.host, daemon.account_of, auth_path(auth), limits
            )
            server.answers.remote = partial(remote_now, daemon)
            server.start()
            if limits != Limits():
                log.info("%s: the socket's clients are held to %s", LIMITS_ENV, limits)
        else:
            log.info("--socket '': serving no requests (only root's commands can be used)")
        try:
            daemon.install_signal_handlers()
            run_logged(daemon, cycles)
        finally:
            if server is not None:
                server.stop()
    finally:
        lock.release()
    if daemon.fenced:
        raise AlreadyRunning(f"UDB {lock.display}: {daemon.udb.fenced}; stopped")
    return daemon.store


#: Shorter (or longer) limits for the socket server's clients, for tests: see ENVIRONMENT
#: in shrdaemon(8).
LIMITS_ENV = "FAIRSHARE_SERVER_LIMITS"


def server_limits(text: str | None) -> Limits:
    """The socket server's limits (fairshare.server.server.Limits), with those `text`
    names changed: comma-separated NAME=VALUE, NAME a field of Limits, VALUE positive
    ("request_timeout=2,reply_timeout=3")."""
    limits = Limits()
    if not text:
        return limits
    fields = [f.name for f in dataclasses.fields(Limits)]
    changes = {}
    for item in text.split(","):
        name, _, value = (part.strip() for part in item.partition("="))
        if name not in fields:
            raise OptionError(
                f"{LIMITS_ENV}: {item.strip()!r}: expected NAME=VALUE, NAME one of "
                + ", ".join(fields)
            )
        try:
            number = type(getattr(limits, name))(value)  # the field's int or float
            good = math.isfinite(number) and number > 0
        except (ValueError, OverflowError):
            good = False
        if not good:
            raise OptionError(f"{LIMITS_ENV}: {item.strip()!r}: expected a positive number")
        changes[name] = number
    return dataclasses.replace(limits, **changes)


def enforcer_line(choice, scheduling: bool) -> str:
    """The start-up line naming the enforcer in force and why.  With NOSCHED or NOSHARE
    set (`scheduling` False, Consts.scheduling) the daemon runs the enforcer none until
    they are cleared, and the line says which enforcer will take over then."""
    if choice.name != "none" and not scheduling:
        return (
            f"enforcer none: NOSCHED or NOSHARE is set, accounting only "
            f"({choice.name} when cleared: {choice.reason})"
        )
    return f"enforcer {choice.name}: {choice.reason}"


def serve(observers) -> None:
    """Start the metrics server, if asked for (a port in use is exit 2, before any cycle)."""
    for o in observers:
        if hasattr(o, "serve"):
            o.serve()


def show_published(store: LnodeStore, as_json: bool) -> None:
    """Print the published lnode table: a rich table, or JSON (shape in shrdaemon(8))."""
    head, rows = store.read_published()
    if head is None:
        raise OptionError(f"nothing published for host {store.host}")
    from rich.console import Console  # the running daemon never draws: import when asked

    from fairshare.display.lnodes import published_json, render_published

    if as_json:
        echo_json(published_json(head, rows), indent=True)
    else:
        render_published(Console(width=max(100, Console().width)), head, rows)


def make_daemon(engine, choice, host, options: Options, by_account=False) -> Daemon:
    """A Daemon on the real machine with the chosen enforcer: a cgroup enforcer's
    counters give the CPU of the processes in lnode cgroups, and the kernel's process
    events place new sessions at once."""
    from fairshare.collect.procfs import ProcfsCollector
    from fairshare.daemon.sessions import SessionAccounts
    from fairshare.enforce.events import ProcessEvents

    actions = RealOs()
    enforcer = make_enforcer(choice, actions, by_account)
    counts = enforcer.capabilities.counts
    return Daemon(
        engine,
        ProcfsCollector(
            groups=enforcer.read_groups if counts else None,
            group_of=getattr(enforcer, "group_of", None) if counts else None,
        ),
        enforcer,
        LnodeStore(engine, host),
        actions,
        options=options,
        account_of=SessionAccounts(),  # newacct's accounts, per session
        process_events=ProcessEvents() if enforcer.capabilities.places else None,
    )


def run_simulation(
    engine,
    scenario,
    cycles,
    enforcer,
    host,
    observers=(),
    exits=(),
    grid_interval=GRID_INTERVAL,
    spool: Spool | None = None,
) -> None:
    """Run the daemon's loop on the simulator's machine described by `scenario`, with
    the site's hooks `exits`, a grid's exchange every `grid_interval` simulated s, and
    what the UDB does not take kept in `spool` (None: in memory)."""
    from fairshare.sim.daemon import simulated_daemon

    daemon, model, length = simulated_daemon(
        engine, scenario, enforcer, host=host or "simulator", cycles=cycles, site_exits=exits,
        grid_interval=grid_interval,
    )  # fmt: skip
    log.info("enforcer sim (%s model): --simulate %s drives the simulated machine", model, scenario)
    if spool is not None:
        daemon.ledger.spool = spool
    daemon.observers.extend(observers)
    daemon.install_signal_handlers()
    run_logged(daemon, cycles or length)


def run_logged(daemon: Daemon, cycles: int | None) -> None:
    """Run the loop; a failure that is not the user's (a bug, a lost database) is
    logged with its traceback, since a detached daemon has no terminal, and exits 1."""
    try:
        daemon.run(cycles)
    except UdbError:
        raise
    except Exception:
        log.exception("shrdaemon failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
