"""Slurm host-list and task-count expansion. Expected lists are what `scontrol show hostnames` of Slurm 22.05
printed for the same input (tests/integration/test_slurm_hostlist.py re-checks against a live scontrol)."""
from __future__ import annotations

import pytest

from tfdist.errors import UsageError
from tfdist.cluster.hostlist import expand_hostlist, expand_tasks_per_node


@pytest.mark.parametrize(("text", "hosts"), [
    ("node[9-10,12],gpu-a[01-03]", ["node9", "node10", "node12", "gpu-a01", "gpu-a02", "gpu-a03"]),
    ("r[1-2]n[01-02],x[098-100],y[7,09]",
     ["r1n01", "r1n02", "r2n01", "r2n02", "x098", "x099", "x100", "y7", "y09"]),
    ("n[9-011]", ["n9", "n10", "n11"]),  # the width is the lower bound's
    ("n[08-9]", ["n08", "n09"]),
    ("n[2,1]", ["n2", "n1"]),  # written order, not sorted
    ("n[1-3,2]", ["n1", "n2", "n3", "n2"]),  # duplicates kept
    ("a,b,a", ["a", "b", "a"]),
    ("foo", ["foo"]),
    ("n[1-2]-ib[0-1]", ["n1-ib0", "n1-ib1", "n2-ib0", "n2-ib1"]),
    ("n-[0-1]", ["n-0", "n-1"]),
    ("x[1-2],[3]", ["x1", "x2", "3"]),
    ("n[1-1]", ["n1"]),
    ("n[001-010]", [f"n{i:03d}" for i in range(1, 11)]),
])
def test_expands_like_slurm(text, hosts):
    assert expand_hostlist(text) == hosts


def test_numeric_order_is_kept_where_a_text_sort_would_cross_ranks():
    # TF's SlurmClusterResolver sorts these as text and puts node10 first.
    assert expand_hostlist("node[9-10]") == ["node9", "node10"]
    assert sorted(expand_hostlist("node[9-10]")) != expand_hostlist("node[9-10]")


@pytest.mark.parametrize("text", ["", "  ", "n[10-8]", "n[1", "n1]", "n[a]", "n[1-3]-[a]", "n[[1]]", "a,,b",
                                  "n[1-2-3]", "n[]"])
def test_malformed_lists_are_usage_errors(text):
    with pytest.raises(UsageError):
        expand_hostlist(text)


def test_absurd_ranges_are_refused_instead_of_eating_memory():
    with pytest.raises(UsageError, match="implausibly large"):
        expand_hostlist("n[0-99999999]")


@pytest.mark.parametrize(("text", "counts"), [
    ("2(x3),1", [2, 2, 2, 1]),
    ("4", [4]),
    ("1,2,3", [1, 2, 3]),
    ("8(x2)", [8, 8]),
])
def test_tasks_per_node(text, counts):
    assert expand_tasks_per_node(text) == counts


@pytest.mark.parametrize("text", ["", "2(3)", "x", "2(x)", "-1", "2(x3"])
def test_bad_tasks_per_node(text):
    with pytest.raises(UsageError):
        expand_tasks_per_node(text)
