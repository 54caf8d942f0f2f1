"""``tfdist tensorboard``: start TensorBoard on a job's shared log directory and print its address."""
from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import click

from tfdist.cli.common import PathText, option

READY_TIMEOUT_S = 120.0


def tensorboard_argv(logdir: str, port: int, host: str) -> list[str]:
    """The TensorBoard command line, run with this Python (the one the tensorboard extra is installed into)."""
    return [sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--port", str(port), "--host", host]


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def _wait_ready(process: subprocess.Popen[Any], url: str) -> bool:
    """Poll ``url`` until TensorBoard answers; False if it exited first or never answered in time."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    return False


@click.command(name="tensorboard")
@option("--logdir", required=True, type=PathText(file_okay=False),
        help="The job's TensorBoard directory (the chief writes there).")
@option("--port", type=click.IntRange(1, 65535), default=6006, show_default=True, help="Port to serve on.")
@option("--host", default="127.0.0.1", show_default=True,
        help="Address to bind; 0.0.0.0 makes it reachable from other machines.")
@option("--dry-run", is_flag=True, help="Print the TensorBoard command and start nothing.")
def command(logdir: str, port: int, host: str, dry_run: bool) -> int:
    """Start TensorBoard on LOGDIR and print its address; Ctrl-C stops it.

    The chief writes loss, throughput and step time there (tfdist.runtime's callbacks).
    """
    from pathlib import Path

    from tfdist.errors import TfdistError, UsageError
    from tfdist.extras import require
    from tfdist.validate import host as check_host

    check_host(host, "--host")
    if "://" not in logdir and not Path(logdir).is_dir():  # gs://, s3://... are TensorBoard's to check
        raise UsageError(f"--logdir {logdir} is not a folder" + (" (it is a file)" if Path(logdir).exists() else ""),
                         hint="give the job's TensorBoard folder (MODEL_DIR/logs, which the chief creates "
                         "once training starts)", reference="tensorboard-no-logdir")
    # TensorFlow 2.21 no longer installs TensorBoard: say so before printing or starting a command that cannot run.
    require("tensorboard", "this command")
    argv = tensorboard_argv(logdir, port, host)
    url = _url(host, port)
    if dry_run:
        click.echo(shlex.join(argv))
        return 0
    process = subprocess.Popen(argv)
    # Forward a polite stop (a scheduler's SIGTERM) to TensorBoard instead of leaving it orphaned.
    previous = signal.signal(signal.SIGTERM, lambda *_: process.terminate())
    try:
        click.echo(f"TensorBoard starting: {url} (logdir {logdir})", err=True)
        if _wait_ready(process, url):
            click.echo(f"TensorBoard: {url}")
        status = process.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached TensorBoard too (same process group); give it a moment to exit on its own.
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    if status not in (0, -signal.SIGTERM, 128 + signal.SIGTERM):
        raise TfdistError(f"TensorBoard exited with status {status}",
                          hint=f"is port {port} free? see its messages above")
    return 0
