"""Fixtures of the evaluation tests: the shared control plane is left as it was found."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from lestrade.evals.runner import EVAL_NAMESPACE
from lestrade.localcluster.processes import wait_until


@pytest.fixture
def eval_namespace_removed(api_client: k8s.ApiClient) -> Iterator[None]:
    """After the test, the runs' namespace (Investigations, transcripts) is deleted and gone, so
    later tests listing runs across namespaces, or the next evaluation, do not meet it."""
    yield
    core = k8s.CoreV1Api(api_client)
    try:
        core.delete_namespace(EVAL_NAMESPACE)
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise

    def gone() -> bool:
        return not core.list_namespace(field_selector=f"metadata.name={EVAL_NAMESPACE}").items

    wait_until(f"namespace {EVAL_NAMESPACE} to be deleted", gone, timeout=180, interval=0.5)
