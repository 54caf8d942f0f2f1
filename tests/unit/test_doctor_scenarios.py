"""End-to-end scenarios: each fixture builds a fake machine (captured nvidia-smi output on PATH, /proc text,
library files, an ldconfig cache, dist-info folders and real build_info.py files) and the doctor, run through all
its probes, must reach the expected verdict, findings and fixes."""

from __future__ import annotations

import dataclasses
import importlib.util
import io
from pathlib import Path
from typing import Any

import pytest

from tfdist.doctor.core import DoctorConfig, run_doctor
from tfdist.doctor.report import render, to_json

_BUILDER = Path(__file__).resolve().parents[1] / "fixtures" / "doctor" / "builder.py"
_spec = importlib.util.spec_from_file_location("doctor_fixture_builder", _BUILDER)
assert _spec is not None and _spec.loader is not None
builder = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(builder)


def _lookup(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[int(part)] if isinstance(data, (list, tuple)) else data[part]
    return data


def test_at_least_forty_scenarios_each_from_a_public_report() -> None:
    names = builder.scenario_names()
    assert len(names) >= 40
    for name in names:
        scenario = builder.load_scenario(name)
        assert scenario["source"].startswith("https://"), name
        assert scenario["description"] and scenario["expect"]["verdict"], name


def test_scenarios_cover_wsl2_and_conda_both_healthy_and_broken() -> None:
    kinds: dict[tuple[str, bool], int] = {}
    for name in builder.scenario_names():
        scenario = builder.load_scenario(name)
        machine = scenario["machine"]
        healthy = scenario["expect"]["verdict"] != "problems"
        if "WSL" in machine.get("kernel", "") or "WSL_DISTRO_NAME" in machine.get("env", {}):
            kinds[("wsl", healthy)] = kinds.get(("wsl", healthy), 0) + 1
        if "conda" in machine:
            kinds[("conda", healthy)] = kinds.get(("conda", healthy), 0) + 1
    assert all(kinds.get((kind, healthy), 0) >= 2 for kind in ("wsl", "conda") for healthy in (True, False)), kinds


@pytest.mark.parametrize("name", builder.scenario_names())
def test_scenario(name: str, tmp_path: Path) -> None:
    scenario = builder.load_scenario(name)
    roots = builder.build_machine(tmp_path, name)
    report = run_doctor(DoctorConfig(roots=roots, expect_gpu=scenario.get("expect_gpu", False), recommend=True))
    expect = scenario["expect"]

    def fill(text: str) -> str:
        return text.replace("{root}", str(roots.sys_root)).replace("{site}", str(roots.site_dirs[0]))

    found = {f.id: f for f in report.findings}
    listing = "; ".join(f"{f.severity} {f.id}: {f.title}" for f in report.findings)
    assert report.verdict.status == expect["verdict"], f"{report.verdict.summary} | {listing}"
    assert report.verdict.exit_status == expect["exit"]
    assert expect.get("summary", "") in report.verdict.summary
    for finding_id, want in expect["findings"].items():
        assert finding_id in found, f"missing {finding_id}; got {listing}"
        finding = found[finding_id]
        assert finding.severity == want["severity"], finding
        if "fix" in want:
            assert fill(want["fix"]) in (finding.fix or ""), finding.fix
        if "alternative" in want:
            assert any(fill(want["alternative"]) in a for a in finding.alternatives), finding.alternatives
        if "evidence" in want:
            assert any(fill(want["evidence"]) in e for e in finding.evidence), finding.evidence
        assert finding.evidence, "every finding names its evidence"
    for finding_id, words in expect.get("title", {}).items():
        assert fill(words) in found[finding_id].title, found[finding_id].title
    if expect.get("no_unknown_versions"):
        # Every CUDA library found carries a version: from its file name, its SONAME or the package that owns it.
        assert all(lib.version for lib in report.facts.libraries.libraries), report.facts.libraries.libraries
    if report.facts.system.wsl:
        # Inside WSL2 the driver is the Windows one: no fix may touch a Linux driver.
        linux_driver = ("setup-gpu", "modprobe", "cuda-drivers", "install nvidia-driver")
        for finding in report.findings:
            for command in (finding.fix or "", *finding.alternatives):
                assert not any(word in command for word in linux_driver), command
    for finding_id in expect.get("absent", []):
        assert finding_id not in found, found[finding_id]
    facts = dataclasses.asdict(report.facts)
    for path, value in expect.get("facts", {}).items():
        actual = _lookup(facts, path)
        actual = list(actual) if isinstance(actual, tuple) else actual
        assert actual == (fill(value) if isinstance(value, str) else value), path

    rec = report.recommendation
    assert rec is not None
    for key, value in expect.get("recommend", {}).items():
        if key == "version":
            assert rec.version == value, rec
        elif key == "gpu":
            assert rec.gpu is value, rec
        elif key == "command":
            assert rec.command == value
        elif key == "note":
            assert any(value in n for n in rec.notes), rec.notes
        elif key == "mirror_command":
            assert rec.mirror_command == value
        elif key == "skipped":
            assert value in rec.skipped, rec.skipped

    # Both outputs render: the JSON payload and the human report naming the verdict and every fix.
    payload = to_json(report)
    assert payload["verdict"] == expect["verdict"] and payload["exit_status"] == expect["exit"]
    from rich.console import Console

    buffer = io.StringIO()
    render(report, console=Console(file=buffer, width=400, highlight=False, soft_wrap=True))
    text = buffer.getvalue()
    assert report.verdict.summary in text
    for finding in report.findings:
        assert finding.title in text
        if finding.fix:
            assert finding.fix in text
    assert "ordered-dict" not in text and "…" not in text
