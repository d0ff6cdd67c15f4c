"""udb.jsonout: the one encoder of every command's --json."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import click
import numpy as np
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from udb.jsonout import dumps, echo_json, rows_json


@dataclass
class Point:
    name: str
    share: float


DOC = {"name": "Proj1", "shares": [500, 250], "empty": {}, "none": None, "ok": True}


def test_indented_layout_is_the_two_space_one_a_line_of_the_admin_commands():
    assert dumps(DOC, indent=True).decode() == json.dumps(DOC, indent=2)


def test_compact_layout_has_no_spaces():
    assert dumps(DOC) == b'{"name":"Proj1","shares":[500,250],"empty":{},"none":null,"ok":true}'


def test_one_spelling_utf8_short_floats_and_no_nan():
    assert dumps(["é", 1e-05, 2.5e-07, 1e16, 0.1]).decode() == '["é",0.00001,2.5e-7,1e+16,0.1]'
    assert dumps([math.nan, math.inf]) == b"[null,null]"


def test_dataclasses_and_numpy_scalars_are_written_as_values():
    assert dumps([Point("a", 0.25)]) == b'[{"name":"a","share":0.25}]'
    assert dumps([np.float64(0.5), np.int64(3), np.bool_(True)]) == b"[0.5,3,true]"


def test_echo_json_prints_one_document_and_a_newline():
    @click.command()
    def cmd():
        echo_json({"a": [1]}, indent=True)

    out = CliRunner().invoke(cmd).output
    assert out == '{\n  "a": [\n    1\n  ]\n}\n'
    assert json.loads(out) == {"a": [1]}


_CELLS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=2),
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 4).flatmap(
        lambda n: st.lists(st.lists(_CELLS, min_size=n, max_size=n), max_size=6)
    )
)
@example(rows=[['a","b', 1, None], ["\\", 2, 0.5], ['"', 3, "x"]])
def test_rows_from_columns_are_the_text_of_the_dicts(rows):
    """rows_json writes the very text of the list of one dict per row, whatever the
    values (commas and quotes in strings, nested lists, null, numbers, booleans)."""
    keys = [f"k{j}" for j in range(len(rows[0]) if rows else 0)]
    columns = [list(c) for c in zip(*rows, strict=True)] if rows else []
    dicts = [dict(zip(keys, r, strict=True)) for r in rows]
    if not keys:
        dicts = []
    got = dumps({"a": 1, "lnodes": rows_json(keys, columns), "b": [2]})
    assert got == dumps({"a": 1, "lnodes": dicts, "b": [2]})
