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
