"""The mirror catalog: names, URLs, the official index read from pip, ad-hoc mirrors."""
from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tfdist.errors import UsageError
from tfdist.mirror import catalog

EXPECTED = {"tuna", "bfsu", "ustc", "aliyun", "huawei", "tencent", "nju", "pku", "sjtu", "mirrorz", "official"}


def test_catalog_has_exactly_the_documented_names() -> None:
    assert set(catalog.load_catalog()) == EXPECTED


def test_every_catalog_url_is_https_and_pip_index_ends_in_simple() -> None:
    for mirror in catalog.load_catalog().values():
        assert mirror.pip_index is not None
        assert urlsplit(mirror.pip_index).scheme == "https", mirror.name
        assert mirror.pip_index.rstrip("/").endswith("/simple"), mirror.name
        for url in [*mirror.conda_default_channels, *mirror.conda_custom_channels.values()]:
            assert urlsplit(url).scheme == "https", (mirror.name, url)


def test_official_index_is_read_from_pip() -> None:
    from pip._internal.models.index import PyPI

    assert catalog.official_pypi_index() == PyPI.simple_url.rstrip("/")
    assert catalog.get_mirror("official").pip_index == catalog.official_pypi_index()
    assert not catalog.get_mirror("official").has_conda


def test_ustc_carries_only_conda_forge_and_bioconda() -> None:
    ustc = catalog.get_mirror("USTC")
    assert ustc.conda_default_channels == ()
    assert set(ustc.conda_custom_channels) == {"conda-forge", "bioconda"}


def test_sjtu_uses_the_index_root_not_the_file_store() -> None:
    assert catalog.get_mirror("sjtu").pip_index.endswith("/pypi/web/simple")


def test_unknown_mirror_names_the_known_ones() -> None:
    with pytest.raises(UsageError) as raised:
        catalog.get_mirror("nope")
    assert "tuna" in raised.value.one_line() and "official" in raised.value.one_line()


def test_adhoc_mirrors_are_validated() -> None:
    extra = catalog.parse_adhoc(["Corp=https://pypi.example.test/simple/"])
    assert extra["corp"].pip_index == "https://pypi.example.test/simple"
    assert catalog.get_mirror("corp", extra).adhoc
    with pytest.raises(UsageError, match="plain http"):
        catalog.parse_adhoc(["corp=http://pypi.example.test/simple"])
    assert catalog.parse_adhoc(["corp=http://127.0.0.1:1/simple"], allow_insecure=True)["corp"].pip_index
    for bad in ["noequals", "tuna=https://x.test/simple", "Bad Name=https://x.test/simple", "x=ftp://x.test/"]:
        with pytest.raises(UsageError):
            catalog.parse_adhoc([bad])


def test_identify_matches_ignoring_trailing_slash() -> None:
    assert catalog.identify("https://mirrors.aliyun.com/pypi/simple/") == "aliyun"
    assert catalog.identify(catalog.official_pypi_index() + "/") == "official"
    assert catalog.identify("https://unknown.test/simple") is None
