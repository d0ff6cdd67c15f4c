"""shrsim: run a fair-share scenario on the simulated machine and compare shares."""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table

from fairshare.core.consts import parse_duration
from fairshare.sim.compare import Comparison, parse_policies, policy_list, run_compare
from fairshare.sim.grid import GridResult, run_grid
from fairshare.sim.grid_scenario import is_grid, load_grid
from fairshare.sim.machine import ENFORCERS
from fairshare.sim.plot import plot, plot_compare
from fairshare.sim.record import Measured, SimResult
from fairshare.sim.run import run_scenario
from fairshare.sim.scenario import load_scenario
from udb.cli.common import HELP, Command, handle_errors, udb_option, version_option
from udb.cli.progress import track
from udb.errors import OptionError
from udb.jsonout import echo_json

PLOT_FORMATS = (".png", ".svg")


@click.command("shrsim", cls=Command, context_settings=HELP)
@version_option
@click.argument("scenario", type=click.Path(dir_okay=False))
@udb_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the tables.")
@click.option(
    "--plot",
    "plot_file",
    metavar="FILE",
    help="Draw delivered, fair and entitled share over time per lnode and per group "
    "(.png or .svg).",
)
@click.option(
    "--window",
    metavar="DURATION",
    help="Measure over the last DURATION of the run (e.g. 1h) instead of after the warm-up.",
)
@click.option(
    "--enforcer",
    type=click.Choice(ENFORCERS),
    help="How the simulated kernel is driven: cgroup weights, nice values, or none "
    "(plain Linux: equal per process).  Default: the scenario's, else cgroup; none "
    "whenever NOSCHED or NOSHARE is set, as in shrdaemon.",
)
@click.option(
    "--compare",
    metavar="POLICY,...",
    help="Run the scenario under each named policy (e.g. unicos,slurm,feedback, or a "
    "site's plug-in; 'list' lists them, SCENARIO unread) and print "
    "one table: entitled and fair share, each policy's delivered share and deviation; "
    "--plot draws one row of panels per policy, --json nests each policy's document "
    "under its name.",
)
@click.option(
    "--usage",
    type=click.Choice(("grid", "local")),
    help="A grid scenario ([[site]] tables): exchange usage between the sites (grid), or "
    "schedule every site from its own usage only (local).  Default: the scenario's, else grid.",
)
@handle_errors
def main(scenario, udb, as_json, plot_file, window, enforcer, compare, usage):
    """Simulate SCENARIO (a TOML file) and report the fair against the delivered CPU share.

    The simulator runs the daemon's own scheduling cycle every delta seconds of
    simulated time on a machine of N CPUs that shares CPU among runnable
    processes by the weights the enforcer would set.  For every lnode and every
    group above one it prints, over the measured window, the entitled share
    (mean m_share), the fair share (the hierarchical max-min allocation of the
    CPUs for the demand the run had), the delivered share (CPU it received / CPU
    delivered to all lnodes) and delivered minus fair in percentage points.

    A scenario without `udb` or `directives` simulates the UDB named by --udb,
    with its stored constants.  Exit status: 0 on success, 2 for bad input.
    """
    if plot_file and Path(plot_file).suffix.lower() not in PLOT_FORMATS:
        raise OptionError(f"--plot: expected a file name ending in .png or .svg, got {plot_file!r}")
    if compare is not None and compare.strip().lower() == "list":
        for name, origin in policy_list():
            click.echo(f"{name}  {origin}")
        return
    if is_grid(scenario):
        run_grid_scenario(scenario, enforcer, usage, as_json, plot_file or window or compare)
        return
    if usage is not None:
        raise OptionError("--usage: only for a grid scenario (one with [[site]] tables)")
    sc = load_scenario(scenario, enforcer=enforcer, udb=udb)
    span = None
    if window is not None:
        span = parse_duration(window, "--window")
        if not 0 < span <= sc.duration:
            raise OptionError(f"--window: expected a duration up to the scenario's, got {window!r}")
    if compare is not None:
        policies = parse_policies(compare)

        def run(sc, name):
            label = f"shrsim: simulating ({name})"
            return run_scenario(
                sc, window=span, steps=lambda cycles, n: track(cycles, label, total=n)
            )

        cmp = run_compare(sc, policies, run)
        if plot_file:
            plot_compare(cmp.results, plot_file)
        if as_json:
            echo_json(cmp.as_json(), indent=True)
        else:
            render_compare(cmp, Console())
        return
    result = run_scenario(
        sc, window=span, steps=lambda cycles, n: track(cycles, "shrsim: simulating", total=n)
    )
    if plot_file:
        plot(result, plot_file)
    if as_json:
        echo_json(result.as_json(), indent=True)
    else:
        render(result, Console())


def run_grid_scenario(path, enforcer, usage, as_json: bool, refused) -> None:
    """Simulate the grid scenario at `path` and print its entries' shares (or JSON);
    --plot, --window and --compare are refused (`refused` set) for a grid."""
    if refused:
        raise OptionError("--plot, --window and --compare: not for a grid scenario")
    grid = load_grid(path, enforcer=enforcer, usage=usage)
    label = f"shrsim: simulating {len(grid.sites)} sites"
    result = run_grid(grid, steps=lambda cycles, n: track(cycles, label, total=n))
    if as_json:
        echo_json(result.as_json(), indent=True)
    else:
        render_grid(result, Console())


def render_grid(result: GridResult, console: Console) -> None:
    """Print every entry's target and delivered share of its parent, over the grid and
    the range over the sites."""
    start, stop = result.window
    sites = ", ".join(f"{k} {v:g}" for k, v in result.sites.items())
    console.print(
        f"{result.scenario}: {len(result.sites)} sites (CPUs: {sites}), usage {result.usage}, "
        f"window {start:g}s..{stop:g}s, {result.cycles} cycles",
        soft_wrap=True,
        markup=False,
    )
    t = Table(title="Entries (shares of the parent)", title_justify="left", box=box.SIMPLE_HEAD)
    for head in ("Name", "Scope", "Target %", "Grid %", "Dev pp", "Sites %", "Worst site pp"):
        t.add_column(head, justify="left" if head in ("Name", "Scope") else "right")
    for e in result.entries:
        at = [d * 100 for d, _t in e.sites.values()]
        span = f"{min(at):.1f}-{max(at):.1f}" if at else "-"
        worst = f"{e.worst_site_pp:.2f}" if e.scope == "local" else "-"
        t.add_row(
            e.name, e.scope, f"{e.target * 100:.2f}", f"{e.delivered * 100:.2f}",
            _pp(e.deviation_pp), span, worst,
        )  # fmt: skip
    console.print(t)
    worst = max((abs(e.deviation_pp) for e in result.entries if e.scope == "global"), default=0)
    console.print(f"Largest deviation of a global entry over the grid: {worst:.2f} pp")


def _pp(value: float) -> str:
    """Percentage points with their sign; a deviation that rounds to zero is +0.00,
    whichever side of zero the arithmetic left it."""
    return f"{round(value, 2) + 0.0:+.2f}"


def _table(title: str, rows: list[Measured]) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("Name")
    t.add_column("Kind")
    t.add_column("Entitled %", justify="right")
    t.add_column("Fair %", justify="right")
    t.add_column("Delivered %", justify="right")
    t.add_column("Deviation pp", justify="right")
    for m in rows:
        t.add_row(
            m.name,
            m.kind,
            f"{m.entitled * 100:.2f}",
            f"{m.fair * 100:.2f}",
            f"{m.delivered * 100:.2f}",
            _pp(m.deviation_pp),
        )
    return t


def render(result: SimResult, console: Console) -> None:
    """Print the lnode and group tables and the summary line."""
    start, stop = result.window
    console.print(
        f"{result.scenario}: enforcer {result.enforcer}, window {start:g}s..{stop:g}s, "
        f"{result.cycles} cycles, CPU utilisation {result.utilisation * 100:.1f}%",
        soft_wrap=True,
        markup=False,
    )
    console.print(_table("Lnodes", result.lnodes))
    if result.groups:
        console.print(_table("Groups", result.groups))
    console.print(f"Largest deviation from the fair share: {result.max_deviation_pp:.2f} pp")


def _compare_table(title: str, cmp: Comparison, rows) -> Table:
    # No Kind column, no vertical rules, the units on a second header line: three
    # policies still fit 80 columns.
    t = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    t.add_column("Name", no_wrap=True)
    for head in ("Entitled\n%", "Fair\n%"):
        t.add_column(head, justify="right", no_wrap=True)
    for name in cmp.policies:
        t.add_column(f"{name}\n%", justify="right", no_wrap=True)
        t.add_column("dev\npp", justify="right", no_wrap=True)
    for name, _kind, entitled, fair, per in rows:
        cells = [cell for d, dev in per for cell in (f"{d * 100:.2f}", _pp(dev))]
        t.add_row(name, f"{entitled * 100:.2f}", f"{fair * 100:.2f}", *cells)
    return t


def render_compare(cmp: Comparison, console: Console) -> None:
    """Print one table of lnodes and one of groups, a column pair per policy."""
    first = next(iter(cmp.results.values()))
    start, stop = first.window
    console.print(
        f"{cmp.scenario}: enforcer {first.enforcer}, window {start:g}s..{stop:g}s, "
        f"{first.cycles} cycles, policies {', '.join(cmp.policies)}",
        soft_wrap=True,
        markup=False,
    )
    rows = cmp.rows()
    console.print(_compare_table("Lnodes", cmp, rows[: len(first.lnodes)]))
    if first.groups:
        console.print(_compare_table("Groups", cmp, rows[len(first.lnodes) :]))
    worst = ", ".join(f"{n} {r.max_deviation_pp:.2f} pp" for n, r in cmp.results.items())
    console.print(f"Largest deviation from the fair share: {worst}", soft_wrap=True, markup=False)


if __name__ == "__main__":
    main()
