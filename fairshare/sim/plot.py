"""shrsim --plot: delivered against fair and entitled share over time, one line per
lnode and, in a panel of their own, one per group (with --compare, a row per policy).

Draws a run's series (fairshare.sim.record.SimResult) with matplotlib to a .png or
.svg file; matplotlib is imported only when a plot is asked for.  Each lnode or group
has one colour: delivered solid, the fair target dotted, entitled (m_share) dashed
and faint.
"""

from __future__ import annotations

from pathlib import Path

from fairshare.sim.record import SimResult

#: The y-axis label: what each line style shows.
YLABEL = "CPU share (%)\ndelivered solid, fair dotted, entitled dashed"


def draw_result(ax, result: SimResult, title: str, groups: bool = False) -> None:
    """Draw delivered (solid), fair (dotted) and entitled (dashed) share over time per
    lnode, or with `groups` per group, on the matplotlib axes `ax`, with the window's
    start a grey dotted line."""
    hours = result.times / 3600.0
    nl = len(result.lnodes)
    columns = range(nl, len(result.series_names)) if groups else range(nl)
    for j in columns:
        name = result.series_names[j]
        (line,) = ax.plot(hours, result.delivered[:, j] * 100, lw=1, label=name)
        colour = line.get_color()
        ax.plot(hours, result.fair[:, j] * 100, ls=":", lw=1.5, color=colour)
        ax.plot(hours, result.entitled[:, j] * 100, ls="--", lw=1, color=colour, alpha=0.6)
    ax.axvline(result.window[0] / 3600.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel(YLABEL, fontsize="small")
    ax.set_title(title)
    if len(columns) <= 20:
        ax.legend(fontsize="small", ncol=2)


def _title(result: SimResult) -> str:
    return f"{Path(result.scenario).name} ({result.enforcer} enforcer)"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(result: SimResult, path: str | Path) -> None:
    """Draw delivered, fair and entitled share over time per lnode to `path`, and,
    where the run has groups, per group in a second panel below.

    The format follows the extension (.png or .svg).
    """
    plt = _pyplot()
    panels = 2 if result.groups else 1
    fig, axes = plt.subplots(panels, 1, figsize=(10, 4.5 * panels + 1), sharex=True)
    axes = list(axes) if panels > 1 else [axes]
    draw_result(axes[0], result, f"{_title(result)}: lnodes")
    if result.groups:
        axes[0].set_xlabel("")
        draw_result(axes[1], result, f"{_title(result)}: groups", groups=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_compare(results: dict[str, SimResult], path: str | Path) -> None:
    """shrsim --compare --plot: one row of panels per policy (`results` by policy name,
    in order), the lnodes on the left and, where the runs have groups, the groups on
    the right, with shared axes, to `path` (.png or .svg)."""
    plt = _pyplot()
    n = len(results)
    cols = 2 if next(iter(results.values())).groups else 1
    fig, axes = plt.subplots(
        n, cols, figsize=(8 * cols + 2, 3.5 * n + 1), sharex=True, sharey=True, squeeze=False
    )
    for i, (name, r) in enumerate(results.items()):
        draw_result(axes[i, 0], r, f"{name}: {_title(r)}: lnodes")
        if cols > 1:
            draw_result(axes[i, 1], r, f"{name}: groups", groups=True)
        if i < n - 1:
            for ax in axes[i]:
                ax.set_xlabel("")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
