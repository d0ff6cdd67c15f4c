"""shrsim --plot: delivered against entitled share over time, one line per lnode
(with --compare, one panel per policy).

Draws a run's series (fairshare.sim.record.SimResult) with matplotlib to a .png or
.svg file; matplotlib is imported only when a plot is asked for.
"""

from __future__ import annotations

from pathlib import Path

from fairshare.sim.record import SimResult


def draw_result(ax, result: SimResult, title: str) -> None:
    """Draw delivered (solid) and entitled (dashed) share over time per lnode on the
    matplotlib axes `ax`, with the window's start dotted."""
    hours = result.times / 3600.0
    for j, name in enumerate(result.series_names):
        (line,) = ax.plot(hours, result.delivered[:, j] * 100, lw=1, label=f"{name} delivered")
        ax.plot(hours, result.entitled[:, j] * 100, ls="--", lw=1, color=line.get_color())
    ax.axvline(result.window[0] / 3600.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel("share of the CPU delivered (%), entitled dashed")
    ax.set_title(title)
    if len(result.series_names) <= 20:
        ax.legend(fontsize="small", ncol=2)


def _title(result: SimResult) -> str:
    return f"{Path(result.scenario).name} ({result.enforcer} enforcer)"


def plot(result: SimResult, path: str | Path) -> None:
    """Draw delivered (solid) and entitled (dashed) share over time per lnode to `path`.

    The format follows the extension (.png or .svg).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5.5))
    draw_result(ax, result, _title(result))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_compare(results: dict[str, SimResult], path: str | Path) -> None:
    """shrsim --compare --plot: one panel per policy (`results` by policy name, in
    order), stacked with shared axes, to `path` (.png or .svg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    fig, axes = plt.subplots(n, 1, figsize=(10, 3.5 * n + 1), sharex=True, sharey=True)
    axes = [axes] if n == 1 else list(axes)
    for ax, (name, r) in zip(axes, results.items(), strict=True):
        draw_result(ax, r, f"{name}: {_title(r)}")
        if ax is not axes[-1]:
            ax.set_xlabel("")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
