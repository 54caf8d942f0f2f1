"""conda's precedence in tfdist's model (conda is not installed here, so conda itself cannot be asked in tests):
the search path order, $CONDA_PREFIX/.condarc, $CONDARC, channel_alias, custom_channels and CONDA_* variables,
and ``use`` naming a higher-priority file that overrides the one it writes."""
from __future__ import annotations

from pathlib import Path

import pytest

from tfdist.mirror.catalog import get_mirror
from tfdist.mirror.paths import ConfigPaths
from tfdist.mirror.switch import SwitchRequest, plan
from tfdist.mirror.status import tool_status

TUNA, USTC = get_mirror("tuna"), get_mirror("ustc")
TUNA_MAIN = TUNA.conda_default_channels[0]
TUNA_CLOUD = TUNA.conda_custom_channels["conda-forge"]
USTC_CLOUD = USTC.conda_custom_channels["conda-forge"]


def make(tmp_path: Path, **extra: str) -> tuple[ConfigPaths, dict[str, str]]:
    env = {"HOME": str(tmp_path / "h"), "XDG_CONFIG_HOME": str(tmp_path / "h" / ".config"), "PATH": "", **extra}
    return ConfigPaths.from_env(env, root=tmp_path / "root"), env


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def effective(paths: ConfigPaths, env: dict[str, str]) -> dict[str, tuple[str | None, str]]:
    return {c.command: (c.index, c.source) for c in tool_status("conda", paths, env).commands}


def test_nothing_configured_means_condas_built_in_defaults(tmp_path: Path) -> None:
    paths, env = make(tmp_path)
    assert {k: v[0] for k, v in effective(paths, env).items()} == {"defaults": None, "conda-forge": None}


@pytest.mark.parametrize("low,high", [("etc", "home"), ("home", "xdg-later"), ("home", "prefix"),
                                      ("prefix", "condarc")])
def test_default_channels_come_from_the_highest_priority_file(tmp_path: Path, low: str, high: str) -> None:
    prefix = tmp_path / "env"
    paths, env = make(tmp_path, CONDA_PREFIX=str(prefix), CONDARC=str(tmp_path / "rc.yml"))
    files = {"etc": paths.etc_dir / "conda" / ".condarc", "home": paths.home / ".condarc",
             "xdg-later": paths.home / ".condarc", "prefix": prefix / ".condarc", "condarc": tmp_path / "rc.yml"}
    if high == "xdg-later":  # ~/.condarc comes after $XDG_CONFIG_HOME/conda/.condarc in conda's SEARCH_PATH
        files["home"] = paths.xdg_config_home / "conda" / ".condarc"
    write(files[low], "default_channels:\n  - https://low.test/main\n")
    write(files[high], f"default_channels:\n  - {TUNA_MAIN}\n")
    index, source = effective(paths, env)["defaults"]
    assert index == TUNA_MAIN and source.startswith(str(files[high]))


def test_conda_forge_from_custom_channels_beats_channel_alias(tmp_path: Path) -> None:
    paths, env = make(tmp_path, CONDARC=str(tmp_path / "rc.yml"))
    write(paths.home / ".condarc", f"custom_channels:\n  conda-forge: {USTC_CLOUD}\n")
    write(tmp_path / "rc.yml", "channel_alias: https://alias.test\n")
    assert effective(paths, env)["conda-forge"][0] == f"{USTC_CLOUD}/conda-forge"
    (paths.home / ".condarc").unlink()
    assert effective(paths, env)["conda-forge"] == ("https://alias.test/conda-forge", f"{tmp_path / 'rc.yml'} "
                                                    "channel_alias")


def test_environment_variables_beat_every_file(tmp_path: Path) -> None:
    paths, env = make(tmp_path, CONDA_DEFAULT_CHANNELS="https://env.test/main,https://env.test/r",
                      CONDA_CHANNEL_ALIAS="https://env-alias.test")
    write(paths.home / ".condarc", f"default_channels:\n  - {TUNA_MAIN}\nchannel_alias: https://file.test\n")
    result = effective(paths, env)
    assert result["defaults"] == ("https://env.test/main", "environment variable CONDA_DEFAULT_CHANNELS")
    assert result["conda-forge"] == ("https://env-alias.test/conda-forge", "environment variable CONDA_CHANNEL_ALIAS")


def test_use_names_a_higher_priority_file_that_overrides_it(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    paths, env = make(tmp_path, CONDA_PREFIX=str(prefix))
    write(prefix / ".condarc", "default_channels:\n  - https://corp.test/main\n")
    result = plan(SwitchRequest(mirror=TUNA, tools=("conda",), scope="user"), paths, env, tmp_path)
    assert [(o.command, o.index) for o in result.overridden] == [("defaults", "https://corp.test/main")]
    assert result.overridden[0].source.startswith(str(prefix / ".condarc"))
    clean = plan(SwitchRequest(mirror=TUNA, tools=("conda",), scope="site"), paths, env, tmp_path)
    assert clean.overridden == ()  # writing the environment's own file is what takes effect


def test_ustc_leaves_defaults_alone_and_is_still_in_effect(tmp_path: Path) -> None:
    paths, env = make(tmp_path)
    result = plan(SwitchRequest(mirror=USTC, tools=("conda",)), paths, env, tmp_path)
    assert result.overridden == ()  # USTC carries conda-forge only; `defaults` staying official is expected
    assert tool_status("conda", paths, env).mirror == "official"
