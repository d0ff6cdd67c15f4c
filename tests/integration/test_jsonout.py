"""udb.jsonout: the one encoder of every command's --json."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import click
import numpy as np
import pytest
from click.testing import CliRunner

from udb import jsonout
from udb.jsonout import dumps, echo_json


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


@pytest.mark.parametrize("piece", [1, 2, 3, 10_000])
def test_a_document_with_long_lists_goes_out_in_pieces_spelled_as_one(monkeypatch, piece):
    """echo_json writes a compact document's long lists a piece at a time: the text is
    the whole document's, after what was printed before it, whatever the piece size."""
    monkeypatch.setattr(jsonout, "PIECE", piece)
    doc = {
        "udb": "site",
        "nodes": [Point(f"u{k}", k / 7) for k in range(10_007)],
        "codes": [["Dp"], [], np.float64(0.5)],
        "problems": [],
        "none": None,
        "tail": list(range(piece + 1)),
    }

    @click.command()
    def cmd():
        click.echo("heading")
        echo_json(doc)
        echo_json({"next": [1] * (piece + 1)})

    out = CliRunner().invoke(cmd).stdout_bytes
    first = b"heading\n" + dumps(doc) + b"\n"
    assert out == first + dumps({"next": [1] * (piece + 1)}) + b"\n"
