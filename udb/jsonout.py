"""The one JSON encoder behind every command's --json (udbgen, udbsee and all of fairshare's).

A command builds its document (dicts with string keys, lists, tuples, numbers, strings,
None, numpy scalars, and dataclasses, which become the object of their fields in order)
and prints it with `echo_json`.  One library (orjson) spells every document: UTF-8 text,
floats in their shortest round-trip form (0.00001, 1e+16), and never NaN or Infinity,
which are not JSON (null).  Two layouts keep what each command has always printed:
`indent=True` (two spaces, one value a line) for the administrators' commands, the
compact one-line form for the displays that are polled (shrview, shrinfo, shrtree).

It lives in udb, the bottom layer, because udb's commands print JSON too and fairshare
imports udb, never the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence

import click
import orjson

# Keys that are not strings are refused (a TypeError): allowing them doubles the time
# of a 100,000-lnode document, and no document has them.
_COMPACT = orjson.OPT_SERIALIZE_NUMPY
_INDENTED = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2


def dumps(doc: object, *, indent: bool = False) -> bytes:
    """`doc` as JSON text (UTF-8 bytes, no trailing newline); `indent` for two-space layout."""
    return orjson.dumps(doc, option=_INDENTED if indent else _COMPACT)


def echo_json(doc: object, *, indent: bool = False) -> None:
    """Print `doc` as one JSON document and a newline on standard output."""
    click.echo(dumps(doc, indent=indent))


def rows_json(keys: Sequence[str], columns: Sequence[Sequence]) -> orjson.Fragment:
    """The JSON array of one object per row, `{keys[j]: columns[j][i], ...}`, as a piece
    of a document (`dumps` writes it as it is): the same text as a list of dicts, built
    column by column (100,000 dicts took 0.25 s to build and write; this, one join).
    `columns` are lists of equal length."""
    n = len(columns[0]) if columns else 0
    if not n:
        return orjson.Fragment(b"[]")
    width = 2 * len(keys)
    written = [_values(column) for column in columns]
    quote = [b'"' if quoted else b"" for _values_, quoted in written]
    parts: list[bytes] = [b""] * (n * width)
    for j, (key, (values, _quoted)) in enumerate(zip(keys, written, strict=True)):
        name = orjson.dumps(key) + b":" + quote[j]
        if j == 0:  # each row's "{", after the previous row's "}"
            parts[0::width] = [b"[{" + name] + [quote[-1] + b"},{" + name] * (n - 1)
        else:
            parts[2 * j :: width] = [quote[j - 1] + b"," + name] * n
        parts[2 * j + 1 :: width] = values
    parts.append(quote[-1] + b"}]")
    # Joined in pieces: bytes.join takes 80 bytes of bookkeeping per part (0.26 GB for
    # 3.3 million parts at once).
    step = width * 4096
    return orjson.Fragment(
        b"".join([b"".join(parts[i : i + step]) for i in range(0, len(parts), step)])
    )


def _values(column: Sequence) -> tuple[list[bytes], bool]:
    """Each value of `column` as JSON text, and whether they are strings without their
    quotes.  One array is written and split: at its commas where no value is a string,
    array or object; at `","` where every value is a string (a quote inside a string is
    always escaped, so that is where one ends and the next begins); else value by value."""
    text = orjson.dumps(column, option=_COMPACT)
    inner = text[1:-1]
    if b'"' not in inner and b"[" not in inner and b"{" not in inner:  # numbers, true, null
        return inner.split(b","), False
    if all(type(v) is str for v in column):
        return inner[1:-1].split(b'","'), True
    # bytes(): orjson's own buffer for one small value is 4 KiB.
    return [bytes(orjson.dumps(v, option=_COMPACT)) for v in column], False
