"""Credential-looking values are masked wherever they show up in tool output."""

from __future__ import annotations

import json

import pytest

from lestrade.operator.tools.redact import REDACTED, is_sensitive_key, redact, redact_object

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("DB_PASSWORD=hunter2-s3cret LEVEL=debug", "hunter2-s3cret"),
        ("      DB_PASSWORD:  hunter2-s3cret", "hunter2-s3cret"),
        ("API_KEY: sk_live_abcdef", "sk_live_abcdef"),
        ("export GITHUB_TOKEN=abc123def456", "abc123def456"),
        ("client_secret = 'quoted value here'", "quoted value here"),
        ('{"password": "json-pass", "user": "bob"}', "json-pass"),
        ("--password=flagpass1 --verbose", "flagpass1"),
        ("--db-password flagpass2", "flagpass2"),
        ("postgres://app:dsnpass3@db:5432/shop?sslmode=disable", "dsnpass3"),
        ("https://svc/login?user=x&password=querypass4&x=1", "querypass4"),
        ("Server=db;User Id=sa;Password=odbcpass5;", "odbcpass5"),
        ("Authorization: Bearer bearertoken123456", "bearertoken123456"),
        ("curl -H 'Authorization: Basic dXNlcjpwYXNz' http://x", "dXNlcjpwYXNz"),
        ("found key AKIAIOSFODNN7EXAMPLE in config", "AKIAIOSFODNN7EXAMPLE"),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        (f"token issued: {JWT} ok", JWT),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA7"),
        ("- name: API_TOKEN\n  value: yamltoken9\n- name: LEVEL\n  value: info", "yamltoken9"),
        ('[{"name":"DB_PASS","value":"jsonenvpass"}]', "jsonenvpass"),
        ("slack xoxb-123456789012-abcdefghij leaked", "xoxb-123456789012-abcdefghij"),
        ("OPENAI_KEY sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-abcdefghijklmnopqrstuvwx"),
    ],
)
def test_credentials_are_masked(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out
    assert REDACTED in out


def test_last_applied_configuration_of_a_secret_is_masked() -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db"},
        "data": {"password": "aHVudGVyMg==", "config.json": "eyJ4IjoxfQ=="},
    }
    line = f"kubectl.kubernetes.io/last-applied-configuration: {json.dumps(manifest)}"
    out = redact(line)
    assert "aHVudGVyMg==" not in out and "eyJ4IjoxfQ==" not in out
    assert '"password"' in out  # key names stay visible
    escaped = json.dumps(json.dumps(manifest))  # as it appears inside JSON output
    assert "aHVudGVyMg==" not in redact(escaped)


@pytest.mark.parametrize(
    "text",
    [
        "secretName: db-creds",
        "automountServiceAccountToken: true",
        "      DB_PASSWORD:  <set to the key 'password' in secret 'db'>  Optional: false",
        "password:  7 bytes",
        "Basic authentication failed for user bob",
        "token_ttl: 3600",
        "secretKeyRef:\n  key: password\n  name: db",
        "Reason: OOMKilled\nExit Code: 137",
        "passwordSecretRef: db-admin",
    ],
)
def test_troubleshooting_context_survives(text: str) -> None:
    assert redact(text) == text


def test_sensitive_key_names() -> None:
    for key in ("DB_PASSWORD", "apiKey", "AWS_SECRET_ACCESS_KEY", "client-secret", "token", "SECRET_KEY"):
        assert is_sensitive_key(key), key
    for key in ("secretName", "tokenExpirationSeconds", "passwordFile", "LEVEL", "author", "secretKeyRef"):
        assert not is_sensitive_key(key), key


def test_redact_object_masks_env_and_last_applied() -> None:
    pod = {
        "kind": "Pod",
        "metadata": {
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
                    {
                        "kind": "Pod",
                        "spec": {"containers": [{"env": [{"name": "DB_PASSWORD", "value": "inline-pass"}]}]},
                    }
                )
            }
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "env": [
                        {"name": "DB_PASSWORD", "value": "inline-pass"},
                        {"name": "LEVEL", "value": "debug"},
                        {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "token"}}},
                    ],
                }
            ]
        },
    }
    out = redact_object(pod)
    dumped = json.dumps(out)
    assert "inline-pass" not in dumped
    env = out["spec"]["containers"][0]["env"]
    assert env[1] == {"name": "LEVEL", "value": "debug"}
    assert env[2]["valueFrom"]["secretKeyRef"] == {"name": "t", "key": "token"}


# issue 29: layouts that leaked (kubectl describe, blanks and `;` in values, folded YAML,
# env in escaped JSON, `sshpass -p VALUE`, prose in Events)
LAYOUTS = [
    (
        "Data\n====\nDB_PASSWORD:\n----\nPl4nted one\nPl4nted two\n\nlevel:\n----\ninfo\n\nBinaryData\n====\n\nEvents:  <none>\n",
        "info",
    ),
    ("DB_PASSWORD:  Pl4nted with spaces;and more\nLEVEL:  info", "info"),
    ("password=Pl4nted with spaces;more user=bob", "user=bob"),
    ("Password=Pl4nted;Server=db", "Server=db"),
    ("spec:\n  password: Pl4nted-start\n    Pl4nted-folded\n  level: info", "level: info"),
    ('spec:\n  password: "Pl4nted-start\n    Pl4nted-folded"\n  level: info', "level: info"),
    (
        '"{\\"env\\":[{\\"name\\":\\"DB_PASSWORD\\",\\"value\\":\\"Pl4nted\\"},{\\"name\\":\\"L\\",\\"value\\":\\"info\\"}]}"',
        "info",
    ),
    ("- {name: DB_PASSWORD, value: Pl4nted}\n- {name: L, value: info}", "info"),
    ("sshpass -p Pl4nted ssh db -l info", "ssh db"),
    ("db login failed: password is Pl4nted", "db login failed"),
    ("connecting with password 'Pl4nted plain'", "connecting"),
    ("auth token Pl4nted9x rejected", "rejected"),
]


@pytest.mark.parametrize(("text", "kept"), LAYOUTS)
def test_layouts_of_issue_29_are_masked(text: str, kept: str) -> None:
    out = redact(text)
    assert "Pl4nted" not in out, out
    assert kept in out, out


@pytest.mark.parametrize(
    "text",
    [
        "password authentication failed for user app",
        'MountVolume.SetUp failed for volume "db" : secret "db-creds" not found',
        "token expired, refreshing",
        "Data\n====\npassword  18 bytes\ntoken:  1234 bytes",
    ],
)
def test_prose_about_credentials_stays_readable(text: str) -> None:
    assert redact(text) == text


def test_an_error_message_after_a_credential_word_stays_evidence() -> None:
    """An image pull's Event: `token: unexpected status ... 401 Unauthorized` is the failure,
    not a token (the evidence suite's image-pull-unauthorized lost it); a value that is one
    token-looking word, or quoted, is still masked."""
    message = (
        "failed to fetch anonymous token: unexpected status from GET request to "
        "https://private.registry.example.com/token: 401 Unauthorized"
    )
    assert redact(message) == message
    assert redact("token: 401 Unauthorized") == "token: 401 Unauthorized"
    assert redact("password: error!123") == "password: [REDACTED]"
    assert redact('DB_PASSWORD: "401 Unauthorized"') == 'DB_PASSWORD: "[REDACTED]"'
    assert redact("token: failed2login") == "token: [REDACTED]"
