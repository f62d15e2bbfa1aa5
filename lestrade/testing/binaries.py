"""Test-only tools are built when the tests that use them are collected, not by `make run`.

A test module that runs Helm, kubeconform or Prometheus says so with
`pytestmark = pytest.mark.binaries("helm")`; a test using the `cluster` fixture needs the
control plane (Kubernetes, etcd, KWOK). Once collection is done, the components the selected
tests need and the cache lacks are built side by side (printing what is built and an
estimate) before the first test starts, so a build's minutes never count against a test's
timeout, and running one unrelated test builds nothing. `tests/cluster/test_binaries_declared.py`
checks that every module using one of these binaries carries the mark.
"""

from __future__ import annotations

import os

import pytest

from lestrade.localcluster.build import ALL_COMPONENTS, ensure_binaries, missing_components
from lestrade.localcluster.versions import RUN_COMPONENTS

__all__ = ["needed_components"]

MARK = "binaries"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARK}(*components): the pinned components ({', '.join(ALL_COMPONENTS)}) the test runs; "
        "built before the session's first test when missing",
    )


def needed_components(items: list[pytest.Item]) -> list[str]:
    """The components the marks of `items` name, and the control plane's when a test uses the
    local cluster (the `cluster` fixture), in a stable order."""
    wanted: set[str] = set()
    local_cluster = not os.environ.get("LESTRADE_TEST_KUBECONFIG")
    for item in items:
        if local_cluster and "cluster" in getattr(item, "fixturenames", ()):
            wanted.update(RUN_COMPONENTS)
        for mark in item.iter_markers(MARK):
            unknown = set(mark.args) - set(ALL_COMPONENTS)
            if unknown:
                raise pytest.UsageError(
                    f"{item.nodeid}: unknown component(s) {sorted(unknown)} in "
                    f"@pytest.mark.{MARK}; known: {', '.join(ALL_COMPONENTS)}"
                )
            wanted.update(mark.args)
    return [name for name in ALL_COMPONENTS if name in wanted]


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    missing = missing_components(needed_components(session.items))
    if not missing:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    capture = session.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None:
        reporter.write_line(f"building what the selected tests run: {', '.join(missing)}")
    # The build prints its progress; pytest's capture is suspended so a person sees it live.
    if capture is not None:
        capture.suspend_global_capture(in_=False)
    try:
        ensure_binaries(missing)
    finally:
        if capture is not None:
            capture.resume_global_capture()
