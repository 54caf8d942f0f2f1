"""``mirror status`` precedence and ``mirror env`` output."""
from __future__ import annotations

from pathlib import Path

from tfdist.mirror.catalog import get_mirror, official_pypi_index, parse_adhoc
from tfdist.mirror.envvars import dockerfile_snippet, mirror_environment, shell_lines
from tfdist.mirror.paths import ConfigPaths
from tfdist.mirror.status import conda_status, pip_status, uv_status


def make(tmp_path: Path, **extra: str) -> tuple[ConfigPaths, dict[str, str]]:
    env = {"HOME": str(tmp_path / "h"), "XDG_CONFIG_HOME": str(tmp_path / "h" / ".config"),
           "VIRTUAL_ENV": str(tmp_path / "venv"), "PATH": "", **extra}
    return ConfigPaths.from_env(env, root=tmp_path / "root"), env


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_pip_status_follows_pips_precedence(tmp_path: Path) -> None:
    paths, env = make(tmp_path)
    assert pip_status(paths, env).index == official_pypi_index()
    write(paths.pip_global_files()[-1], "[global]\nindex-url = https://mirrors.aliyun.com/pypi/simple\n")
    write(paths.pip_user_files()[0], "[global]\nindex-url = https://mirrors.ustc.edu.cn/pypi/simple\n")
    assert pip_status(paths, env).mirror == "ustc"  # user (legacy) overrides global
    write(paths.pip_user_files()[1], "[global]\nindex-url = https://mirror.nju.edu.cn/pypi/web/simple\n")
    assert pip_status(paths, env).mirror == "nju"  # the XDG user file overrides the legacy one
    write(paths.pip_site_file(), "[global]\nindex-url = https://mirrors.pku.edu.cn/pypi/web/simple\n")
    status = pip_status(paths, env)
    assert status.mirror == "pku" and status.source == f"{paths.pip_site_file()}:2 [global]"
    assert pip_status(paths, {**env, "PIP_INDEX_URL": "https://corp.test/simple"}).source.endswith("PIP_INDEX_URL")


def test_pip_status_reports_unreadable_files(tmp_path: Path) -> None:
    paths, env = make(tmp_path)
    write(paths.pip_user_files()[1], "[global]\na = 1\na = 2\n")
    status = pip_status(paths, env)
    assert status.index == official_pypi_index() and "pip cannot parse" in status.problems[0]


def test_uv_status_prefers_env_then_user_then_system(tmp_path: Path) -> None:
    paths, env = make(tmp_path)
    write(paths.uv_system_file(), 'index-url = "https://mirrors.aliyun.com/pypi/simple"\n')
    assert uv_status(paths, env, cwd=tmp_path).mirror == "aliyun"
    write(paths.uv_user_file(), '[[index]]\nurl = "https://pypi.tuna.tsinghua.edu.cn/simple"\ndefault = true\n')
    assert uv_status(paths, env, cwd=tmp_path).mirror == "tuna"
    assert uv_status(paths, {**env, "UV_DEFAULT_INDEX": "https://x.test/simple"}, cwd=tmp_path).mirror is None


def test_conda_status_merges_files_and_names_the_mirror(tmp_path: Path) -> None:
    paths, env = make(tmp_path)
    assert conda_status(paths).mirror == "official"
    ustc = get_mirror("ustc").conda_custom_channels["conda-forge"]
    write(paths.home / ".condarc", f"custom_channels:\n  conda-forge: {ustc}\n")
    assert conda_status(paths).mirror == "ustc"
    tuna = get_mirror("tuna").conda_default_channels[0]
    write(paths.xdg_config_home / "conda" / ".condarc", f"default_channels:\n  - {tuna}\n")
    assert conda_status(paths).mirror == "mixed"


def test_env_variables_and_dockerfile() -> None:
    tuna = get_mirror("tuna")
    env = mirror_environment(tuna)
    assert env["PIP_INDEX_URL"] == env["UV_DEFAULT_INDEX"] == tuna.pip_index
    assert "PIP_TRUSTED_HOST" not in env  # https: certificates are checked
    assert shell_lines({"A": "x y"}) == "export A='x y'\n"
    snippet = dockerfile_snippet(tuna, env)
    assert snippet.count("ENV ") == 1 and f'PIP_INDEX_URL="{tuna.pip_index}"' in snippet
    lan = parse_adhoc(["lan=http://10.0.0.2/simple"], allow_insecure=True)["lan"]
    assert mirror_environment(lan)["UV_INSECURE_HOST"] == "10.0.0.2"
    assert "CONDA_DEFAULT_CHANNELS" not in mirror_environment(get_mirror("official"))
