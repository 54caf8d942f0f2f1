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
