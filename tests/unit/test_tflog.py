"""TensorFlow's C++ log level for launched tasks: the choice (flag > exported variable > machine) and the console
filter, on lines captured from TensorFlow 2.21 on this CPU-only machine."""
from __future__ import annotations

import io

import pytest

from tfdist.launch.console.task_output import Console
from tfdist.launch.console.tflog import choose_level, hidden

# As TensorFlow 2.21 (the `tensorflow` wheel, no GPU) prints them: the block before absl's initialisation comes
# twice and ignores TF_CPP_MIN_LOG_LEVEL; the cuInit error comes after it and obeys the variable.
BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
ONEDNN = ("I0000 00:00:1796073431.951561   14916 port.cc:153] oneDNN custom operations are on. You may see slightly "
          "different numerical results due to floating-point round-off errors from different computation orders.\n")
NO_DRIVER = ("I0000 00:00:1796073431.951905   14916 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
             "GPU will not be used.\n")
CUINIT = ("E0000 00:00:1796073436.982467   14916 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
          "Failed call to cuInit: UNKNOWN ERROR (303)\n")
WARN = "W1130 21:15:00.123456   14916 collective_ops.cc:10] something to warn about\n"
FATAL = "F1130 21:15:00.123456   14916 check.cc:1] Check failed: x\n"
STARTUP = [BANNER, ONEDNN, NO_DRIVER, BANNER, ONEDNN, NO_DRIVER, CUINIT]


@pytest.mark.parametrize("flag, environ, has_gpus, expected", [
    ("info", {"TF_CPP_MIN_LOG_LEVEL": "3"}, False, 0),   # the flag wins over everything
    ("error", {}, False, 2),
    ("auto", {"TF_CPP_MIN_LOG_LEVEL": "1"}, False, 1),   # then what the user exported
    ("auto", {"TF_CPP_MIN_LOG_LEVEL": "9"}, True, 3),
    ("auto", {}, True, 2),                               # GPUs: errors are worth seeing
    ("auto", {}, False, 3),                              # no GPU: the only errors are the failed CUDA probe
    (None, {"TF_CPP_MIN_LOG_LEVEL": "junk"}, False, 3),
])
def test_level_choice(flag, environ, has_gpus, expected) -> None:
    assert choose_level(flag, environ, has_gpus) == expected


@pytest.mark.parametrize("level, shown", [
    (0, STARTUP + [WARN, FATAL]),
    (1, [CUINIT, WARN, FATAL]),
    (2, [CUINIT, FATAL]),
    (3, [FATAL]),
])
def test_console_keeps_lines_at_or_above_the_level(level: int, shown: list[str]) -> None:
    out = io.StringIO()
    console = Console(out=out, err=out, tf_log_level=level)
    for line in STARTUP + [WARN, FATAL, "final_accuracy=0.96\n"]:
        console.write("[worker:0]", line, to_stderr=True)
    assert out.getvalue().splitlines() == [f"[worker:0] {line.rstrip()}" for line in shown + ["final_accuracy=0.96\n"]]


def test_only_glog_lines_are_filtered() -> None:
    assert not hidden("I like this line: 0000 00:00 x.cc:1] no\n", 3)
    assert not hidden("Epoch 1/5\n", 3)
    assert hidden(NO_DRIVER, 1) and not hidden(NO_DRIVER, 0)
