"""The etcd backend's settings (--rdzv-endpoint list, --rdzv-conf key=value) and what it asks of etcd at the end. Pure."""
from __future__ import annotations

import pytest

from tfdist.errors import UsageError
from tfdist.launch.elastic.etcd.conf import parse_conf, parse_endpoints


@pytest.mark.parametrize("text, expected", [
    ("10.0.0.1", (("10.0.0.1", 2379),)),
    ("a:1,b:2,c", (("a", 1), ("b", 2), ("c", 2379))),
    ("[::1]:2379", (("::1", 2379),)),
    (" e1:2379 , e2:2379 ", (("e1", 2379), ("e2", 2379))),
])
def test_endpoint_lists(text, expected):
    assert parse_endpoints(text) == expected


@pytest.mark.parametrize("text", ["a:1,,b:2", "a:99999", "bad host:1"])
def test_bad_endpoint_lists_name_the_flag(text):
    with pytest.raises(UsageError, match="--rdzv-endpoint"):
        parse_endpoints(text)


def test_conf_defaults_and_timeout_follow_the_node_timeout():
    conf = parse_conf("e:2379", (), 3.0, {})
    assert conf.prefix == "/tfdist" and conf.timeout == 1.0 and conf.cacert is None and conf.user is None
    assert parse_conf("e", ("timeout=7", "prefix=team/a/"), 30.0, {}).timeout == 7.0
    assert parse_conf("e", ("prefix=team/a/",), 30.0, {}).prefix == "/team/a"


def test_user_password_from_a_file_or_the_environment_and_never_shown(tmp_path):
    secret_file, ca = tmp_path / "pw", tmp_path / "ca.pem"
    secret_file.write_text("hunter2\n")
    ca.write_text("not checked here\n")
    conf = parse_conf("e", (f"user=tf,password_file={secret_file}", f"cacert={ca}"), 5, {})
    assert (conf.user, conf.password, conf.cacert) == ("tf", "hunter2", str(ca))
    assert "hunter2" not in repr(conf)
    assert parse_conf("e", ("user=tf", f"cacert={ca}"), 5, {"TFDIST_RDZV_ETCD_PASSWORD": "pw"}).password == "pw"


@pytest.mark.parametrize("pairs, env, fragment", [
    (("colour=red",), {}, "expected KEY=VALUE"),
    (("cacert",), {}, "expected KEY=VALUE"),
    (("user=tf",), {}, "needs a password"),
    (("user=tf",), {"TFDIST_RDZV_ETCD_PASSWORD": "x"}, "needs cacert= (TLS)"),
    ((), {"TFDIST_RDZV_ETCD_PASSWORD": "x"}, "without --rdzv-conf user="),
    (("cert=/etc/hostname",), {}, "go together"),
    (("cert=/etc/hostname", "key=/etc/hostname"), {}, "needs cacert="),
    (("cacert=/nonexistent/ca.pem",), {}, "cacert=/nonexistent/ca.pem"),
    (("password_file=/nonexistent/pw", "user=a"), {}, "password_file=/nonexistent/pw"),
    (("timeout=soon",), {}, "not a number"),
])
def test_bad_conf_is_one_line_naming_the_key(pairs, env, fragment):
    with pytest.raises(UsageError, match="--rdzv-conf|password") as raised:
        parse_conf("e", pairs, 5, env)
    assert fragment in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("value, expected", [(None, "auto"), ("yes", "yes"), ("no", "no"), ("on", "yes"),
                                             ("off", "no"), ("AUTO", "auto")])
def test_compacting_at_the_end_is_auto_unless_asked(value, expected):
    pairs = () if value is None else (f"compact={value}",)
    assert parse_conf("e:1", pairs, 9.0, {}).compact == expected


def test_a_compact_value_that_is_not_yes_no_or_auto_names_the_fix():
    with pytest.raises(UsageError, match="compact=yes, compact=no or compact=auto"):
        parse_conf("e:1", ("compact=maybe",), 9.0, {})
