"""Quoting helpers read back by the real parsers, and the safe output writer."""
from __future__ import annotations

import configparser
import errno
import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from tfdist import output, quote
from tfdist.errors import UsageError

AWKWARD = ["plain", "a b", "it's", 'say "hi"', "$(id)", "`id`", "a;b", "#x", "tab\there", "new\nline", "cr\r",
           "é ✓ 𝔘", "\u2028", "\\", "", "-n", "x" * 10_000]


def test_shell_words_read_back_by_bash() -> None:
    words = [w for w in AWKWARD]
    script = "printf '%s\\0' " + quote.shell_words(words)
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    assert out.decode("utf-8").split("\0")[:-1] == words


def test_shell_refuses_nul() -> None:
    with pytest.raises(UsageError, match="NUL"):
        quote.shell("a\0b", "--x")


def test_yaml_toml_and_json_read_back() -> None:
    for value in AWKWARD + ["nul\0", "\x1b[31m"]:
        assert yaml.safe_load(quote.yaml_scalar(value)) == value
        assert "\n" not in quote.yaml_scalar(value)
        assert tomllib.loads(f"k = {quote.toml_string(value)}")["k"] == value
    words = AWKWARD
    assert json.loads(quote.dockerfile_exec(words)) == words
    assert "\n" not in quote.dockerfile_exec(words)


def test_ini_value_reads_back_or_is_refused() -> None:
    for value in AWKWARD:
        try:
            text = quote.ini_value(value, "--url")
        except UsageError:
            assert (value == "" or value != value.strip() or len(value) > 4096
                    or any(c in value for c in "\n\r\t\u2028"))
            continue
        parser = configparser.RawConfigParser()
        parser.read_string(f"[global]\nindex-url = {text}\n")
        assert parser["global"]["index-url"] == value


def test_comment_refuses_what_ends_the_line() -> None:
    assert quote.comment("a # b") == "a # b"
    for value in ("a\nb", "a\rb", "a\u2028b"):
        with pytest.raises(UsageError):
            quote.comment(value)


def test_new_file_is_written_with_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "job.sh"
    assert output.write_output(target, "echo\n", force=False, mode=0o755) is None
    assert target.read_text() == "echo\n"
    assert target.stat().st_mode & 0o777 == 0o755
    assert [p.name for p in tmp_path.iterdir()] == ["job.sh"]  # no temporary left behind


def test_existing_file_is_refused_without_force_and_kept_as_bak_with_it(tmp_path: Path) -> None:
    target = tmp_path / "Dockerfile"
    target.write_text("hand-written\n")
    with pytest.raises(UsageError) as caught:
        output.write_output(target, "new\n", force=False)
    assert caught.value.status == 2 and "--force" in caught.value.one_line()
    assert target.read_text() == "hand-written\n"
    backup = output.write_output(target, "new\n", force=True)
    assert backup == tmp_path / "Dockerfile.bak"
    assert backup.read_text() == "hand-written\n" and target.read_text() == "new\n"
    output.write_output(target, "newer\n", force=True)
    assert backup.read_text() == "new\n" and target.read_text() == "newer\n"


def test_missing_folder_and_folder_target_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        output.write_output(tmp_path / "nope" / "x.yaml", "x", force=True)
    assert not (tmp_path / "nope").exists()
    with pytest.raises(UsageError, match="is a folder"):
        output.write_output(tmp_path, "x", force=True)


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "x.sh"
    target.write_text("old\n")

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(output.os, "fsync", disk_full)
    with pytest.raises(UsageError, match="No space left"):
        output.write_output(target, "new\n", force=True)
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.sh"]
