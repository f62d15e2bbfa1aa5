"""Mask credential-looking values in any text before a model sees it.

Tools never read Secret data on purpose, but credentials also hide in places that are not
Secrets: env vars written inline in a pod spec, `--password=...` args, the
`last-applied-configuration` annotation of an applied Secret, connection strings and tokens in
logs. Every tool's output passes through `redact`, so a leak needs two bugs, not one.

The rules favour masking too much over too little, but keep what helps troubleshooting: the
key name stays visible (`DB_PASSWORD=[REDACTED]`), and so do references such as `secretName`
or `<set to the key 'password' in secret 'db'>`, which are not values.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["REDACTED", "redact", "is_sensitive_key", "redact_object"]

REDACTED = "[REDACTED]"

# Words that make a key name sensitive, matched against the key split into words
# (snake_case, kebab-case, dotted and camelCase all split).
_SENSITIVE_WORDS = frozenset(
    {
        "password", "passwd", "passphrase", "pwd", "pass", "secret", "secrets", "token", "tokens",
        "apikey", "credential", "credentials", "auth", "authorization", "cookie", "privatekey",
        "accesskey", "secretkey", "signature", "sas", "dsn",
    }
)
_SENSITIVE_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"),
                              ("client", "secret"), ("session", "key"), ("encryption", "key"),
                              ("signing", "key"), ("master", "key"), ("account", "key")})
# A sensitive word followed by one of these names a reference or a setting, not a value
# (`secretName`, `tokenFile`, `passwordSecretRef`, `tokenExpirationSeconds`).
_REFERENCE_SUFFIXES = frozenset(
    {
        "name", "names", "ref", "refs", "file", "files", "path", "paths", "dir", "mount", "seconds",
        "ttl", "id", "type", "types", "kind", "length", "expiration", "expiry", "count", "enabled",
        "mode", "policy", "provider", "selector", "namespace", "source", "volume", "keyref",
        "header", "audience", "audiences", "url", "endpoint", "format", "algorithm", "key",
    }
)
_SAFE_VALUES = frozenset(
    {"true", "false", "null", "none", "nil", "yes", "no", "", "[redacted]", "<none>", "<unset>", "<nil>", "<set"}
)

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


def is_sensitive_key(key: str) -> bool:
    """True when `key` names a credential value (DB_PASSWORD, apiKey, --client-secret)."""
    words = [w.lower() for w in _WORD_SPLIT.split(key) if w]
    if not words:
        return False
    sensitive_at = -1
    for i, word in enumerate(words):
        if word in _SENSITIVE_WORDS:
            sensitive_at = i
        if i and (words[i - 1], word) in _SENSITIVE_PAIRS:
            sensitive_at = i
    if sensitive_at < 0:
        return False
    # `secret_key` / `api_key` end in "key" but are values; "key" after a pair is not a suffix.
    tail = words[sensitive_at + 1 :]
    return not any(w in _REFERENCE_SUFFIXES for w in tail)


def _safe_value(value: str) -> bool:
    v = value.strip().strip("\"'").lower()
    return v in _SAFE_VALUES or v.startswith("<set to ") or v.startswith("[redacted")


# --- text rules -----------------------------------------------------------------------------

_PRIVATE_KEY = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----.*?(?:-----END \1-----|\Z)", re.DOTALL
)
# Escaped form, as private keys appear inside JSON strings.
_PRIVATE_KEY_ESCAPED = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----(?:\\n|[^\"])*?(?:-----END \1-----|(?=\"))"
)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")
_BEARER = re.compile(r"\b([Bb]earer)(\s+)([A-Za-z0-9._~+/=-]{8,})")
# Basic credentials are base64 and nearly always carry a digit or padding; plain words
# ("Basic authentication") do not.
_BASIC = re.compile(
    r"\b(Basic)(\s+)(?=[A-Za-z0-9+/]*(?:[0-9+/=]|[a-z][A-Z]|[A-Z][A-Z]))([A-Za-z0-9+/]{8,}={0,2})"
)
_AUTH_HEADER = re.compile(r"\b((?:Proxy-)?Authorization[\"']?\s*[:=]\s*[\"']?)([^\s\"'][^\n\r\"']*)", re.IGNORECASE)
_URL_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)([^\s:/@\"']+):([^\s@/\"']+)@")
_KNOWN_TOKENS = re.compile(
    r"\b(?:"
    r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}"  # AWS access key ids
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{30,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"  # OpenAI / Anthropic style keys
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r")"
)
# key<sep>value where the key is a credential name. The key may be quoted (JSON), a flag
# (--password=x), an env var (DB_PASSWORD=x, DB_PASSWORD: x) or a YAML/URL-query key. Only the
# key and separator are matched here; the value is read separately so a non-sensitive key never
# swallows a sensitive pair that follows it (`args: --password=x`).
_KEY_SEP = re.compile(
    r"""(?P<kq>\\?["']?)(?P<key>-{0,2}[A-Za-z_][A-Za-z0-9_.-]*)(?P=kq)(?P<sep>[ \t]*[=:][ \t]*)"""
)
_VALUE = re.compile(r"""(?P<vq>\\?["'])(?P<qval>.*?)(?P=vq)|(?P<val>[^\s,;&"'}\]\\]+)""")
# A flag followed by its value as the next argument: --password hunter2
_FLAG_SPACE = re.compile(r"(?P<key>--[A-Za-z][A-Za-z0-9_-]*)(?P<sep>[ \t]+)(?P<val>[^\s-][^\s]*)")
# Env list entries in YAML (`- name: X` then `value: y`) and JSON form.
_YAML_ENV = re.compile(
    r"(?P<head>name:[ \t]*[\"']?(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)[\"']?[ \t]*\n[ \t]*(?:-[ \t]+)?value:[ \t]*)(?P<val>[^\n]+)"
)
_JSON_ENV = re.compile(
    r"(?P<head>\"name\"\s*:\s*\"(?P<key>[^\"]+)\"\s*,\s*\"value\"\s*:\s*)\"(?P<val>(?:[^\"\\]|\\.)*)\""
)
# Secret manifests serialised into JSON (last-applied-configuration): mask every data value.
_SECRET_JSON_DATA = re.compile(r"(\\?\"(?:data|stringData)\\?\"\s*:\s*\{)([^{}]*)(\})")
_JSON_PAIR_VALUE = re.compile(r"(\\?\"[^\"\\]*\\?\"\s*:\s*)(\\?\")(?:[^\"\\]|\\[^\"])*(\\?\")")


def _mask_key_values(text: str) -> str:
    out: list[str] = []
    pos = 0
    while True:
        m = _KEY_SEP.search(text, pos)
        if m is None:
            out.append(text[pos:])
            return "".join(out)
        value = _VALUE.match(text, m.end())
        if value is None or not is_sensitive_key(m.group("key").lstrip("-")):
            out.append(text[pos : m.end()])
            pos = m.end()
            continue
        raw = value.group("qval") if value.group("vq") is not None else value.group("val")
        unquoted_size = value.group("val") is not None and text.startswith(" bytes", value.end())
        if _safe_value(raw or "") or unquoted_size:  # `password:  7 bytes` is kubectl describe's size
            out.append(text[pos : value.end()])
        elif value.group("vq") is not None:
            q = value.group("vq")
            out.append(f"{text[pos : m.end()]}{q}{REDACTED}{q}")
        else:
            out.append(f"{text[pos : m.end()]}{REDACTED}")
        pos = value.end()


def _mask_flag_space(m: re.Match[str]) -> str:
    if not is_sensitive_key(m.group("key").lstrip("-")) or _safe_value(m.group("val")):
        return m.group(0)
    return f"{m.group('key')}{m.group('sep')}{REDACTED}"


def _mask_env_entry(m: re.Match[str]) -> str:
    if not is_sensitive_key(m.group("key")) or _safe_value(m.group("val")):
        return m.group(0)
    if m.re is _JSON_ENV:
        return f'{m.group("head")}"{REDACTED}"'
    return f"{m.group('head')}{REDACTED}"


def _mask_secret_json(text: str) -> str:
    """Inside a serialised Secret, replace every data/stringData value."""
    if not re.search(r"\\?\"kind\\?\"\s*:\s*\\?\"Secret\\?\"", text):
        return text

    def data_block(m: re.Match[str]) -> str:
        inner = _JSON_PAIR_VALUE.sub(lambda p: f"{p.group(1)}{p.group(2)}{REDACTED}{p.group(3)}", m.group(2))
        return m.group(1) + inner + m.group(3)

    return _SECRET_JSON_DATA.sub(data_block, text)


def redact(text: str) -> str:
    """Return `text` with credential-looking values replaced by [REDACTED]."""
    if not text:
        return text
    text = _PRIVATE_KEY.sub(lambda m: f"-----BEGIN {m.group(1)}-----{REDACTED}-----END {m.group(1)}-----", text)
    text = _PRIVATE_KEY_ESCAPED.sub(lambda m: f"-----BEGIN {m.group(1)}-----{REDACTED}-----END {m.group(1)}-----", text)
    text = _mask_secret_json(text)
    text = _JWT.sub(REDACTED, text)
    text = _KNOWN_TOKENS.sub(REDACTED, text)
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:{REDACTED}@", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _BASIC.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _AUTH_HEADER.sub(lambda m: m.group(0) if _safe_value(m.group(2)) else f"{m.group(1)}{REDACTED}", text)
    text = _YAML_ENV.sub(_mask_env_entry, text)
    text = _JSON_ENV.sub(_mask_env_entry, text)
    text = _mask_key_values(text)
    text = _FLAG_SPACE.sub(_mask_flag_space, text)
    return text


def redact_object(obj: Any) -> Any:
    """Structurally mask a Kubernetes object (dicts/lists from JSON) before it is rendered.

    Env entries and map keys with credential names lose their values, and a
    `last-applied-configuration` annotation is re-serialised with the same masking, so the
    rendered object is safe even before the text rules run.
    """
    if isinstance(obj, list):
        return [redact_object(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out: dict[str, Any] = {}
    is_env_entry = isinstance(obj.get("name"), str) and "value" in obj and set(obj) <= {"name", "value", "valueFrom"}
    for key, value in obj.items():
        if is_env_entry and key == "value" and is_sensitive_key(obj["name"]) and isinstance(value, str) and not _safe_value(value):
            out[key] = REDACTED
        elif key == "kubectl.kubernetes.io/last-applied-configuration" and isinstance(value, str):
            out[key] = _redact_json_string(value)
        elif isinstance(value, str) and is_sensitive_key(key) and not _safe_value(value):
            out[key] = REDACTED
        else:
            out[key] = redact_object(value)
    if obj.get("kind") == "Secret":
        for field in ("data", "stringData"):
            if isinstance(obj.get(field), dict):
                out[field] = {k: REDACTED for k in obj[field]}
    return out


def _redact_json_string(value: str) -> str:
    try:
        parsed = json.loads(value)
    except ValueError:
        return redact(value)
    return json.dumps(redact_object(parsed), separators=(",", ":"))
