"""What the operator is shown of names from elsewhere (validate.printable), and what a recorded command keeps of its
secrets (redact.mask_command): table tests."""
from __future__ import annotations

import pytest

from tfdist.redact import mask_command
from tfdist.validate import PRINTABLE_MAX, printable


@pytest.mark.parametrize("raw, shown", [
    ("node-1", "node-1"),
    ("évora-中", "évora-中"),  # letters of any script stay
    ("evil\x1b[2J", "evil\\x1b[2J"),  # an escape sequence is shown, not run
    ("a\nlost node 9", "a\\nlost node 9"),  # a newline cannot fake a line of its own
    ("a\r\tb\x07", "a\\r\\tb\\x07"),
    ("left\u202eright", "left\\u202eright"),  # a bidi override cannot reorder what follows
    ("zero\u200bwidth", "zero\\u200bwidth"),
    ("line\u2028sep", "line\\u2028sep"),
    ("\ud800", "\\ud800"),  # a lone surrogate (from surrogateescape) cannot break the encoder
    ("tag\U000e0041", "tag\\U000e0041"),
    (17, "17"),
])
def test_printable(raw, shown):
    assert printable(raw) == shown


@pytest.mark.parametrize("code", range(128))
def test_printable_ascii_shortcut_escapes_exactly_what_the_character_check_does(code):
    import unicodedata

    char = chr(code)
    expected = char if unicodedata.category(char) not in {"Cc", "Cf", "Cs", "Zl", "Zp"} else \
        char.encode("unicode_escape").decode("ascii")
    assert printable(f"a{char}b") == f"a{expected}b"


def test_printable_cuts_long_text():
    assert printable("x" * 1000) == "x" * (PRINTABLE_MAX - 3) + "..."
    assert len(printable("\x1b" * 1000)) == PRINTABLE_MAX
    assert printable("x" * 10, 10) == "x" * 10


@pytest.mark.parametrize("command, masked", [
    (["python", "train.py", "--epochs", "3"], ["python", "train.py", "--epochs", "3"]),
    (["python", "train.py", "--hf-token", "abc"], ["python", "train.py", "--hf-token", "****"]),
    (["python", "train.py", "--password=abc", "--lr=0.1"], ["python", "train.py", "--password=****", "--lr=0.1"]),
    (["env", "WANDB_API_KEY=abc", "DB_PASSWORD=x", "EPOCHS=3", "python"],
     ["env", "WANDB_API_KEY=****", "DB_PASSWORD=****", "EPOCHS=3", "python"]),
    (["train.py", "--data", "https://me:pw@host/x"], ["train.py", "--data", "https://me:****@host/x"]),
    (["train.py", "--data=s3://tok3n@bucket/x"], ["train.py", "--data=s3://****@bucket/x"]),
    (["train.py", "--token", "--lr", "1"], ["train.py", "--token", "--lr", "1"]),  # a flag after it is no value
    (["train.py", "--secret-key", "k", "--secret="], ["train.py", "--secret-key", "****", "--secret="]),
    (["train.py", "--monkey", "2", "--keys", "1"], ["train.py", "--monkey", "2", "--keys", "1"]),
])
def test_mask_command(command, masked):
    assert mask_command(command) == tuple(masked)


HOSTILE = "evil\x1b[2J\x1b]0;owned\x07\nlost node 9: fake"


def _clean(text: str) -> bool:
    return not any(c in text for c in "\x1b\x07\r") and not any(
        line.startswith("lost node 9") for line in text.splitlines())


def test_a_peers_machine_name_reaches_reports_and_the_server_log_as_printable_text(capsys):
    from tfdist.launch.elastic.rendezvous.membership import MembershipPolicy, Node, RendezvousSettings
    from tfdist.launch.outcome import Outcome

    policy = MembershipPolicy(RendezvousSettings(job="j", min_nodes=1, max_nodes=2, max_restarts=0), now=0.0)
    node = Node(1, HOSTILE, "198.18.0.1\x1b[1m", 1, None, {})
    assert _clean(node.label) and "\\x1b[2J" in node.label
    assert policy.on_join(node, "j") is None
    policy.on_ready(1, (1000,), None)
    policy.tick(0.0)
    policy.tick(10.0)
    policy.on_exited(1, 0, Outcome.FAILED, 3, f"worker:0 exited 1 {HOSTILE}", now=11.0)
    policy.tick(11.0)
    policy.on_ready(1, (1000,), None)
    (finish,) = policy.tick(12.0)
    assert finish.status == 3 and _clean(finish.report), finish.report
    assert "\\x1b[2J" in finish.report and "evil" in finish.report  # shown, escaped


def test_the_agent_prints_what_peers_sent_as_printable_text(capsys, tmp_path):
    import sys

    from tfdist.launch.elastic.messages import protocol as M
    from tfdist.launch.elastic.agent.spec import AgentSpec
    from tfdist.launch.elastic.backends import Agent
    from tfdist.protocol import Command

    agent = Agent(AgentSpec(job="j", endpoint_host="127.0.0.1", endpoint_port=1, min_nodes=1, max_nodes=1, slots=1,
                            command=Command(target="x.py", interpreter=sys.executable), log_dir=str(tmp_path)))
    agent.say(f"refused by the rendezvous: {HOSTILE}")
    # The report is several lines by design (the rendezvous makes each one printable); here each line is shown as
    # text too, so escape codes in it are never run.
    report = "tfdist: job j did not succeed\n  evil\x1b[2J\x1b]0;owned\x07"
    assert agent._finish(M.Finish(status=3, report=report)) == 3
    err = capsys.readouterr().err
    assert _clean(err) and "\\x1b[2J" in err and "tfdist: job j did not succeed" in err
