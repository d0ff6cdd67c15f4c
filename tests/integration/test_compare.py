"""shrsim --compare: one scenario under every policy named, side by side.

The registry is what --compare reads, so besides unicos the tests register `flatunicos`
(the unicos cycle with ADJGROUPS cleared: Kay-Lauder's flat model), which delivers
a different, known result on scenario 05 (Table I): B2 50% under unicos with ADJGROUPS,
its fair (max-min) share, and 0.05 / 0.55 = 9.1% flat."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from fairshare.cli.shrsim import main as shrsim
from fairshare.core import consts as consts_module
from fairshare.core import policies
from fairshare.core.consts import ADJGROUPS

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
TABLE_ONE = str(SCENARIOS / "05_table_one.toml")
PP = 0.01


class FlatUnicos:
    """The unicos cycle with ADJGROUPS cleared, whatever the constants say."""

    name = "flatunicos"
    seen: list[str] = []

    def cycle(self, tree, table, consumption, consts, elapsed):
        FlatUnicos.seen.append(consts.policy)
        flat = consts.replace(flags=consts.flags & ~ADJGROUPS)
        return policies.DEFAULT_POLICY.cycle(tree, table, consumption, flat, elapsed)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(policies.POLICIES, "flatunicos", FlatUnicos())
    monkeypatch.setitem(consts_module.CHOICES, "policy", (*policies.POLICIES,))
    FlatUnicos.seen.clear()


def run(*args):
    return CliRunner().invoke(shrsim, [TABLE_ONE, *args])


def test_one_table_with_each_policys_delivered_share_and_deviation(registered):
    r = run("--compare", "unicos,FlatUnicos")
    assert r.exit_code == 0, r.output
    assert "policies unicos, flatunicos" in r.output
    lines = r.output.splitlines()
    at = next(i for i, line in enumerate(lines) if "Entitled" in line)
    # the units on a second header line, so that three policies fit 80 columns
    assert lines[at].split() == ["Entitled", "Fair", "unicos", "dev", "flatunicos", "dev"]
    assert lines[at + 1].split() == ["Name", "%", "%", "%", "pp", "%", "pp"]
    cells = {
        line.split()[0]: line.split()[1:] for line in lines if line[:4] in (" A1 ", " B2 ", " B  ")
    }
    # B2: entitled 5%, fair 50% (B1 is idle: B's half is B2's); unicos (ADJGROUPS)
    # delivers it, +0 pp; flat 9.09%, -40.91 pp
    entitled, fair, u, udev, f, fdev = cells["B2"]
    assert (entitled, fair, u, udev) == ("5.00", "50.00", "50.00", "+0.00")
    assert float(f) == pytest.approx(100 * 0.05 / 0.55, abs=100 * PP)
    assert float(fdev) == pytest.approx(float(f) - 50.0, abs=0.011)
    assert cells["B"][:3] == ["50.00", "50.00", "50.00"]
    assert float(cells["B"][4]) == pytest.approx(100 * 0.05 / 0.55, abs=100 * PP)
    assert "Largest deviation from the fair share: unicos 0.00 pp, flatunicos 40.9" in r.output
    # each run had its own policy in its constants; the scenario file names none
    assert set(FlatUnicos.seen) == {"flatunicos"}


def test_json_nests_each_policys_document_under_its_name(registered):
    r = run("--compare", "flatunicos,unicos", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert list(doc) == ["flatunicos", "unicos"]
    single = json.loads(run("--json").stdout)
    assert doc["unicos"] == single  # the usual document, unchanged
    flat = doc["flatunicos"]["lnodes"]["B2"]
    assert flat["entitled"] == pytest.approx(0.05) and flat["fair"] == pytest.approx(0.5)
    assert flat["delivered"] == pytest.approx(0.05 / 0.55, abs=PP)
    assert flat["deviation_pp"] == pytest.approx(100 * (flat["delivered"] - 0.5))


def png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def test_plot_draws_one_row_of_panels_per_policy(registered, tmp_path):
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    assert run("--compare", "unicos", "--plot", str(one)).exit_code == 0
    r = run("--compare", "unicos,flatunicos", "--plot", str(two))
    assert r.exit_code == 0, r.output
    # 3.5 inches of figure per row plus one, at 100 dpi; Table I has groups, so each row
    # has a panel of lnodes and one of groups, 8 inches each plus 2
    assert png_size(one) == (1800, 450) and png_size(two) == (1800, 800)


def test_plot_without_groups_is_one_column(tmp_path):
    one = tmp_path / "one.png"
    flat = str(SCENARIOS / "01_equal_shares.toml")
    r = CliRunner().invoke(shrsim, [flat, "--compare", "unicos", "--plot", str(one)])
    assert r.exit_code == 0, r.output
    assert png_size(one) == (1000, 450)


@pytest.mark.parametrize(
    "value,message",
    [
        ("lottery", "--compare: expected policy names among unicos"),
        ("unicos,lottery", "got 'lottery'"),
        (" , ", "--compare: expected policy names among unicos"),
        ("unicos,UNICOS", "--compare: policy 'unicos' named twice"),
    ],
)
def test_bad_policy_names_are_refused(value, message):
    r = run("--compare", value)
    assert r.exit_code == 2
    assert message in r.stderr and "Traceback" not in r.output


def test_every_registered_policy_compares():
    # Whatever policies main registers (unicos, feedback, slurm ...): one document each,
    # over the same lnodes and groups, every share delivered to someone.
    names = list(policies.POLICIES)
    r = run("--compare", ",".join(names), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert list(doc) == names
    for name in names:
        assert set(doc[name]["lnodes"]) == {"A1", "B1", "B2"}, name
        assert set(doc[name]["groups"]) == {"A", "B"}, name
        total = sum(v["delivered"] for v in doc[name]["lnodes"].values())
        assert total == pytest.approx(1.0), name
