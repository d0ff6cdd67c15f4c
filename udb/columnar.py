"""The published lnode table in columns: one blob a display reads without a row per lnode.

Beside its rows (udb.tables.lnodes, which SQL aggregates over: the site's
GLOBALUSAGE, shrview --site), a daemon's published table is kept in its header row
(lnode_cycles.columnar) as one array per column, so that a display of 100,000 lnodes
reads one value and `numpy.frombuffer`s it instead of building 100,000 row tuples
(fetching them took 0.3 s).

The blob: 8 bytes (little-endian: where the JSON header starts), each array's bytes
at its offset (from the blob's start, 8-byte aligned), then the JSON header
(`{"version": 1, "n": rows, "text": {column: [strings]}, "arrays": [[column, dtype,
offset], ...]}`).  Text columns (name, kind) are JSON lists of strings; every other
column is a numpy array (a NULL of a nullable float column is NaN, as SQLite stores a
NaN as NULL).

`encode` and `decode` are the format; `row_columns` makes the same columns of rows
(of PublishedLnode's columns, by attribute), for a table stored before the blob existed
(the migration) and for tests.  This module knows nothing of scheduling.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import orjson

VERSION = 1
#: Columns kept as lists of strings; every other column is an array.
TEXT = ("host", "name", "kind")
#: The array type of each PublishedLnode column (floats: float64, NULL as NaN).
DTYPES = {
    "node": "<i8",
    "uid": "<i8",
    "parent": "<i8",
    "level": "<i8",
    "refs": "<i8",
    "nrun": "<i8",
    "background": "|b1",
    "demand": "|b1",
}
_HEAD = 8
_ALIGN = 8

Columns = dict[str, "np.ndarray | list[str]"]


def dtype_of(column: str) -> str:
    """The array type `column` is stored as (float64 unless DTYPES names another)."""
    return DTYPES.get(column, "<f8")


def encode(columns: Mapping[str, Sequence | np.ndarray]) -> bytes:
    """`columns` (name: the column's values, all of one length) as one blob (see above).
    A host column is not stored: the header row is keyed by it."""
    n = len(next(iter(columns.values()), ()))
    text: dict[str, list[str]] = {}
    specs, parts, at = [], [], _HEAD
    for name, values in columns.items():
        if name == "host":
            continue
        if name in TEXT:
            text[name] = list(values)
            continue
        a = np.asarray(values)
        if a.dtype == object:  # None in a nullable float column
            a = np.array([np.nan if v is None else v for v in values])
        a = a.astype(dtype_of(name), copy=False)
        specs.append([name, a.dtype.str, at])
        pad = -a.nbytes % _ALIGN
        parts += [a.tobytes(), bytes(pad)]
        at += a.nbytes + pad
    head = orjson.dumps({"version": VERSION, "n": n, "text": text, "arrays": specs})
    return b"".join([at.to_bytes(_HEAD, "little"), *parts, head])


def decode(blob: bytes) -> Columns:
    """The columns of a blob made by `encode`: text columns as lists of str, the others
    as read-only numpy arrays over the blob (no copy).  Raises ValueError for a blob
    this version cannot read."""
    head = orjson.loads(blob[int.from_bytes(blob[:_HEAD], "little") :])
    if head.get("version") != VERSION:
        raise ValueError(f"published columns of version {head.get('version')}: expected {VERSION}")
    n = head["n"]
    out: Columns = dict(head["text"])
    for name, dtype, offset in head["arrays"]:
        out[name] = np.frombuffer(blob, dtype=dtype, count=n, offset=offset)
    return out


def row_columns(rows: Iterable, names: Sequence[str]) -> Columns:
    """The columns `names` of `rows` (objects with those attributes: Core rows or
    PublishedLnode objects), as `decode` returns them (None as NaN in float columns)."""
    rows = list(rows)
    out: Columns = {}
    for name in names:
        values = [getattr(r, name) for r in rows]
        if name in TEXT:
            out[name] = values
        else:
            if dtype_of(name) == "<f8":
                values = [np.nan if v is None else v for v in values]
            out[name] = np.array(values, dtype=dtype_of(name))
    return out
