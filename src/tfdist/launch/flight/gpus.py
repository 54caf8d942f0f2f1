"""What the GPUs were doing when a job hung: ``nvidia-smi``'s own report (utilisation, memory, the processes on each
GPU), read beside the stacks. A GPU that is stuck (an XID error, a kernel that never returns) shows there, while
every task's Python stack only says it waits inside TensorFlow.

Bounded: at most :data:`TIMEOUT` seconds (a GPU in a bad state can make nvidia-smi itself hang) and
:data:`MAX_CHARS` characters. Never an error: no nvidia-smi on PATH, a timeout or a failure is a line saying so."""
from __future__ import annotations

import shutil
import subprocess

TIMEOUT = 5.0
MAX_CHARS = 16000


def nvidia_smi(*, timeout: float = TIMEOUT, max_chars: int = MAX_CHARS) -> str:
    """``nvidia-smi``'s output, or one line saying why there is none."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return "nvidia-smi is not on PATH: no GPU report (no NVIDIA driver on this machine)"
    try:
        done = subprocess.run([program], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"nvidia-smi gave no answer within {timeout:g} s (a GPU or its driver may be stuck)"
    except OSError as error:
        return f"nvidia-smi could not be run: {error.strerror or error}"
    text = (done.stdout + done.stderr).decode("utf-8", errors="replace").rstrip()
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n... ({len(text) - max_chars} more characters left out)"
    if done.returncode != 0:
        text += f"\n(nvidia-smi exited with code {done.returncode})"
    return text
