"""ensure_prometheus fails loudly, naming its log, when it cannot build."""

from __future__ import annotations

from pathlib import Path

import pytest

from lestrade.localcluster.prometheus import PrometheusBuildError, ensure_prometheus, prometheus_binary_path


def test_cache_location_honours_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LESTRADE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert prometheus_binary_path("v0.1.2") == tmp_path / "lestrade" / "prometheus-v0.1.2" / "prometheus"


def test_missing_go_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LESTRADE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(PrometheusBuildError) as error:
        ensure_prometheus("v0.310.0")
    log = tmp_path / "prometheus-v0.310.0" / "build.log"
    assert "Go toolchain is not on PATH" in str(error.value) and str(log) in str(error.value)
    assert log.exists()


def test_failed_build_names_the_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LESTRADE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GOPROXY", "off")  # the version cannot be fetched: the build fails at once
    monkeypatch.setenv("GOFLAGS", "-mod=mod")
    with pytest.raises(PrometheusBuildError) as error:
        ensure_prometheus("v0.0.1-does-not-exist")
    log = tmp_path / "cache" / "prometheus-v0.0.1-does-not-exist" / "build.log"
    assert str(log) in str(error.value) and "failed" in str(error.value)
    assert "go build" in log.read_text()
    assert not (log.parent / "prometheus").exists()
