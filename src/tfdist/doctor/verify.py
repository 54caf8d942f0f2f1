"""``tfdist doctor --verify``: import TensorFlow in a child process, list its devices, run one small op on each
GPU, and map TensorFlow's own log lines to the known causes. A child process because importing TensorFlow can
abort the process or spend minutes in PTX JIT."""

from __future__ import annotations

import json
import re
import subprocess
import time

from tfdist.compat import tables as compat
from tfdist.doctor.findings import ERROR, INFO, WARNING, Finding
from tfdist.frozen import frozen

_MARKER = "TFDIST-VERIFY "
# Runs in the child: no tfdist import there, so it works with any interpreter that has TensorFlow.
_SCRIPT = r"""
import json, sys
import tensorflow as tf
out = {"version": tf.__version__, "gpus": [], "ops": []}
try:
    out["build_info"] = {k: v for k, v in tf.sysconfig.get_build_info().items() if isinstance(v, (str, bool, list))}
except Exception as error:
    out["build_info"] = {"error": str(error)}
for index, gpu in enumerate(tf.config.list_physical_devices("GPU")):
    out["gpus"].append(gpu.name)
    try:
        with tf.device("/GPU:%d" % index):
            x = tf.random.uniform((256, 256))
            value = float(tf.reduce_sum(tf.linalg.matmul(x, x)))
        out["ops"].append({"device": gpu.name, "ok": value == value})
    except Exception as error:
        out["ops"].append({"device": gpu.name, "ok": False, "error": str(error)[:400]})
with tf.device("/CPU:0"):
    out["cpu_op"] = float(tf.reduce_sum(tf.ones((4, 4)))) == 16.0
if out["gpus"]:
    # What Keras' optimizers do since TF 2.11: compile with XLA on the GPU. exp, log1p and tanh come from libdevice,
    # and the kernel goes through ptxas, so this fails where model.fit would.
    try:
        with tf.device("/GPU:0"):
            xla_step = tf.function(lambda x: tf.reduce_sum(tf.math.log1p(tf.exp(x)) * tf.tanh(x)), jit_compile=True)
            value = float(xla_step(tf.random.uniform((64, 64))))
        out["xla"] = {"ran": True, "ok": value == value}
    except Exception as error:
        out["xla"] = {"ran": True, "ok": False, "error": " ".join(str(error).split())[:600]}
else:
    out["xla"] = {"ran": False, "reason": "TensorFlow lists no GPU"}
print("TFDIST-VERIFY " + json.dumps(out), flush=True)
"""


@frozen
class LogMatch:
    """A TensorFlow log line recognised as a known cause."""

    cause: str
    severity: str
    title: str
    line: str
    fix: str | None


@frozen
class Verification:
    """What the child process saw."""

    ok: bool
    returncode: int | None
    duration_s: float
    version: str | None = None
    gpus: tuple[str, ...] = ()
    ops: tuple[dict, ...] = ()
    cpu_op: bool = False
    matches: tuple[LogMatch, ...] = ()
    stderr_tail: str = ""
    findings: tuple[Finding, ...] = ()
    xla: dict | None = None  # the jit_compile=True step on GPU:0: {"ran", "ok", "error"} or {"ran": False, "reason"}
    xla_prediction: tuple[str, ...] = ()  # what the doctor's static XLA checks predicted, to read next to it


def match_log(text: str) -> list[LogMatch]:
    """Known causes found in TensorFlow's stderr, one per cause (its first line), in order of appearance."""
    causes = [(re.compile(c["pattern"]), c) for c in compat.load_data("tf_log_causes")["causes"]]
    seen: dict[str, LogMatch] = {}
    for line in text.splitlines():
        for pattern, cause in causes:
            if cause["id"] not in seen and pattern.search(line):
                seen[cause["id"]] = LogMatch(
                    cause["id"], cause["severity"], cause["title"], line.strip()[:400], cause["fix"]
                )
                break
    return list(seen.values())


def findings_from(
    matches: list[LogMatch], *, gpu_expected: bool, gpus_seen: int, ran: bool, tail: str
) -> list[Finding]:
    """Turn the child's outcome into findings. Without a GPU to expect, GPU log lines are information only."""
    findings = []
    if not ran:
        findings.append(
            Finding(
                "tensorflow-import-failed",
                ERROR,
                "Importing TensorFlow failed in a child process",
                tuple(tail.strip().splitlines()[-5:]) or ("no output",),
                fix=None,
            )
        )
    for match in matches:
        if match.severity == "noise":
            continue
        severity = match.severity if gpu_expected else INFO
        findings.append(
            Finding(
                f"tf-log-{match.cause}",
                severity if severity in (ERROR, WARNING) else INFO,
                match.title,
                (f"TensorFlow log: {match.line}",),
                # Without a GPU to use, a GPU log line is expected: report it, prescribe nothing.
                fix=match.fix if gpu_expected else None,
                detail=None if gpu_expected else "Expected on a machine without a usable NVIDIA GPU.",
            )
        )
    if ran and gpu_expected and gpus_seen == 0 and not any(f.severity == ERROR for f in findings):
        findings.append(
            Finding(
                "tf-sees-no-gpu",
                ERROR,
                "TensorFlow lists no GPU although one is present",
                ("tf.config.list_physical_devices('GPU') == []",),
                fix=None,
                detail="No known log line explains it; rerun with TF_CPP_MIN_LOG_LEVEL=0 and read the output.",
            )
        )
    return findings


def xla_findings(xla: dict | None, prediction: tuple[str, ...]) -> list[Finding]:
    """The XLA step's outcome next to the doctor's prediction: a failure is an error, with the predicted cause; a
    success the doctor did not expect is reported too, so a wrong prediction is visible."""
    if not xla or not xla.get("ran"):
        return []
    predicted = tuple(prediction) or ("no XLA problem predicted",)
    if not xla.get("ok"):
        return [
            Finding(
                "xla-compile-failed",
                ERROR,
                "A jit_compile=True function failed on GPU:0 (model.fit compiles the same way)",
                (f"TensorFlow: {xla.get('error', 'no error text')}",) + tuple(f"doctor predicted: {p}" for p in predicted),
                fix=None,
                detail="The doctor's XLA finding above names the fix." if prediction else "No XLA finding predicted "
                "this; the error text is the evidence.",
            )
        ]
    if any(p.startswith("error") for p in prediction):
        return [
            Finding(
                "xla-prediction-wrong",
                INFO,
                "XLA compiled on GPU:0 although the doctor predicted an XLA error",
                tuple(f"doctor predicted: {p}" for p in predicted),
            )
        ]
    return []


def run_verification(
    python: str,
    *,
    env: dict[str, str],
    timeout_s: float = 180.0,
    gpu_expected: bool = True,
    xla_prediction: tuple[str, ...] = (),
) -> Verification:
    """Import TensorFlow with ``python`` in a child process and report what happened.

    Args:
        python: the interpreter whose TensorFlow is checked.
        env: the child's environment (``TF_CPP_MIN_LOG_LEVEL=0`` is forced so the real reasons are logged).
        timeout_s: limit for the child, which may spend minutes in PTX JIT on a new GPU.
        gpu_expected: whether GPU-related log lines are problems (a GPU is present or was asked for).
        xla_prediction: the doctor's XLA findings ("error xla-libdevice-missing: ..."), reported next to the
            outcome of the child's jit_compile=True step.
    """
    child_env = dict(env)
    child_env["TF_CPP_MIN_LOG_LEVEL"] = "0"
    start = time.monotonic()
    try:
        done = subprocess.run([python, "-c", _SCRIPT], capture_output=True, text=True, timeout=timeout_s, env=child_env)
        returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        returncode, stdout = (
            None,
            (expired.stdout or b"").decode() if isinstance(expired.stdout, bytes) else (expired.stdout or ""),
        )
        stderr = (
            (expired.stderr or b"").decode() if isinstance(expired.stderr, bytes) else (expired.stderr or "")
        ) + f"\n(timed out after {timeout_s:.0f} s)"
    duration = time.monotonic() - start
    result = None
    for line in stdout.splitlines():
        if line.startswith(_MARKER):
            result = json.loads(line[len(_MARKER) :])
    matches = match_log(stderr)
    tail = "\n".join(stderr.strip().splitlines()[-20:])
    gpus = tuple(result["gpus"]) if result else ()
    findings = findings_from(matches, gpu_expected=gpu_expected, gpus_seen=len(gpus), ran=result is not None, tail=tail)
    for op in (result or {}).get("ops", []):
        if not op.get("ok"):
            findings.append(
                Finding(
                    "gpu-op-failed",
                    ERROR,
                    f"A matmul on {op['device']} failed",
                    (op.get("error", "no error text"),),
                    fix=None,
                )
            )
    xla = (result or {}).get("xla")
    findings += xla_findings(xla, xla_prediction)
    return Verification(
        ok=result is not None and returncode == 0,
        returncode=returncode,
        duration_s=round(duration, 2),
        version=(result or {}).get("version"),
        gpus=gpus,
        ops=tuple((result or {}).get("ops", [])),
        cpu_op=bool((result or {}).get("cpu_op")),
        matches=tuple(matches),
        stderr_tail=tail,
        findings=tuple(findings),
        xla=xla,
        xla_prediction=tuple(xla_prediction),
    )
