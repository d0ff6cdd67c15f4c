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

import sys

import click
import orjson

# Keys that are not strings are refused (a TypeError): allowing them doubles the time
# of a 100,000-lnode document, and no document has them.
_COMPACT = orjson.OPT_SERIALIZE_NUMPY
_INDENTED = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2


def dumps(doc: object, *, indent: bool = False, newline: bool = False) -> bytes:
    """`doc` as JSON text (UTF-8 bytes); `indent` for two-space layout; `newline` to end
    it with one (orjson writes it: adding it after would copy the text, 55 MB for
    shrtree -l --json at 100,000 users)."""
    option = _INDENTED if indent else _COMPACT
    return orjson.dumps(doc, option=option | orjson.OPT_APPEND_NEWLINE if newline else option)


def echo_json(doc: object, *, indent: bool = False) -> None:
    """Print `doc` as one JSON document and a newline on standard output.

    A compact document (a dict) whose lists run to 100,000 items (shrtree -l, shrview)
    goes out in pieces of `PIECE` items, as `dumps` would spell it whole: a pager
    shows its start at once, and the process never holds all of its text (55 MB for
    shrtree -l --json at 100,000 users)."""
    if indent or not isinstance(doc, dict) or not any(_long(v) for v in doc.values()):
        click.echo(dumps(doc, indent=indent, newline=True), nl=False)
        return
    sys.stdout.flush()  # what went out as text before
    out = sys.stdout.buffer  # the bytes under it, where click.echo writes bytes
    for k, (key, value) in enumerate(doc.items()):
        out.write(b"{" if k == 0 else b",")
        out.write(dumps(key))
        if _long(value):
            out.write(b":[")
            for i in range(0, len(value), PIECE):
                text = dumps(value[i : i + PIECE])
                if i:
                    out.write(b",")
                out.write(memoryview(text)[1:-1])  # the items, without the brackets
            out.write(b"]")
        else:
            out.write(b":")
            out.write(dumps(value))
    out.write(b"}\n")
    out.flush()


#: The items of a long list that `echo_json` writes at a time.
PIECE = 10_000


def _long(value: object) -> bool:
    return isinstance(value, list) and len(value) > PIECE
