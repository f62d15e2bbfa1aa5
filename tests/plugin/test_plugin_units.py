"""The plugin's pure parts: what reaches the terminal, and alerts as Investigation specs."""

from __future__ import annotations

import pytest

from lestrade.plugin.alerts import alert_spec
from lestrade.plugin.output import clean, item_lines, table


def test_terminal_control_characters_are_made_visible() -> None:
    hostile = "ok\x1b[2J\x1b]0;title\x07\u202eevil\tend\nnext\x9b"
    assert clean(hostile) == "ok\\x1b[2J\\x1b]0;title\\x07\\u202eevil\tend\nnext\\x9b"
    lines = item_lines(
        {
            "kind": "tool_call",
            "name": "x\x1b",
            "params": {"a": "\x1b"},
            "status": "success",
            "output": "out\x1b",
            "id": "1",
        },
        outputs=True,
    )
    assert not any("\x1b" in line for line in lines)
    assert "\x1b" not in table([["a\x1bb"]], ["H"])


def test_alerts_become_specs_and_bad_ones_say_what_is_missing() -> None:
    spec = alert_spec(
        {
            "alerts": [
                {
                    "labels": {"alertname": "KubeDeploymentReplicasMismatch", "namespace": "shop", "deployment": "web"},
                    "annotations": {"summary": "replicas differ"},
                }
            ]
        }
    )
    assert spec["title"] == "KubeDeploymentReplicasMismatch on shop/web"
    assert spec["subject"] == {"kind": "Deployment", "name": "web", "namespace": "shop"}
    assert spec["description"] == "replicas differ" and spec["source"] == "prometheus"
    for bad, message in (({"alerts": []}, "no alerts"), ({"labels": {}}, "alertname"), ([1], "labels")):
        with pytest.raises(ValueError, match=message):
            alert_spec(bad)
