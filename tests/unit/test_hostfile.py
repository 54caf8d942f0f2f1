"""Host files and --hosts lists: a table of what parses, and one-line errors for what does not."""
from __future__ import annotations

import pytest

from tfdist.errors import UsageError
from tfdist.cluster.hostfile import HostEntry, parse_hostfile, parse_hosts_flag, select_hosts

GOOD_FILES = [
    ("a\nb\n", [HostEntry("a"), HostEntry("b")]),
    ("# comment\n\ngpu-a slots=2  # two GPUs\n  me@gpu-b   slots=4\n", [HostEntry("gpu-a", 2), HostEntry("me@gpu-b", 4)]),
    ("10.0.0.7 slots=1\n", [HostEntry("10.0.0.7", 1)]),
    ("node1.example.internal\n", [HostEntry("node1.example.internal")]),
    # roles= pins a machine (tfdist.cluster.placement), in any order with slots=.
    ("a slots=2\nb roles=ps slots=2\nc slots=1 roles=chief,evaluator\n",
     [HostEntry("a", 2), HostEntry("b", 2, ("ps",)), HostEntry("c", 1, ("chief", "evaluator"))]),
]

BAD_FILES = [
    ("", "no hosts"),
    ("# only a comment\n", "no hosts"),
    ("a slots=0\n", "line 1: slots '0'"),
    ("a slots=x\n", "line 1: slots 'x'"),
    ("a\nb slots=2 slots=3\n", "line 2: slots given twice"),
    ("a gpus=2\n", "line 1: unknown setting 'gpus=2'"),
    ("a slots\n", "line 1: unknown setting 'slots'"),
    ("a;reboot\n", "line 1 holds 'a;reboot', which is not a host name"),
    ("$(id)\n", "is not a host name"),
    ("a\nb\na slots=2\n", "host a is listed twice"),
    ("-oProxyCommand=x\n", "is not a host name"),
    ("a\nb roles=boss\n", "hosts.txt line 2: roles='boss' is not a list of roles"),
    ("a roles=ps,\n", "hosts.txt line 1: roles='ps,'"),
    ("a roles=ps;id\n", "hosts.txt line 1: roles='ps;id'"),
    ("a roles=PS\n", "hosts.txt line 1: roles='PS'"),
    ("a roles=ps,ps\n", "hosts.txt line 1: roles='ps,ps'"),
    ("a roles=\n", "hosts.txt line 1: roles=''"),
    ("a roles=ps roles=chief\n", "line 1: roles given twice"),
]


@pytest.mark.parametrize("text, expected", GOOD_FILES)
def test_host_files_parse(text, expected):
    assert parse_hostfile(text) == expected


@pytest.mark.parametrize("text, message", BAD_FILES)
def test_bad_host_files_name_the_line(text, message):
    with pytest.raises(UsageError) as caught:
        parse_hostfile(text, "hosts.txt")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("text, expected", [
    ("a,b:2", [HostEntry("a"), HostEntry("b", 2)]),
    ("u@a:3", [HostEntry("u@a", 3)]),
    ("198.18.0.1,198.18.0.2", [HostEntry("198.18.0.1"), HostEntry("198.18.0.2")]),
])
def test_hosts_flag(text, expected):
    assert parse_hosts_flag(text) == expected


@pytest.mark.parametrize("text, message", [
    ("a,,b", "empty entry"), ("a:0", "slots '0'"), ("a:2:3", "slots '2:3'"), ("a,a:2", "listed twice"),
    ("a b", "not a host name"),
])
def test_bad_hosts_flag(text, message):
    with pytest.raises(UsageError, match=message):
        parse_hosts_flag(text)


HOSTS = [HostEntry("a"), HostEntry("u@b", 2), HostEntry("c")]


@pytest.mark.parametrize("include, exclude, names", [
    (None, None, ["a", "b", "c"]),
    ("c,a", None, ["a", "c"]),  # the file's order, not the flag's
    (None, "b", ["a", "c"]),
    ("a,b", "a", ["b"]),
])
def test_include_exclude(include, exclude, names):
    assert [e.name for e in select_hosts(HOSTS, include, exclude)] == names


@pytest.mark.parametrize("include, exclude, message", [
    ("x", None, "--include: x is not in the host list"),
    (None, "a,x", "--exclude: x is not in the host list"),
    ("a", "a", "leave no host"),
])
def test_include_exclude_errors(include, exclude, message):
    with pytest.raises(UsageError, match=message):
        select_hosts(HOSTS, include, exclude)
