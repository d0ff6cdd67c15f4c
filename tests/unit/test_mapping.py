"""Enforcer weight mappings: e_share to cgroup weights and nice values; an lnode's
cgroup name (safe_name)."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fairshare.enforce.base import safe_name
from fairshare.enforce.mapping import (
    GROUP_PREFIX,
    NICE_TO_WEIGHT,
    cgroup1_shares,
    cgroup2_weights,
    nice_values,
)
from udb.fields import NAME_RE


def test_nice_table_is_the_kernels():
    assert len(NICE_TO_WEIGHT) == 40
    assert NICE_TO_WEIGHT[20] == 1024  # nice 0
    assert NICE_TO_WEIGHT[0] == 88761 and NICE_TO_WEIGHT[39] == 15
    steps = NICE_TO_WEIGHT[:-1] / NICE_TO_WEIGHT[1:]
    assert np.all((steps >= 1.19) & (steps <= 1.3))  # about 1.25 per step (18/15 = 1.2)


def test_cgroup2_weights_proportional_largest_10000():
    w = cgroup2_weights([0.5, 0.25, 0.1, 0.15], [False, False, False, False])
    assert w.tolist() == [10000, 5000, 2000, 3000]


def test_cgroup2_background_and_zero_get_minimum():
    w = cgroup2_weights([0.5, 0.0, 0.9], [False, False, True])
    assert w.tolist() == [10000, 1, 1]
    assert cgroup2_weights([0.0, 0.0], [False, False]).tolist() == [1, 1]
    # a share 20000 times smaller than the largest still gets weight 1, never 0
    assert cgroup2_weights([1.0, 5e-5], [False, False]).tolist() == [10000, 1]


def test_cgroup1_shares():
    s = cgroup1_shares([0.5, 0.25, 0.1], [False, False, False])
    assert s.tolist() == [262144, 131072, 52429]  # 0.2 x 262144 = 52428.8
    assert cgroup1_shares([0.5, 0.5], [False, True]).tolist() == [262144, 2]


def test_nice_values_scenario_one_by_hand():
    # Equal e_share, 2 vs 8 runnable processes: the second user's processes should each
    # weigh 1/4 of the first's.  ln 4 = 1.386; nice 6 weighs 1024/272 = 3.76 (ln 1.326),
    # nice 7 1024/215 = 4.76 (ln 1.561): nice 6 is nearer.
    assert nice_values([0.5, 0.5], [2, 8], [False, False]).tolist() == [0, 6]


def test_nice_values_background_and_zero_share_get_19():
    assert nice_values([0.5, 0.3, 0.0], [1, 1, 1], [False, True, False]).tolist() == [0, 19, 19]
    # nrun 0 counts as one process
    assert nice_values([0.5, 0.5], [0, 1], [False, False]).tolist() == [0, 0]


def test_nice_values_clip_at_19():
    assert nice_values([1.0, 1e-6], [1, 1], [False, False]).tolist() == [0, 19]


@settings(deadline=None)
@given(
    st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=30),
    st.lists(st.integers(0, 50), min_size=30, max_size=30),
)
def test_nice_monotone_in_per_process_share(shares, nrun):
    e = np.array(shares)
    n = np.array(nrun[: len(e)])
    nice = nice_values(e, n, np.zeros(len(e), dtype=bool))
    per = e / np.maximum(n, 1)
    order = np.argsort(-per, kind="stable")
    assert np.all(np.diff(nice[order]) >= 0)
    assert nice.min() == 0 and nice.max() <= 19


@settings(deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=50))
def test_cgroup2_weights_range_and_order(shares):
    e = np.array(shares)
    w = cgroup2_weights(e, np.zeros(len(e), dtype=bool))
    assert w.min() >= 1 and w.max() <= 10000
    order = np.argsort(e, kind="stable")
    assert np.all(np.diff(w[order]) >= 0)


def test_weights_ignore_nonsense_shares():
    assert cgroup2_weights([np.nan, 0.5, np.inf, -1.0], [False] * 4).tolist() == [1, 10000, 1, 1]
    assert cgroup1_shares([np.nan], [False]).tolist() == [2]


def test_cgroup_path_prefixes_groups_and_keeps_the_leaf_name():
    from fairshare.enforce.mapping import cgroup_path

    assert cgroup_path(["Physics"], "u1") == ("+Physics", "u1")
    assert cgroup_path([], "a b") == ("a_20b",)  # safe_name, as a flat lnode always had
    # A group and an lnode of the same name at one level never clash.
    assert cgroup_path(["X"], "X") == ("+X", "X")


def test_cgroup_path_collapses_levels_past_the_limit():
    from fairshare.enforce.mapping import MAX_GROUP_LEVELS, cgroup_path

    deep = [f"g{i}" for i in range(MAX_GROUP_LEVELS + 3)]
    path = cgroup_path(deep, "u")
    assert path == (*[f"+g{i}" for i in range(MAX_GROUP_LEVELS)], "u")


def test_cgroup_tree_weights_among_siblings():
    from fairshare.enforce.mapping import CgroupTree, cgroup1_tree_shares, cgroup2_tree_weights

    t = CgroupTree.of([("+P", "u1"), ("+P", "u2"), ("+C", "u3"), ("+C", "u4"), ("solo",)])
    assert t.keys == [(), ("+C",), ("+P",), ("solo",), ("+C", "u3"), ("+C", "u4")] + [
        ("+P", "u1"),
        ("+P", "u2"),
    ]
    assert t.index.leaf.tolist() == [False, False, False, True, True, True, True, True]
    e = [1.0, 0.4, 0.4, 0.2, 0.3, 0.1, 0.2, 0.2]
    bg = [False] * 7 + [True]
    assert cgroup2_tree_weights(t, e, bg).tolist() == [
        10000, 10000, 10000, 5000, 10000, 3333, 10000, 1,
    ]  # fmt: skip
    assert cgroup1_tree_shares(t, e, bg)[[1, 3, 7]].tolist() == [262144, 131072, 2]


def test_sibling_weights_flat_is_the_flat_mapping():
    from fairshare.enforce.mapping import sibling_weights

    e, bg = [0.5, 0.25, 0.1, 0.15, np.nan], [False] * 5
    flat = cgroup2_weights(e, bg)
    assert sibling_weights(np.zeros(5), e, bg, 1, 10000).tolist() == flat.tolist()


# -- safe_name: an lnode's cgroup directory name ------------------------------------------------


def read_back(safe: str) -> str:
    """The name `safe` stands for, by safe_name's rule: ``_`` and two lower-case hex
    digits is a byte of the name's UTF-8, anything else is itself."""
    out, i = bytearray(), 0
    while i < len(safe):
        if safe[i] == "_" and re.fullmatch("[0-9a-f]{2}", safe[i + 1 : i + 3]):
            out.append(int(safe[i + 1 : i + 3], 16))
            i += 3
        else:
            out += safe[i].encode()
            i += 1
    return out.decode("utf-8", "surrogatepass")


def test_safe_name_keeps_plain_names_and_tells_apart_names_it_used_to_merge():
    plain = ["u1", "john_doe", "a_b", "a.b@c-d", "_x", "x_", "Proj1A", "...", "-"]
    assert [safe_name(n) for n in plain] == plain  # their cgroups keep their directory
    # Guard: "a$b", "a+b" and "a_b" are three valid UDB users; all three were "a_b".
    assert [safe_name(n) for n in ("a$b", "a+b", "a_b")] == ["a_24b", "a_2bb", "a_b"]
    assert safe_name("x_24") == "x_5f24"  # an _ that would read as an escape is one
    assert safe_name(".") == "_2e" and safe_name("..") == "_2e_2e"
    assert safe_name("a/b c") == "a_2fb_20c" and safe_name("é") == "_c3_a9"


#: Names the UDB accepts (udb.fields.NAME_RE: "$" and "+" among them), any text, and
#: short names over the characters an escape is made of, where collisions would hide.
NAMES = (
    st.from_regex(NAME_RE, fullmatch=True)
    | st.text(min_size=1, max_size=21)
    | st.text(alphabet="_$+./5f2e\x00é", min_size=1, max_size=6)
)


@given(st.lists(NAMES, min_size=2, max_size=30, unique=True))
def test_distinct_names_get_distinct_safe_names(names):
    assert len({safe_name(n) for n in names}) == len(names)


@given(NAMES)
def test_a_safe_name_is_one_path_component_that_reads_back_as_the_name(name):
    safe = safe_name(name)
    assert read_back(safe) == name
    assert re.fullmatch(r"[A-Za-z0-9_.@-]+", safe) and safe not in (".", "..")
    assert GROUP_PREFIX not in safe and len(safe.encode()) <= 255  # NAME_MAX
