"""The concurrent probe against real loopback mirrors with set latency, throughput and faults."""
from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from tests.fixtures.mirror.conftest_helpers import real_config_digest, start_mirror
from tests.fixtures.mirror.loopback import Behaviour, self_signed_tls
from tfdist.mirror.probe import ProbeConfig, ProbeTarget, fastest, probe_all, rank
from tests.fixtures.mirror.conftest_helpers import loopback_only  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("loopback_only")


@pytest.fixture(autouse=True, scope="module")
def _real_config_untouched():
    before = real_config_digest()
    yield
    assert real_config_digest() == before


def _probe(mirrors: dict, timeout: float = 2.0, **config) -> dict:
    targets = [ProbeTarget(name, m.url) for name, m in mirrors.items()]
    results = probe_all(targets, ProbeConfig(timeout=timeout, allow_insecure=True, **config))
    return {r.name: r for r in results}, [r.name for r in results]


@pytest.mark.slow
def test_probe_measures_ranks_and_reports_every_fault(tmp_path: Path) -> None:
    behaviours = {
        "fast": Behaviour(latency=0.01, rate=4_000_000),
        "slow": Behaviour(latency=0.01, rate=1_000_000),
        "laggy": Behaviour(latency=0.5, rate=4_000_000),
        "e404": Behaviour(fault="404"),
        "e500": Behaviour(fault="500"),
        "reset": Behaviour(fault="reset"),
        "stall": Behaviour(fault="stall"),
        "nofile": Behaviour(fault="file-404"),
        "nometa": Behaviour(rate=2_000_000, fault="no-metadata"),
    }
    mirrors = {name: start_mirror(b, size=1536 * 1024) for name, b in behaviours.items()}
    try:
        by_name, order = _probe(mirrors, timeout=3.0)
    finally:
        for m in mirrors.values():
            m.stop()
    assert by_name["fast"].status == "ok" and by_name["slow"].status == "ok"
    # 4 MB/s vs 1 MB/s: the measured throughput must reflect the configured rates.
    assert by_name["fast"].throughput_bps > 2.5 * by_name["slow"].throughput_bps
    assert 2_000_000 < by_name["fast"].throughput_bps < 6_000_000
    assert by_name["laggy"].ttfb_s > 0.45 > by_name["fast"].ttfb_s
    assert order[0] == "fast"
    assert order.index("slow") < order.index("e404")
    assert by_name["e404"].error.startswith("HTTP 404") and by_name["e500"].error.startswith("HTTP 500")
    assert by_name["reset"].status == "error"
    assert "reset" in by_name["reset"].error or "closed" in by_name["reset"].error
    assert by_name["stall"].status in ("timeout", "error") and not by_name["stall"].usable
    assert by_name["nofile"].status == "error" and "404" in by_name["nofile"].error
    assert by_name["nometa"].status == "ok"
    assert any(".whl.metadata" in w for w in by_name["nometa"].warnings)
    assert all(not by_name[n].warnings for n in ("fast", "slow")), [by_name[n] for n in ("fast", "slow")]
    assert fastest(list(by_name.values())).name == "fast"


@pytest.mark.slow
def test_a_stalled_body_is_judged_on_what_arrived(tmp_path: Path) -> None:
    mirror = start_mirror(Behaviour(fault="body-stall"), size=2 * 1024 * 1024)
    try:
        by_name, _ = _probe({"dribble": mirror}, timeout=1.0)
    finally:
        mirror.stop()
    result = by_name["dribble"]
    assert result.ttfb_s is not None and result.downloaded > 0
    assert any("deadline" in w for w in result.warnings)


@pytest.mark.slow
def test_tls_is_verified_and_a_trusted_test_ca_works(tmp_path: Path) -> None:
    context, cert = self_signed_tls(tmp_path)
    mirror = start_mirror(Behaviour(), tls=context)
    try:
        untrusted, _ = _probe({"tls": mirror}, timeout=2.0)
        client = ssl.create_default_context(cafile=str(cert))
        trusted, _ = _probe({"tls": mirror}, timeout=2.0, ssl_context=client)
    finally:
        mirror.stop()
    assert untrusted["tls"].status == "error"
    assert "certificate" in untrusted["tls"].error
    assert trusted["tls"].status == "ok", trusted["tls"].error


def test_rank_orders_measured_then_reachable_then_failed() -> None:
    from tfdist.mirror.probe import ProbeResult

    results = [
        ProbeResult("down", "u", status="error", error="x"),
        ProbeResult("reach", "u", status="partial", ttfb_s=0.01),
        ProbeResult("slow", "u", status="ok", ttfb_s=0.01, throughput_bps=1e6, estimate_s=64.0),
        ProbeResult("quick", "u", status="ok", ttfb_s=0.2, throughput_bps=5e6, estimate_s=13.6),
    ]
    assert [r.name for r in rank(results)] == ["quick", "slow", "reach", "down"]
    assert fastest([results[0]]) is None


@pytest.mark.slow
def test_redirects_are_followed_but_never_down_to_http(tmp_path: Path) -> None:
    context, cert = self_signed_tls(tmp_path)
    plain = start_mirror(Behaviour())
    redirector = start_mirror(Behaviour(redirect_to=f"http://127.0.0.1:{plain.port}"), tls=context)
    client = ssl.create_default_context(cafile=str(cert))
    targets = [ProbeTarget("redir", redirector.url)]
    try:
        refused = probe_all(targets, ProbeConfig(timeout=2.0, ssl_context=client))[0]
        allowed = probe_all(targets, ProbeConfig(timeout=2.0, ssl_context=client, allow_insecure=True))[0]
    finally:
        redirector.stop()
        plain.stop()
    assert refused.status == "error" and "refused redirect from https to http" in refused.error
    assert allowed.status == "ok", allowed.error
    assert "/simple/pip/" in plain.behaviour.requests


def test_a_mirror_is_asked_as_each_tool_and_a_403_blocks_it_for_that_tool() -> None:
    """Issue 35 item 6: one firewall refuses uv's User-Agent, another refuses both pip's and uv's."""
    from tfdist.mirror.agents import ClientFacts, ToolAgent, pip_user_agent, uv_user_agent

    facts = ClientFacts(python="3.14.6", implementation="CPython", implementation_version="3.14.6", system="Linux")
    agents = (ToolAgent("pip", "26.1.2", pip_user_agent("26.1.2", facts)),
              ToolAgent("uv", "0.13.9", uv_user_agent("0.13.9", facts)))
    mirrors = {"open": start_mirror(Behaviour(), size=64 * 1024),
               "no-uv": start_mirror(Behaviour(refuse_agents=("uv/",)), size=64 * 1024),
               "no-tools": start_mirror(Behaviour(refuse_agents=("pip/", "uv/")), size=64 * 1024)}
    try:
        by_name, order = _probe(mirrors, timeout=3.0, agents=agents)
    finally:
        for m in mirrors.values():
            m.stop()
    assert by_name["open"].usable and by_name["open"].blocked_for == ()
    assert by_name["no-uv"].blocked_for == ("uv",) and not by_name["no-uv"].usable
    assert by_name["no-uv"].status == "ok"  # measured as pip, which it serves
    assert by_name["no-tools"].status == "blocked" and by_name["no-tools"].blocked_for == ("pip", "uv")
    assert "HTTP 403 to pip 26.1.2's User-Agent" in by_name["no-tools"].error
    assert order == ["open", "no-tools", "no-uv"]  # a mirror that refuses a tool comes after every usable one
    assert fastest(list(by_name.values())).name == "open"
    seen = mirrors["no-uv"].behaviour.user_agents
    assert any(ua.startswith("pip/26.1.2 {") for ua in seen) and any(ua.startswith("uv/0.13.9 {") for ua in seen)


def test_a_conda_channel_that_refuses_conda_blocks_the_mirror_for_conda() -> None:
    from tests.fixtures.mirror.conftest_helpers import probe_projects
    from tests.fixtures.mirror.loopback import LoopbackMirror
    from tfdist.mirror.agents import ToolAgent

    channel = {"/anaconda/pkgs/main/noarch/repodata.json": b'{"packages": {}}'}
    refusing = LoopbackMirror(probe_projects(64 * 1024), Behaviour(refuse_agents=("conda/",)), files=channel).start()
    serving = LoopbackMirror(probe_projects(64 * 1024), Behaviour(), files=channel).start()
    conda = ToolAgent("conda", "24.7.1", "conda/24.7.1 requests/2.32.3 CPython/3.12.4 Linux/6.8.0 ubuntu/24.04")
    base = "http://127.0.0.1:{}/anaconda/pkgs/main"
    targets = [ProbeTarget("refusing", refusing.url, base.format(refusing.port)),
               ProbeTarget("serving", serving.url, base.format(serving.port))]
    try:
        results = {r.name: r for r in probe_all(targets, ProbeConfig(timeout=3.0, allow_insecure=True,
                                                                      agents=(conda,)))}
    finally:
        refusing.stop()
        serving.stop()
    assert results["refusing"].blocked_for == ("conda",) and not results["refusing"].usable
    assert results["serving"].blocked_for == () and results["serving"].usable
    assert "/anaconda/pkgs/main/noarch/repodata.json" in serving.behaviour.requests
