"""shrview's displays of the published lnode table (the guide's section 4.4.11.1).

Rendering only: the rows, the selection and the -ds and -dn reports come from the
report layer (fairshare.report: `prepare`, `statistics`, `nice_table`).
`display_lines` turns a snapshot into the lines of one display (plain columns, like
the guide's samples), `display_json` into its JSON document.  The columns of -dm, -da
and -dl are described once, in `display_columns`, and used by both.  An effective
share that is only what the lnode would get if it alone started (it wants no CPU) is
in parentheses (`IF_STARTED`), and `legend_lines` says so above the table.
`parse_select` and `parse_sort` read the -s and -o words.

Shares and rates are fractions 0..1 in the reports, percentages in the displays
and the JSON (keys ending in `_pct`).  Usage and Muse are charge units; Rate is
charge units per second.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, make_dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np

from fairshare.core.consts import LIMSHARE, Consts
from fairshare.display import columns, octal
from fairshare.report.lnodes import (
    Statistics,
    ViewLnode,
    ViewRequest,
    prepare,
    rows_of,
    statistics,
)
from fairshare.report.published import Snapshot
from udb.columnar import Columns
from udb.errors import NotFound, OptionError

if TYPE_CHECKING:  # -dn's and -dl's modules are imported by those displays only
    from fairshare.report.nice import NiceRow

#: Display names by the guide's -d letter.
DISPLAYS = {
    "m": "monitor",
    "a": "adjgroup",
    "s": "statistics",
    "n": "nice tables",
    "l": "limshare",
    "g": "graph",
}
#: -s values: the guide's letters and words; anything else names a subtree.
SELECTS = {"a": "all", "all": "all", "o": "groups", "groups": "groups", "u": "users"}
SELECTS["users"] = "users"
#: -o keys by letter or word.
SORTS = {k[0]: k for k in ("tree", "id", "name", "usage", "rate", "eshr")}
SORTS.update({k: k for k in SORTS.values()})

#: Width of the -dg bar for 100% of the machine (Kay-Lauder Figure 6).
BAR_WIDTH = 50


def stale_message(snap: Snapshot, when: Callable[[float], str], command: str = "shrview") -> str:
    """The line saying that no daemon is publishing `snap`, with its age."""
    if snap.stopped is not None:
        how = f"stopped at {when(snap.stopped)}"
    else:
        how = f"last cycle at {when(snap.time)}, the daemon did not stop cleanly"
    return (
        f"{command}: no daemon is running for {snap.host}; showing the last published state, "
        f"{snap.age:.0f} s old (cycle {snap.cycle}, {how})"
    )


def parse_select(value: str) -> str:
    """The -s selection ("all", "groups", "users") from a letter or word; else the NAME itself."""
    return SELECTS.get(value, value)


def parse_sort(value: str) -> str:
    """The -o key ("tree", "id", "name", "usage", "rate", "eshr") from a word or its letter."""
    try:
        return SORTS[value]
    except KeyError:
        expected = "tree, id, name, usage, rate or eshr (or their first letters)"
        raise OptionError(f"-o {value}: expected {expected}") from None


def check_select(snap: Snapshot, req: ViewRequest) -> None:
    """Raise NotFound when -s names no published lnode (before anything is printed)."""
    if req.select not in ("all", "groups", "users") and req.display not in (
        "nice tables",
        "statistics",
    ):
        names = snap.lnodes["name"]
        if names and req.select not in names:
            raise NotFound(f"-s {req.select}: no active lnode of that name")


# -- the -dm, -da and -dl columns ------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One display column: its heading, JSON key, alignment, cell text and JSON value.

    Columns that only format one ViewLnode attribute also say so (`attr`, the text's
    `fmt` of the value after `prep`, `pct` for percentages), so a whole column is
    made at once (`column_texts`, `column_values`) with the same text and values.
    `paren` names a boolean attribute: where it is true of some lnode shown, their
    cells are in parentheses and the others (and the heading) followed by a blank, so
    the figures line up (`column_texts`, `column_heading`; `text` gives the bare cell); the
    JSON gives it too, under its name, after this column's key."""

    heading: str
    key: str
    text: Callable[[ViewLnode], str]
    value: Callable[[ViewLnode], object]
    right: bool = True
    attr: str | None = None
    fmt: str = "{}"
    prep: Callable[[np.ndarray], np.ndarray] | None = None
    pct: bool = False
    paren: str | None = None


def _attr(heading: str, key: str, attr: str, fmt: str, prep=None) -> Column:
    get = operator.attrgetter(attr)
    if prep is None:
        return Column(heading, key, lambda v: fmt.format(get(v)), get, True, attr, fmt)
    text = lambda v: fmt.format(prep(get(v)))  # noqa: E731
    return Column(heading, key, text, get, True, attr, fmt, prep)


def _values(c: Column, shown: Sequence[ViewLnode]) -> list | None:
    """Column `c`'s attribute over `shown`, or None when it needs the cell functions."""
    if c.attr is None:
        return None
    vals = list(map(operator.attrgetter(c.attr), shown))
    return None if c.pct and None in vals else vals


def column_texts(c: Column, shown: Sequence[ViewLnode]) -> list[str]:
    """Column `c`'s cell texts for `shown` (as `c.text` gives them, one column at once)."""
    vals = _values(c, shown)
    if vals is None:
        return _parens(c, list(map(c.text, shown)), shown)
    if c.pct:
        vals = (100 * np.array(vals, dtype=float)).tolist()
        if any(x != x for x in vals):  # NaN: not published
            return _parens(c, ["-" if x != x else c.fmt.format(x) for x in vals], shown)
    elif c.prep is not None:
        vals = c.prep(np.array(vals, dtype=float)).tolist()
    return _parens(c, list(map(c.fmt.format, vals)), shown)


def _parens(c: Column, texts: list[str], shown: Sequence[ViewLnode]) -> list[str]:
    """`texts`, the cells of column `c` for `shown`, in parentheses where `c.paren` is
    true of the lnode and followed by a blank elsewhere; as they are when it is true of
    none (or `c.paren` is None)."""
    if c.paren is None:
        return texts
    flags = list(map(operator.attrgetter(c.paren), shown))
    if not any(flags):
        return texts
    return [f"({t})" if f else f"{t} " for t, f in zip(texts, flags, strict=True)]


def column_heading(c: Column, table: Columns, shown: np.ndarray) -> str:
    """Column `c`'s heading over rows `shown` of `table`: followed by a blank when some
    of its cells are in parentheses (see Column), so it lines up with the figures."""
    if c.paren is not None and np.asarray(table[c.paren])[shown].any():
        return c.heading + " "
    return c.heading


#: A fixed-point format of one number ("{:.2f}"): its texts grow with the distance from 0.
_FIXED = re.compile(r"\{:\.\d+f\}")
#: The conversions a line is formatted with (printf-style, as str.format's spec).
_PRINTF = re.compile(r"\.\d+f|d|o")


@dataclass(frozen=True)
class _Layout:
    """One column as `_fixed_lines` writes it: its numbers (percentages already times
    100, `prep` applied), printf conversion, width and alignment; the rows written "-"
    (a percentage that is NaN; None: no such row) and the rows in parentheses (None: a
    column without them)."""

    values: np.ndarray
    spec: str
    width: int
    right: bool
    missing: np.ndarray | None
    paren: np.ndarray | None


def _layout(c: Column, table: Columns, shown: np.ndarray) -> _Layout | None:
    """Column `c` over rows `shown` of `table` as `_fixed_lines` writes it; None when it
    is not one attribute's numbers in one printf-style conversion (or has infinities,
    or NaN outside a percentage: the cell functions then write them)."""
    if c.attr is None or not c.fmt.startswith("{") or c.fmt.count("{") != 1:
        return None
    spec = c.fmt[1:-1].removeprefix(":") or "d"
    if not _PRINTF.fullmatch(spec):
        return None
    a = np.asarray(table[c.attr])[shown]
    missing = None
    if a.dtype.kind in "bi" and not (c.pct or c.prep is not None):
        a = a.astype(np.int64)
    elif a.dtype.kind in "if" and _FIXED.fullmatch(c.fmt):
        a = a.astype(float)
        if c.pct or c.prep is not None:
            a = 100 * a if c.pct else c.prep(a)
        nan = np.isnan(a)
        if np.isinf(a).any() or (nan.any() and not c.pct):
            return None
        missing = nan if nan.any() else None
    else:
        return None
    paren = np.asarray(table[c.paren], dtype=bool)[shown] if c.paren is not None else None
    if paren is not None and not paren.any():
        paren = None
    width = max(len(column_heading(c, table, shown)), _widest(c.fmt, a, missing, paren))
    return _Layout(a, spec, width, c.right, missing, paren)


def _widest(fmt: str, a: np.ndarray, missing, paren) -> int:
    """The length of the widest text of the numbers `a` in `fmt`: "-" where `missing`,
    in parentheses where `paren` and followed by a blank elsewhere.

    A fixed-precision text of a number is no shorter than that of a number nearer 0,
    so the widest is the largest's or the smallest's (or -0.0's): no cell formatted."""
    every = np.ones(len(a), dtype=bool)
    parts = [(every, 0)] if paren is None else [(paren, 2), (~paren, 1)]
    widest = 0
    for rows, extra in parts:
        if missing is not None:
            widest = max(widest, 1 + extra) if (rows & missing).any() else widest
            rows = rows & ~missing
        x = a[rows]
        if not len(x):
            continue
        if x.dtype.kind == "f":  # -0.0 ties with 0.0 as the smallest but prints longer
            ends = (float(x.max()), float(x.min()), -0.0 if np.signbit(x).any() else 0.0)
        else:
            ends = (int(x.max()), int(x.min()))
        widest = max(widest, extra + max(len(fmt.format(e)) for e in ends))
    return widest


def _fixed_lines(
    cols: Sequence[Column], names: Sequence[str], table: Columns, shown: np.ndarray
) -> list[str] | None:
    """The lines `columns` makes of the Name cells `names` (a list or an array of str)
    and the other columns of
    rows `shown` of `table` (report.lnodes.view_columns), formatted in one printf-style
    % per line; None when a column is not one attribute's numbers (`_layout`: the cell
    functions then do it).

    The widths come without formatting every cell (`_widest`), and each line is one
    format of the row's values.
    """
    if not len(shown) or cols[0].right:
        return None
    layouts = [_layout(c, table, shown) for c in cols[1:]]
    if any(lay is None for lay in layouts):
        return None
    names = np.asarray(names, dtype=str)
    name_w = max(len(cols[0].heading), int(np.strings.str_len(names).max()))
    heads = [f"{{:<{name_w}}}", *(f"{{:{'>' if x.right else '<'}{x.width}}}" for x in layouts)]
    head = "  ".join(heads).format(*(column_heading(c, table, shown) for c in cols)).rstrip()
    lines = _filled_lines(names, name_w, layouts)
    if lines is not None:
        return [head, *lines]
    if any(x.missing is not None or x.paren is not None for x in layouts):
        return None  # printf writes neither "-" nor parentheses
    # printf-style: the same texts as str.format's for these conversions, in 60% of the time.
    specs = [f"%{'' if x.right else '-'}{x.width}{x.spec}" for x in layouts]
    fmt = "  ".join([f"%-{name_w}s", *specs])
    lists = [x.values.tolist() for x in layouts]
    rows = zip(names.tolist(), *lists, strict=True)
    return [head, *map(str.rstrip, map(fmt.__mod__, rows))]


def _filled_lines(names: np.ndarray, name_w: int, layouts: list[_Layout]) -> list[str] | None:
    """The lines of `_fixed_lines` written character by character by numpy into one
    table (ASCII bytes, or code points for other names), the numbers by
    `_number_cells`; None when a column is left-aligned or a text does not fit its width.

    The table is built a character column at a time (each one contiguous: `by_column`,
    one row per character position) and turned into lines once at the end."""
    if any(not x.right for x in layouts):
        return None
    codes = names.view(np.uint32).reshape(len(names), -1)
    ascii_ = not (codes > 127).any()
    ends = np.cumsum([name_w, *(2 + x.width for x in layouts), 1])
    dtype = np.uint8 if ascii_ else np.uint32
    by_column = np.full((int(ends[-1]), len(names)), 32, dtype=dtype)
    by_column[: codes.shape[1]] = np.where(codes == 0, 32, codes).T
    for x, end in zip(layouts, ends[1:], strict=False):
        # A column with parentheses keeps its last character for ")" or a blank.
        cells = by_column[end - x.width : end - (x.paren is not None)]
        start = _number_cells(x.values, x.spec, cells, x.missing)
        if start is None:
            return None
        if x.paren is not None:
            rows = np.flatnonzero(x.paren)
            if (start[rows] == 0).any():
                return None
            cells[start[rows] - 1, rows] = 40  # "("
            by_column[end - 1, rows] = 41  # ")"
    by_column[-1] = 10  # "\n"
    text = np.ascontiguousarray(by_column.T).tobytes()
    return text.decode("ascii" if ascii_ else "utf-32-le").split("\n")[:-1]


def _number_cells(
    a: np.ndarray, spec: str, out: np.ndarray, missing: np.ndarray | None = None
) -> np.ndarray | None:
    """Write the text of `"%{width}{spec}" % x` for every x of `a` (spec d, o or .Nf),
    right-aligned, into `out` (blank; one row per character position, `width` rows, a
    column per value), and "-" for the values `missing` marks; return each text's
    first position, or None where a text would not fit.

    .Nf is rounded from x * 10**N as printf rounds x: the few values within a hair of
    a half (where the product's own rounding could tip it) are formatted by Python."""
    width, n = out.shape
    frac = int(spec[1:-1]) if spec.endswith("f") else 0
    base = 8 if spec == "o" else 10
    if missing is not None:
        a = np.where(missing, 0, a)
    if a.dtype.kind == "f":
        scaled = np.abs(a) * 10.0**frac
        if not (scaled < 2.0**52).all():
            return None
        k = np.rint(scaled).astype(np.int64)
        # The product's error is below scaled x 2**-53: where a half is that near, Python.
        tie = np.flatnonzero(np.abs(scaled - np.floor(scaled) - 0.5) <= 1e-6 + scaled * 1e-15)
        neg = np.signbit(a)
    else:
        k, tie, neg = np.abs(a), (), a < 0
    start = np.full(n, width, dtype=np.int64)  # each text's first position
    more = np.ones(n, dtype=bool)
    pos, written = width - 1, 0
    while more.any():
        if frac and written == frac:
            out[pos] = 46  # "."
            start[:] = pos
            pos -= 1
        if pos < 0:
            return None
        k, digit = np.divmod(k, base)
        out[pos] = np.where(more, 48 + digit, 32)
        start[more] = pos
        written += 1
        pos -= 1
        more &= (k > 0) | (written <= frac)
    if neg.any():
        sign = np.flatnonzero(neg)
        if (start[sign] == 0).any():
            return None
        start[sign] -= 1
        out[start[sign], sign] = 45  # "-"
    for i in tie:
        text = f"%{width}{spec}" % a[i]
        if len(text) != width:
            return None
        out[:, i] = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        start[i] = width - len(text.lstrip())
    if missing is not None:
        rows = np.flatnonzero(missing)
        out[:, rows] = 32
        out[width - 1, rows] = 45  # "-"
        start[rows] = width - 1
    return start


def column_values(c: Column, table: Columns, shown: np.ndarray) -> list:
    """Column `c`'s JSON values for rows `shown` of `table` (as `c.value` gives them);
    `c` formats one attribute (`c.attr`)."""
    vals = np.asarray(table[c.attr])[shown]
    if c.pct:
        return round6(100 * vals.astype(float)).tolist()
    if c.fmt == "{:o}":  # Flags: the octal text is the value, of a few distinct ones
        distinct, at = np.unique(vals, return_inverse=True)
        texts = list(map(c.fmt.format, distinct.tolist()))
        return list(map(texts.__getitem__, at.tolist()))
    return vals.tolist()


def round6(x: np.ndarray) -> np.ndarray:
    """Python's `round(v, 6)` of every value of `x`, at once.  Python rounds the exact
    value of v to 6 decimals, halves to even, and reads that decimal back: k / 1e6 of
    the nearest integer k to v x 1e6 is that float (one correctly rounded division of
    two exact numbers).  Where v x 1e6 is within its own rounding error of a half, or
    too large for an exact k, Python's round does it."""
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = x * 1e6
        out = np.rint(scaled) / 1e6
        near = ~(np.abs(scaled - np.floor(scaled) - 0.5) > 1e-6 + np.abs(scaled) * 1e-15)
        near |= ~(np.abs(scaled) < 2.0**52)
        near &= ~np.isnan(x)  # NaN stays NaN (a column an older daemon did not publish)
    for i in np.flatnonzero(near).tolist():
        out[i] = round(float(x[i]), 6)
    return out


def _pct(get: Callable[[ViewLnode], float | None]) -> tuple[Callable, Callable]:
    """A percentage's cell text and JSON value: "-" and None for None (or NaN)."""

    def text(v: ViewLnode) -> str:
        x = get(v)
        return "-" if x is None or x != x else f"{100 * x:.2f}"

    def value(v: ViewLnode) -> float | None:
        x = get(v)
        return None if x is None or x != x else round(100 * x, 6)

    return text, value


def _col_pct(
    heading: str, key: str, get: Callable[[ViewLnode], float | None], paren: str | None = None
) -> Column:
    text, value = _pct(get)
    return Column(heading, key, text, value, paren=paren)


def _attr_pct(heading: str, key: str, attr: str, paren: str | None = None) -> Column:
    text, value = _pct(operator.attrgetter(attr))
    return Column(heading, key, text, value, True, attr, "{:.2f}", pct=True, paren=paren)


#: The mark of an e_share that is what the lnode would get if it alone started (it
#: wants no CPU): its cell is in parentheses (report.lnodes.ViewLnode.eshr_if_started).
IF_STARTED = "eshr_if_started"


def _shown_band(consts: Consts) -> tuple[float, float]:
    """(floor, limit): the band in force that -dl shows, in multiples of each demanding
    lnode's due share (fairshare.core.cycle.limshare_band): due / maxushare to maxushare
    x due with LIMSHARE, 0 to K5 x due without."""
    from fairshare.core.cycle import limshare_band

    return limshare_band(consts)


def _limshare_cells(consts: Consts) -> tuple[Callable, Callable, Callable]:
    """-dl's per-lnode cells, the band worked out once: its floor and its limit as
    fractions of the machine (None for an lnode that demands nothing), and "max" or
    "min" when the cycle holds the lnode at its limit or floor, else ""."""
    floor, limit = _shown_band(consts)

    def lowest(v: ViewLnode) -> float | None:
        return None if v.due is None else floor * v.due

    def highest(v: ViewLnode) -> float | None:
        return None if v.due is None else limit * v.due

    def at_bound(v: ViewLnode) -> str:
        if v.due is None or not v.due > 0:
            return ""
        if v.e_share >= limit * v.due * (1 - 1e-9):
            return "max"
        if floor > 0 and v.e_share <= floor * v.due * (1 + 1e-9):
            return "min"
        return ""

    return lowest, highest, at_bound


def _name_col() -> Column:
    return Column("Name", "name", lambda v: v.name, lambda v: v.name, right=False)


def display_columns(display: str, consts: Consts) -> list[Column]:
    """The columns of the per-lnode displays "monitor", "adjgroup" and "limshare"."""
    if display == "monitor":
        return [
            _name_col(),
            _attr_pct("Rate%", "rate_pct", "rate_share"),
            _attr_pct("Eshr%", "eshr_pct", "e_share", paren=IF_STARTED),
            _attr_pct("Rshr%", "rshr_pct", "m_share"),
            _attr_pct("Got%", "got_pct", "got"),
            _attr_pct("Min%", "min_pct", "got_minute"),
            _attr_pct("Fair%", "fair_pct", "target"),
            _attr("Usage(k)", "usage", "usage", "{:.0f}", lambda u: u / 1000),
            _attr("Rate", "rate", "rate", "{:.2f}"),
            _attr("Muse", "muse", "muse", "{:.0f}"),
            _attr("Ref", "ref", "refs", "{}"),
            _attr("Chld", "chld", "children", "{}"),
            Column(
                "Flags",
                "flags",
                lambda v: octal(v.flags),
                lambda v: octal(v.flags),
                attr="flags",
                fmt="{:o}",
            ),  # fmt: skip
        ]
    if display == "adjgroup":
        return [
            _name_col(),
            _attr_pct("Rate%", "rate_pct", "rate_share"),
            _attr_pct("CPU%", "cpu_pct", "cpu"),
            _attr_pct("Rshr%", "rshr_pct", "m_share"),
            _attr("Nrun", "nrun", "nrun", "{}"),
            _attr("Rate", "rate", "rate", "{:.2f}"),
            _attr_pct("Proj%", "proj_pct", "proj"),
            _attr("Adj_a", "adj_a", "adj", "{:.2f}"),
            _attr_pct("New%", "new_pct", "e_share", paren=IF_STARTED),
            _attr_pct("Pri%", "pri_pct", "pri"),
        ]
    if display == "limshare":
        lowest, highest, at_bound = _limshare_cells(consts)
        return [
            _name_col(),
            _col_pct("Rshr%", "rshr_pct", lambda v: v.m_share),
            _col_pct("Due%", "due_pct", lambda v: v.due),
            _col_pct("Eshr%", "eshr_pct", lambda v: v.e_share, paren=IF_STARTED),
            _col_pct("Floor%", "floor_pct", lowest),
            _col_pct("Limit%", "limit_pct", highest),
            Column("Lim", "lim", at_bound, lambda v: at_bound(v) or None, right=False),
        ]
    raise ValueError(display)


def _indented(table: Columns, shown: np.ndarray, top: int) -> np.ndarray:
    """The Name cells of rows `shown` (an array of str): indented by level from `top`,
    * for the caller's."""
    depth = np.maximum(np.asarray(table["level"])[shown] - top, 0)
    mark = np.asarray(table["own"])[shown].astype(np.int64)
    prefixes = np.array(
        ["  " * d + m for d in range(int(depth.max(initial=0)) + 1) for m in ("", "*")]
    )
    names = np.array(table["name"], dtype=str)[shown]
    return np.strings.add(prefixes[2 * depth + mark], names)


# -- -ds and -dn -------------------------------------------------------------------------


def statistics_lines(st: Statistics) -> list[str]:
    """The -ds display's lines."""
    head = columns(
        [["", "", "", "High", "Max"]],
        [
            [
                f"Active id's: {st.active_ids}/{st.total_ids}",
                "",
                "Usage:",
                f"{st.usage_high:.4e}",
                f"{st.usage_max:.4e}",
            ],
            [
                f"Active groups: {st.active_groups}",
                "",
                "Share_pri:",
                f"{st.priority_high:.4e}",
                f"{st.priority_max:.4e}",
            ],
        ],
        [False, False, False, True, True],
    )
    mix = [
        [
            "Charge:",
            *("-" if st.charge is None else f"{100 * st.charge[r]:.0f}%" for r in st.resources),
        ],
        ["Costs:", *(f"{st.costs[r]:g}" for r in st.resources)],
        [
            "Counts:",
            *("-" if st.counts is None else f"{st.counts.get(r, 0):.0f}" for r in st.resources),
        ],
    ]
    lines = head + columns([["", *st.resources]], mix, [False] + [True] * len(st.resources))
    if st.counts is None:
        lines.append("(the daemon that published this table does not publish counts)")
    return lines


def nice_note(consts: Consts) -> str:
    """The -dn line saying what of the table Linux applies."""
    lo, hi = consts.nice_decay
    return (
        f"-D {lo:g},{hi:g}: Linux ignores the NiceD decay (CFS has no priority decay; it "
        "weighs nice by the kernel's fixed Weight).  Ticks grade the charges, except under "
        "the nice enforcer, which sets the nice values itself."
    )


def nice_lines(rows: Sequence[NiceRow]) -> list[str]:
    """The -dn display's lines."""
    return columns(
        [
            ["", "", "NiceD", "Nice", "Nice", "Nice", ""],
            ["N", "Nice", "Decay", "1/2life", "Rates", "Ticks", "Weight"],
        ],
        [
            [
                str(r.n),
                str(r.nice),
                f"{r.decay:.4f}",
                "-" if r.halflife is None else f"{r.halflife:.3f}",
                f"{r.rate:.6f}",
                str(r.ticks),
                str(r.weight),
            ]
            for r in rows
        ],
        [True] * 7,
    )


# -- -dg ---------------------------------------------------------------------------------


def bar(rate_share: float, m_share: float, width: int = BAR_WIDTH) -> str:
    """Figure 6's bar: `#` for the rate share (rounded, at least one when it is not 0),
    `I` in the column where the allocated share ends, `width` characters for 100%."""
    n = int(rate_share * width + 0.5)
    if rate_share > 0:
        n = max(n, 1)
    i = min(int(m_share * width + 1e-9), width)
    cells = ["#" if k < n else " " for k in range(max(n, i + 1))]
    cells[i] = "I"
    return "".join(cells).rstrip()


def graph_lines(shown: Sequence[ViewLnode], top: int, total_leaves: int) -> list[str]:
    """The -dg display's lines: one per group of `shown`, then the total."""
    groups = [v for v in shown if v.is_group]
    body = [
        [
            "  " * max(v.level - top, 0) + v.name,
            str(v.leaves),
            f"{100 * v.rate_share:.1f}",
            bar(v.rate_share, v.m_share),
        ]
        for v in groups
    ]
    body.append(["Total =>", str(total_leaves), "", ""])
    return columns([["Group", "No.", "%Rate", ""]], body, [False, True, True, False])


# -- whole displays ----------------------------------------------------------------------


def header_lines(snap: Snapshot, req: ViewRequest, when: Callable[[float], str]) -> list[str]:
    """The two header lines every display starts with (the guide's)."""
    return [
        f"Shrview: sampling over {snap.delta:g} seconds starting at "
        f"{when(snap.time - snap.delta)} (host {snap.host}, cycle {snap.cycle}, "
        f"{snap.enforcer} enforcer)",
        f"SHRVIEW Type:{req.display} Select:{_select_label(req.select)} Sort_opt:{req.sort}",
    ]


def legend_lines(display: str) -> list[str]:
    """The lines that say, above the table of display -dm, -da or -dl, what its columns
    of received CPU and fair target are and what an effective share in parentheses
    means."""
    eshr = "New%" if display == "adjgroup" else "Eshr%"
    marked = f"({eshr}): it wants no CPU; the share it would get if it alone started"
    if display != "monitor":
        return [marked]
    return [
        "Got%: the CPU it received over the last cycle, Min%: over the last minute; "
        "Fair%: its fair target",
        marked,
    ]


def _select_label(select_: str) -> str:
    return {"groups": "only groups", "users": "only users"}.get(select_, select_)


def limshare_line(c: Consts) -> str:
    """-dl's line above the table: the limit in force and the band it keeps Eshr in."""
    if c.has(LIMSHARE):
        return (
            f"LIMSHARE on, maxushare = {c.maxushare:g}: Eshr kept between Due/"
            f"{c.maxushare:g} and Due x {c.maxushare:g} (maxushare is the ceiling; "
            f"K5 = {c.k5:g} not in force)"
        )
    return (
        f"LIMSHARE off: Eshr kept at most Due x {c.k5:g} (Kay-Lauder's edge effects, "
        f"K5 = {c.k5:g}; maxushare = {c.maxushare:g} not in force)"
    )


def display_lines(snap: Snapshot, req: ViewRequest, when: Callable[[float], str]) -> list[str]:
    """The lines of display `req.display` of `snap`; `when(epoch)` formats times."""
    lines = header_lines(snap, req, when) + [""]
    if req.display == "nice tables":
        from fairshare.report.nice import nice_table

        return lines + [nice_note(snap.consts)] + nice_lines(nice_table(snap.consts))
    table, shown, top = prepare(snap, req)
    if req.display == "statistics":
        return lines + statistics_lines(statistics(snap, rows_of(table), req.total_ids))
    if req.display == "graph":
        leaves = int((~table["group"]).sum())
        return lines + graph_lines(rows_of(table, shown), top, leaves)
    if req.display == "limshare":
        c = snap.consts
        lines += [limshare_line(c)]
    lines += legend_lines(req.display)
    cols = display_columns(req.display, snap.consts)
    names = _indented(table, shown, top)
    fixed = _fixed_lines(cols, names, table, shown)
    if fixed is not None:
        return lines + fixed
    # Column by column (one map per column), then rows: cheaper than a call per cell.
    views = rows_of(table, shown)
    cells = [names.tolist(), *(column_texts(c, views) for c in cols[1:])]
    rows = list(zip(*cells, strict=True))
    head = [column_heading(c, table, shown) for c in cols]
    return lines + columns([head], rows, [c.right for c in cols])


def snapshot_json(snap: Snapshot | None) -> dict:
    """Where and when a published table comes from, as every JSON document starts
    (host, cycle, time in epoch seconds, running, age in seconds; None when nothing
    was published)."""
    if snap is None:
        return {"host": None, "cycle": None, "time": None, "running": False, "age": None}
    return {
        "host": snap.host,
        "cycle": snap.cycle,
        "time": snap.time,
        "running": snap.running,
        "age": snap.age,
    }


def display_json(snap: Snapshot, req: ViewRequest) -> dict:
    """The JSON document of display `req.display` of `snap` (shape in shrview(1))."""
    doc = {
        **snapshot_json(snap),
        "display": req.display,
        "select": req.select,
        "sort": req.sort,
        "lnodes": [],
    }
    if req.display == "nice tables":
        doc["nice"] = _nice_json(snap.consts)
        return doc
    table, shown, _top = prepare(snap, req)
    if req.display == "statistics":
        doc["statistics"] = _statistics_json(statistics(snap, rows_of(table), req.total_ids))
        return doc
    if req.display == "graph":
        doc["lnodes"] = _graph_json(table, shown)
        doc["total"] = int((~table["group"]).sum())
        return doc
    if req.display == "limshare":
        doc["limshare"] = snap.consts.has(LIMSHARE)
        doc["maxushare"] = snap.consts.maxushare
        doc["k5"] = snap.consts.k5
        floor, limit = _shown_band(snap.consts)
        doc["band"] = {"floor": floor, "limit": limit}
    doc["lnodes"] = _lnode_records(req.display, snap.consts, table, shown)
    return doc


def parsable_lines(doc: dict) -> list[str]:
    """A tabular display's JSON document (`display_json`) as sshare -P prints its rows:
    a heading of the lnode records' keys, then one line an lnode, fields separated by
    ``|`` (None as nothing, floats exactly)."""
    records = doc["lnodes"]
    if not records:
        return []
    if isinstance(records[0], dict):  # the graph display's
        keys, get = list(records[0]), dict.get
    else:
        keys, get = [f.name for f in dataclasses.fields(records[0])], getattr
    lines = ["|".join(keys)]
    for r in records:
        lines.append("|".join(_plain(get(r, k)) for k in keys))
    return lines


def _plain(value) -> str:
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def _nice_json(consts: Consts) -> list[dict]:
    """The nice tables' rows (-dn) as JSON records."""
    from fairshare.report.nice import nice_table

    return [
        {
            "n": r.n,
            "nice": r.nice,
            "niced": r.decay,
            "halflife": r.halflife,
            "rate": r.rate,
            "ticks": r.ticks,
            "weight": r.weight,
        }
        for r in nice_table(consts)
    ]


def _statistics_json(st: Statistics) -> dict:
    """The statistics (-ds) as a JSON object (the charges in percent)."""
    return {
        "active_ids": st.active_ids,
        "total_ids": st.total_ids,
        "active_groups": st.active_groups,
        "usage_high": st.usage_high,
        "usage_max": st.usage_max,
        "priority_high": st.priority_high,
        "priority_max": st.priority_max,
        "charge_pct": (
            None if st.charge is None else {r: round(100 * x, 6) for r, x in st.charge.items()}
        ),
        "costs": st.costs,
        "counts": st.counts,
    }


def _graph_json(table: Columns, shown: np.ndarray) -> list[dict]:
    """The graph display's (-dg) groups among the `shown` rows as JSON records."""
    return [
        {
            "name": v.name,
            "level": v.level,
            "no": v.leaves,
            "rate_pct": round(100 * v.rate_share, 6),
            "rshr_pct": round(100 * v.m_share, 6),
            "bar": bar(v.rate_share, v.m_share),
        }
        for v in rows_of(table, shown)
        if v.is_group
    ]


def _lnode_records(display: str, consts: Consts, table: Columns, shown: np.ndarray) -> list:
    """The `shown` lnodes of a tabular display as records with its columns' keys.

    Column by column, then one record per lnode: an instance of a dataclass whose
    fields are this display's keys, in the documented order, which orjson writes as
    that object.  Instances share their keys: 100,000 take a third less memory than
    dicts, and a fifth less time to build and write (keys are our own columns' names:
    identifiers).
    """
    cols = display_columns(display, consts)
    views: list[ViewLnode] = []
    keys = ["name", "level", "uid", "kind", "own"]
    values = [_picked(table[k], shown) for k in keys]
    for c in cols[1:]:
        keys.append(c.key)
        if c.attr is None:  # a cell function: rows
            views = views or rows_of(table, shown)
            values.append(list(map(c.value, views)))
        else:
            values.append(column_values(c, table, shown))
        if c.paren is not None:
            keys.append(c.paren)
            values.append(_picked(table[c.paren], shown))
    if display == "monitor":  # what the guide's Flags have no bit for
        keys += ["demand", "background"]
        values += [_picked(table["demand"], shown), _picked(table["background"], shown)]
    return list(map(make_dataclass("Lnode", keys), *values))


def _picked(column: np.ndarray | list, rows: np.ndarray) -> list:
    """The values of `column` (an array, or a list of str) at `rows`, as Python values."""
    if isinstance(column, list):
        return [column[i] for i in rows.tolist()]
    return np.asarray(column)[rows].tolist()


def local_time(epoch: float) -> str:
    """`epoch` as local time in the guide's manner, e.g. "Tue Jul 25 12:27:33 1995 UTC"."""
    return datetime.fromtimestamp(epoch).astimezone().strftime("%a %b %d %H:%M:%S %Y %Z")
