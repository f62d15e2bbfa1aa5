"""Mask credential-looking values in any text before a model sees it.

Tools never read Secret data on purpose, but credentials also hide in places that are not
Secrets: env vars written inline in a pod spec, `--password=...` args, the
`last-applied-configuration` annotation of an applied Secret, connection strings and tokens in
logs. Every tool's output passes through `redact`, so a leak needs two bugs, not one.

The rules favour masking too much over too little, but keep what helps troubleshooting: the
key name stays visible (`DB_PASSWORD=[REDACTED]`), and so do references such as `secretName`
or `<set to the key 'password' in secret 'db'>`, which are not values.

Linear time, because a log line is attacker-controlled and redaction must not stall a run:
- a rule that begins with a repeated character class only starts where such a run starts (a
  look-behind), so a run is scanned once per rule, not once per position;
- a rule that scans far (to the end of a value, a line or a block) always succeeds once it has
  started, and the scan continues after what it consumed;
- key names and other parts that can fail are bounded in length.
`bench/redact_bench.py` holds adversarial inputs for each rule. Input past `MAX_REDACT_CHARS`
is cut before redaction, so one call is bounded; `redact_async` runs it off the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from typing import Any

from lestrade.operator.tools.redact_tokens import TOKEN_PATTERNS

__all__ = ["REDACTED", "MAX_REDACT_CHARS", "redact", "redact_async", "is_sensitive_key", "redact_object"]

REDACTED = "[REDACTED]"
MAX_REDACT_CHARS = 2_000_000

# Words that make a key name sensitive, matched against the key split into words
# (snake_case, kebab-case, dotted and camelCase all split).
_SENSITIVE_WORDS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "pass",
        "secret",
        "secrets",
        "token",
        "tokens",
        "apikey",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "cookie",
        "privatekey",
        "accesskey",
        "secretkey",
        "signature",
        "sas",
        "dsn",
        "requirepass",
        "masterauth",
        "htpasswd",
        "dockerconfigjson",
        "dockercfg",
    }
)
# Run-together names (`PGPASSWORD`, `MYSQLPWD`, `GHTOKEN`): a single word that ends in one of these.
_SENSITIVE_ENDINGS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "privatekey",
    "secretkey",
    "accesskey",
    "credentials",
)
_SENSITIVE_PAIRS = frozenset(
    {
        ("api", "key"),
        ("access", "key"),
        ("private", "key"),
        ("secret", "key"),
        ("client", "secret"),
        ("session", "key"),
        ("encryption", "key"),
        ("signing", "key"),
        ("master", "key"),
        ("account", "key"),
        ("tls", "key"),
        ("ssh", "key"),
        ("auth", "key"),
        ("license", "key"),
    }
)
# A sensitive word followed by one of these names a reference or a setting, not a value
# (`secretName`, `tokenFile`, `passwordSecretRef`, `tokenExpirationSeconds`).
_REFERENCE_SUFFIXES = frozenset(
    {
        "name",
        "names",
        "ref",
        "refs",
        "file",
        "files",
        "path",
        "paths",
        "dir",
        "mount",
        "seconds",
        "ttl",
        "id",
        "type",
        "types",
        "kind",
        "length",
        "expiration",
        "expiry",
        "count",
        "enabled",
        "mode",
        "policy",
        "provider",
        "selector",
        "namespace",
        "source",
        "volume",
        "keyref",
        "header",
        "audience",
        "audiences",
        "url",
        "endpoint",
        "format",
        "algorithm",
        "key",
    }
)
_SAFE_VALUES = frozenset(
    {
        "true",
        "false",
        "null",
        "none",
        "nil",
        "yes",
        "no",
        "",
        "[redacted]",
        "<none>",
        "<unset>",
        "<nil>",
        "<set",
        "|",
        ">",
        "|-",
        ">-",
        "{}",
        "[]",
    }
)

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


def _word_is_sensitive(word: str) -> bool:
    return word in _SENSITIVE_WORDS or (len(word) > 6 and word.endswith(_SENSITIVE_ENDINGS))


@functools.lru_cache(maxsize=4096)  # every object read asks for the same few hundred keys
def is_sensitive_key(key: str) -> bool:
    """True when `key` names a credential value (DB_PASSWORD, apiKey, --client-secret, PGPASSWORD)."""
    words = [w.lower() for w in _WORD_SPLIT.split(key[:200]) if w]
    if not words:
        return False
    sensitive_at = -1
    for i, word in enumerate(words):
        if _word_is_sensitive(word):
            sensitive_at = i
        if i and (words[i - 1], word) in _SENSITIVE_PAIRS:
            sensitive_at = i
    if sensitive_at < 0:
        return False
    # `secret_key` / `api_key` end in "key" but are values; "key" after a pair is not a suffix.
    tail = words[sensitive_at + 1 :]
    return not any(w in _REFERENCE_SUFFIXES for w in tail)


_SIZE_PLACEHOLDER = re.compile(r"<\d+ bytes, value hidden>")  # what k8s_sanitize puts in place of Secret data


# An unquoted value that starts like an error message (an error word, then more words), not like
# a secret: `token: 401 Unauthorized`,
# `anonymous token: unexpected status from GET request ...` (an image pull's Event). Masking it
# loses the evidence of the failure (the evidence suite's image-pull-unauthorized caught it).
_MESSAGE_VALUE = re.compile(
    r"(?:[1-5]\d\d [A-Z][a-z]+\b|(?:unexpected|failed|unable|cannot|could not|error|denied|"
    r"expired|invalid|missing|not found|unauthorized|forbidden|timed out)[ \t]+[a-z])",
    re.IGNORECASE,
)
_MESSAGE_FIRST = frozenset("12345ufcedimntUFCEDIMNT\u0130\u0131")
"""What `_MESSAGE_VALUE` can start with (its words' first letters, the Unicode forms IGNORECASE
also takes for `i`): the regular expression runs only there, not once per credential pair."""


def _is_message(text: str, pos: int) -> bool:
    return text[pos : pos + 1] in _MESSAGE_FIRST and _MESSAGE_VALUE.match(text, pos) is not None


def _safe_value(value: str) -> bool:
    v = value.strip().strip("\"'").lower()
    if v in _SAFE_VALUES:
        return True
    first = v[:1]  # called once per candidate pair: the regex only where it can match
    if first == "<":
        return v.startswith("<set to ") or _SIZE_PLACEHOLDER.fullmatch(v) is not None
    return first == "[" and v.startswith("[redacted")


# --- blocks and tokens ----------------------------------------------------------------------

# PEM private keys and PGP private keys / messages, raw or inside a JSON string (`\n` escapes):
# the body runs to the END line, to the closing quote of the string, or to the end of the text.
_KEY_BLOCK = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?|PGP MESSAGE)-----"
    r"[^\"]*?(?:-----END (?P=label)-----|(?=\\?\")|\Z)"
)
_PUTTY_KEY = re.compile(r"PuTTY-User-Key-File-\d+:[^\n]*(?:\n[^\n]*){0,40}?\nPrivate-MAC:[^\n]*")
_BEARER = re.compile(r"(?<![A-Za-z0-9_-])([Bb]earer)([ \t]+)([A-Za-z0-9._~+/=-]{8,})")
# Basic credentials are base64 and nearly always carry a digit or padding; plain words
# ("Basic authentication") do not.
_BASIC = re.compile(
    r"(?<![A-Za-z0-9_-])(Basic)([ \t]+)(?=[A-Za-z0-9+/]{0,200}(?:[0-9+/=]|[a-z][A-Z]|[A-Z][A-Z]))([A-Za-z0-9+/]{8,}={0,2})"
)
_AUTH_HEADER = re.compile(
    r"(?<![A-Za-z0-9_-])(?=[AaPp])((?:Proxy-)?Authorization[\"']?[ \t]*[:=][ \t]*[\"']?)([^\s\"'][^\n\r\"']*)",
    re.IGNORECASE,
)
# scheme://user:password@host, also with an empty user (redis://:pw@host). The password runs to
# the last `@` before the next `/` or blank, as unescaped `@` do occur in passwords.
_URL_USERINFO = re.compile(r"(?<![A-Za-z0-9+.-])([a-zA-Z][a-zA-Z0-9+.-]{0,30}://)([^\s:/@\"']{0,256}):([^\s/\"']+)@")
_CLI_PASSWORD = re.compile(
    r"(?<!\S)(?P<head>(?:(?:mysql|mysqldump|mysqladmin|mariadb|sshpass)(?:[ \t]+\S{1,256}){0,12}?[ \t]+-p"
    r"|sshpass(?:[ \t]+\S{1,256}){0,12}?[ \t]+-p[ \t]*"
    r"|redis-cli(?:[ \t]+\S{1,256}){0,12}?[ \t]+-a[ \t]*"
    r"|curl(?:[ \t]+\S{1,256}){0,12}?[ \t]+(?:-u|--user)[ \t]*[\"']?[^\s:\"']{1,256}:))(?P<val>[^\s-]\S*)"
)
_DOCKERFILE_ENV = re.compile(
    r"(?m)^(?P<head>[ \t]*ENV[ \t]+(?P<key>[A-Za-z_][A-Za-z0-9_]{0,127})[ \t]+)(?P<val>[^\n]+)"
)
_NETRC = re.compile(
    r"(?<!\S)(?P<head>(?:login|machine|account)[ \t]+\S{1,256}[ \t]+(?:password|passwd)[ \t]+)(?P<val>\S+)"
    r"|(?m:^(?P<head2>[ \t]*(?:password|passwd)[ \t]+)(?P<val2>\S+)[ \t]*$)"
)


def _mask_tokens(text: str) -> str:
    for pattern, group in TOKEN_PATTERNS:
        if group:
            text = pattern.sub(
                lambda m: m.group(0)[: m.start(1) - m.start()] + REDACTED + m.group(0)[m.end(1) - m.start() :], text
            )
        else:
            text = pattern.sub(REDACTED, text)
    return text


# Words a pattern cannot match without (it is case-sensitive): a text without them skips the
# pattern's scan, which costs as much per MB without a match as with one.
_CLI_WORDS = ("mysql", "mariadb", "sshpass", "redis-cli", "curl")


def _mask_cli_and_netrc(text: str) -> str:
    if any(word in text for word in _CLI_WORDS):
        text = _CLI_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text)
    if "ENV" in text:
        text = _DOCKERFILE_ENV.sub(
            lambda m: m.group("head") + REDACTED if is_sensitive_key(m.group("key")) else m.group(0), text
        )
    if "passw" not in text:  # password, passwd
        return text
    return _NETRC.sub(lambda m: (m.group("head") or m.group("head2")) + REDACTED, text)


# --- key/value shapes -----------------------------------------------------------------------

# A cheap look-ahead: only names holding one of these fragments can be sensitive, so the
# Python-level check runs for candidates only (a line of `a=a=a=...` stays fast).
_CANDIDATE = (
    r"(?=[A-Za-z0-9_.\-]{0,127}?(?i:pass|pwd|secret|token|key|auth|cred|cookie|sig|sas|dsn|dockercfg|dockerconfig))"
)

# key<sep>value where the key is a credential name. The key may be quoted (JSON), a flag
# (--password=x), an env var (DB_PASSWORD=x, DB_PASSWORD: x) or a YAML/URL-query key. Only the
# key and separator are matched here; the value is read separately so a non-sensitive key never
# swallows a sensitive pair that follows it (`args: --password=x`).
_KEY_SEP = re.compile(
    r"""(?<![A-Za-z0-9_.\-])(?P<kq>\\?["']?)(?=-{0,2}[A-Za-z_])"""
    # Only where a separator follows the whole word (a condition of the match below, so the
    # same matches): the costly credential-word lookahead then runs at the few words an `=` or
    # `:` follows, not at every word of prose (which cost a third of a MB's time).
    r"""(?=[A-Za-z0-9_.\-]{1,130}+\\?["']?[ \t]{0,32}[=:])"""
    + _CANDIDATE
    + r"""(?P<key>-{0,2}[A-Za-z_][A-Za-z0-9_.\-]{0,127})(?P=kq)"""
    r"""(?P<sep>[ \t]{0,32}(?::=|=>|[=:])[ \t]*)"""
)
_VALUE = re.compile(
    r"""(?P<eq>\\")(?P<eval>(?:[^"\\\n]|\\(?!")[^\n])*+)(?:\\")?"""  # \"...\" inside a JSON string
    r"""|(?P<dq>")(?P<dval>(?:[^"\\\n]|\\.)*+)"?"""
    r"""|(?P<sq>')(?P<sval>[^'\n]*+)'?"""
    r"""|(?P<val>[^\s,;&"'}\]\\{\[][^\s,;&"'}\]\\]*+)"""  # `{`/`[` open a structure, not a value
)
_BLOCK_INDICATOR = re.compile(r"[|>][-+0-9]{0,3}[ \t]*(?:#[^\n]*)?(?=\n|\Z)")
_INDENT = re.compile(r"[ \t]*")


def _line_indent(text: str, pos: int) -> int | None:
    """Indentation of the line holding `pos` (None when the line start is far away)."""
    start = text.rfind("\n", max(0, pos - 512), pos) + 1
    if start == 0 and pos > 512:
        return None
    return _INDENT.match(text, start).end() - start  # type: ignore[union-attr]


def _yaml_block_end(text: str, value_end: int, key_pos: int) -> int | None:
    """End of a YAML block scalar (`key: |` + more-indented lines), or None."""
    indent = _line_indent(text, key_pos)
    if indent is None:
        return None
    pos = value_end
    while pos < len(text) and text[pos] == "\n":
        nl = text.find("\n", pos + 1)
        line_end = len(text) if nl < 0 else nl
        line = text[pos + 1 : line_end]
        if line.strip() and _INDENT.match(line).end() <= indent:  # type: ignore[union-attr]
            break
        pos = line_end
    return pos


# After `KEY=value`, the value goes on over blanks, `;` and `,` unless a new `key=` starts there
# (`password=my pass;word user=x`); the look-ahead is bounded, so the scan stays linear.
_MORE_VALUE = re.compile(r"""(?:[ \t;,]{1,8}(?!-{0,2}[A-Za-z_][A-Za-z0-9_.\-]{0,64}(?:=|:[ \t]))[^\s;,&"'}\]\\]+)*+""")


def _flow_context(text: str, pos: int) -> bool:
    """Is `pos` inside `{...}` or `[...]` opened earlier on its line (YAML flow, inline JSON)?"""
    start = text.rfind("\n", max(0, pos - 512), pos) + 1
    return text.find("{", start, pos) >= 0 or text.find("[", start, pos) >= 0


def _continuation_end(text: str, line_end: int, column: int) -> int:
    """End of the lines after `line_end` indented deeper than `column` (a folded YAML scalar)."""
    pos = line_end
    while pos < len(text) and text[pos] == "\n":
        nl = text.find("\n", pos + 1)
        end = len(text) if nl < 0 else nl
        line = text[pos + 1 : end]
        if not line.strip() or _INDENT.match(line).end() <= column:  # type: ignore[union-attr]
            break
        pos = end
    return pos


class _LineEnds:
    """The end of the line holding a position, for positions met in increasing order: one
    search per line, not one per key on it (a 1 MB line of `password: x,` was quadratic)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.start = 0
        self.end = -1

    def __call__(self, pos: int) -> int:
        if not self.start <= pos <= self.end:
            nl = self.text.find("\n", pos)
            self.start, self.end = pos, len(self.text) if nl < 0 else nl
        return self.end


def _unquoted_end(text: str, m: re.Match[str], value: re.Match[str], line_ends: _LineEnds) -> int:
    """Where an unquoted credential value ends: after `:` (YAML, describe) at the end of its
    line and of the lines folded below it; after `=` at the next `key=` or the line's end."""
    line_end = line_ends(value.end())
    if m.group("sep").strip() == ":":
        # a key that starts a line, an item or a word (`  password: x`, `- token: x`); not one
        # inside a colon path (`system:serviceaccount:ns-credentials:name`): that one's value
        # ends at the first blank, as it cannot be folded YAML
        before = text[m.start() - 1] if m.start() else "\n"
        if before not in " \t\n{,[":
            return value.end()
        if not _flow_context(text, m.start()):
            column = m.start() - (text.rfind("\n", 0, m.start()) + 1)
            return _continuation_end(text, line_end, column)
    more = _MORE_VALUE.match(text, value.end(), line_end)  # always matches (maybe empty)
    return more.end() if more else value.end()


def _mask_key_values(text: str) -> str:
    out: list[str] = []
    pos = 0
    line_ends = _LineEnds(text)
    while True:
        m = _KEY_SEP.search(text, pos)
        if m is None:
            out.append(text[pos:])
            return "".join(out)
        if not is_sensitive_key(m.group("key").lstrip("-")):
            out.append(text[pos : m.end()])
            pos = m.end()
            continue
        value = _VALUE.match(text, m.end())
        if value is None:
            out.append(text[pos : m.end()])
            pos = m.end()
            continue
        # (eq, eval, dq, dval, sq, sval, val): one call, not one per group (this runs per pair)
        eq, _, dq, _, sq, _, val = value.groups()
        raw = value.group(value.lastindex or 0)
        quote = eq or dq or sq or ""
        head = text[pos : m.end()]
        if val is not None and val[0] in "|>" and (block := _BLOCK_INDICATOR.match(text, m.end())):
            end = _yaml_block_end(text, block.end(), m.start())
            if end is not None:
                out.append(f"{head}{val} {REDACTED}")
                pos = end
                continue
        unquoted_size = val is not None and text.startswith(" bytes", value.end())
        message = not quote and _is_message(text, value.start(value.lastindex or 0))
        if _safe_value(raw or "") or unquoted_size or message:  # `password:  7 bytes` is kubectl describe's size
            out.append(text[pos : value.end()])
            pos = value.end()
            continue
        if quote:
            out.append(f"{head}{quote}{REDACTED}{quote}")
            pos = value.end()
            if not value.group().endswith(quote) or len(value.group()) == 1:
                # an unclosed quote: the string goes on, folded, on the lines below
                column = m.start() - (text.rfind("\n", 0, m.start()) + 1)
                pos = _continuation_end(text, line_ends(pos), column)
            continue
        out.append(f"{head}{REDACTED}")
        pos = _unquoted_end(text, m, value, line_ends)


# `kubectl describe configmap`: each key as `KEY:`, a `----` line, then the value on the lines
# below, up to the next such header, the `BinaryData` section or `Events:`.
_DESCRIBE_DATA_KEY = re.compile(r"(?m)^(?P<key>[^\s:][^\n:]{0,252}):[ \t]*\n-{3,}[ \t]*(?:\n|\Z)")
_DESCRIBE_DATA_END = re.compile(r"(?m)^(?:BinaryData|Events:|Data)[ \t]*$")


def _mask_describe_data(text: str) -> str:
    if "\n---" not in text:
        return text
    headers = list(_DESCRIBE_DATA_KEY.finditer(text))
    if not headers:
        return text
    out: list[str] = []
    pos = 0
    for i, header in enumerate(headers):
        if header.start() < pos or not is_sensitive_key(header.group("key").strip()):
            continue
        limit = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        stop = _DESCRIBE_DATA_END.search(text, header.end(), limit)
        end = stop.start() if stop else limit
        out.append(text[pos : header.end()] + REDACTED + "\n\n")
        pos = end
    out.append(text[pos:])
    return "".join(out)


# Credentials in prose (an Event's message, a log line): `password is x`, `with password 'x'`,
# `token abc123`. After a connecting word any value is masked; right after the word only a
# quoted one or one that does not read as a word (digits, symbols, mixed case), so
# `password authentication failed` stays readable. `secret` is left out: in Kubernetes
# messages it names an object (`secret "db" not found`).
_PROSE = re.compile(
    r"(?i:(?<![A-Za-z0-9_.\-])(?P<word>passwords?|passwd|passphrase|pwd|tokens?|api[ _-]?keys?|credentials?))"
    r"(?P<gap>[ \t]+(?:(?i:is|was|set to|to|of|=)[ \t]+)?)"
    r"(?P<val>\"[^\"\n]{1,256}\"|'[^'\n]{1,256}'|[^\s\"'=:]{1,256})"
)
_PLAIN_WORD = re.compile(r"[A-Za-z]+[.,;:!?)]?|[a-z]+-[a-z]+")
_PROSE_KEEP = frozenset(
    {
        "is",
        "was",
        "for",
        "and",
        "or",
        "the",
        "a",
        "an",
        "in",
        "on",
        "not",
        "has",
        "have",
        "expired",
        "invalid",
        "required",
        "missing",
        "from",
        "with",
        "request",
        "refresh",
    }
)


def _mask_prose(m: re.Match[str]) -> str:
    # Called once per credential word of a text (100,000 times in a MB of `token a1 `): the
    # cheap tests first, the regular expressions last.
    word, gap, val = m.groups()
    first = val[0]
    quoted = first in "\"'"
    if first in "[<" or _safe_value(val) or val.lower().strip(".,;:!?") in _PROSE_KEEP:
        return m.group(0)
    if m.string.startswith(" bytes", m.end()):  # `password  7 bytes`: kubectl describe's size
        return m.group(0)
    if not quoted:
        if _is_message(m.string, m.start(3)):  # `token: 401 Unauthorized`
            return m.group(0)
        connected = not gap.isspace()  # a connecting word (`is`, `set to`, `=`) after the blanks
        if not connected and _PLAIN_WORD.fullmatch(val) and not any(c.isupper() for c in val[1:]):
            return m.group(0)
        return f"{word}{gap}{REDACTED}"
    return f"{word}{gap}{first}{REDACTED}{first}"


# A flag followed by its value as the next argument: `--password hunter2`, and the same as list
# items (`- --password` / `- hunter2` in YAML, `"--password", "hunter2"` in JSON, one per line
# in `kubectl describe`).
_FLAG_NEXT = re.compile(
    r"""(?<![A-Za-z0-9_\-])(?P<key>--?""" + _CANDIDATE + r"""[A-Za-z][A-Za-z0-9_\-]{0,63})"""
    r"""(?P<sep>["']?(?:[ \t]*,[ \t]*\n?[ \t]*|[ \t]*\n[ \t]*(?:-[ \t]+)?|[ \t]+)["']?)"""
    r"""(?P<val>[^\s"',\]\-][^\s"',\]]*)"""
)


def _mask_flag_next(m: re.Match[str]) -> str:
    if not is_sensitive_key(m.group("key").lstrip("-")) or _safe_value(m.group("val")):
        return m.group(0)
    return f"{m.group('key')}{m.group('sep')}{REDACTED}"


# Env list entries in YAML (`- name: X` then `value: y`) and JSON forms, and name/value pairs
# as XML attributes (`<add key="DbPassword" value="x"/>`).
_YAML_ENV = re.compile(
    r"(?<![A-Za-z0-9_-])(?P<head>name:[ \t]{0,8}[\"']?(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{0,127})[\"']?[ \t]*\n"
    r"[ \t]*(?:-[ \t]+)?value:[ \t]*)(?P<val>[^\n]+)"
)
_JSON_ENV = re.compile(
    r"(?P<head>(?P<q>\\{0,3}\")name(?P=q)[ \t]*:[ \t]*(?P=q)(?P<key>[^\"\\\n]{1,128})(?P=q)[ \t]*,[ \t\n]*(?P=q)value(?P=q)"
    r"[ \t]*:[ \t]*(?P=q))(?P<val>(?:[^\"\\\n]|\\(?!\")[^\n])*+)(?P=q)"
)
_FLOW_ENV = re.compile(
    r"(?P<head>\{[ \t]*name:[ \t]*[\"']?(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{0,127})[\"']?[ \t]*,[ \t]*value:[ \t]*)"
    r"(?P<val>\"[^\"\n]*\"|'[^'\n]*'|[^,}\n]+)"
)
_JSON_ENV_REVERSED = re.compile(
    r"(?P<head>\"value\"[ \t]*:[ \t]*)\"(?P<val>(?:[^\"\\\n]|\\.)*+)\"(?P<tail>[ \t]*,[ \t\n]*\"name\"[ \t]*:[ \t]*\"(?P<key>[^\"\n]{1,128})\")"
)
_XML_ATTR_PAIR = re.compile(
    r"(?P<head>(?:key|name)[ \t]*=[ \t]*(?P<q>[\"'])(?P<key>[^\"'\n]{1,128})(?P=q)[ \t]+value[ \t]*=[ \t]*(?P<q2>[\"']))"
    r"(?P<val>[^\"'\n]*+)(?P=q2)"
)
_XML_ELEMENT = re.compile(
    r"<(?P<tag>[A-Za-z_][A-Za-z0-9_.:\-]{0,63})(?P<attrs>[^<>]{0,512})>(?P<val>[^<]{1,65536})</(?P=tag)>"
)


def _mask_named_value(m: re.Match[str]) -> str:
    if not is_sensitive_key(m.group("key")) or _safe_value(m.group("val")):
        return m.group(0)
    if m.re is _YAML_ENV:
        return f"{m.group('head')}{REDACTED}"
    if m.re is _JSON_ENV_REVERSED:
        return f'{m.group("head")}"{REDACTED}"{m.group("tail")}'
    if m.re is _XML_ATTR_PAIR:
        return f"{m.group('head')}{REDACTED}{m.group('q2')}"
    if m.re is _FLOW_ENV:
        return f"{m.group('head')}{REDACTED}"
    if m.re is _JSON_ENV:
        return f"{m.group('head')}{REDACTED}{m.group('q')}"
    return f'{m.group("head")}"{REDACTED}"'


def _mask_xml_element(m: re.Match[str]) -> str:
    tag = m.group("tag").rsplit(":", 1)[-1]
    if not is_sensitive_key(tag) or _safe_value(m.group("val")):
        return m.group(0)
    return f"<{m.group('tag')}{m.group('attrs')}>{REDACTED}</{m.group('tag')}>"


# --- serialised Secrets -----------------------------------------------------------------------

# Secret manifests serialised into JSON (last-applied-configuration): mask every data value.
_SECRET_KIND_JSON = re.compile(r"\\?\"kind\\?\"[ \t]*:[ \t]*\\?\"Secret\\?\"")
_SECRET_JSON_DATA = re.compile(r"(\\?\"(?:data|stringData)\\?\"[ \t\n]*:[ \t\n]*\{)([^{}]*)(\})")
_JSON_PAIR_VALUE = re.compile(r"(\\?\"[^\"\\\n]{0,256}\\?\"[ \t\n]*:[ \t\n]*)(\\?\")(?:[^\"\\]|\\[^\"])*+(\\?\")")
# ...and as YAML (a manifest in a ConfigMap, a log, a `cat`ed file).
_SECRET_KIND_YAML = re.compile(r"(?m)^[ \t-]*kind:[ \t]*[\"']?Secret[\"']?[ \t]*$")
_YAML_DATA_KEY = re.compile(r"(?m)^(?P<indent>[ \t]*)(?:data|stringData):[ \t]*(?P<flow>\{[^\n]*)?$")
_YAML_ENTRY = re.compile(r"(?P<head>[ \t]*[^\s:#][^:\n]{0,255}:[ \t]*)(?P<val>[^\n]*)")


def _mask_secret_json(text: str) -> str:
    if not _SECRET_KIND_JSON.search(text):
        return text

    def data_block(m: re.Match[str]) -> str:
        inner = _JSON_PAIR_VALUE.sub(lambda p: f"{p.group(1)}{p.group(2)}{REDACTED}{p.group(3)}", m.group(2))
        return m.group(1) + inner + m.group(3)

    return _SECRET_JSON_DATA.sub(data_block, text)


def _mask_secret_yaml(text: str) -> str:
    """In text that holds a `kind: Secret` YAML document, mask the values under data/stringData."""
    if not _SECRET_KIND_YAML.search(text):
        return text
    out: list[str] = []
    pos = 0
    # plain string operations per line, set up once: a MB of one-entry data blocks is 80,000
    # blocks (the regular expression only for the lines inside a block)
    size, find, entry_of, append = len(text), text.find, _YAML_ENTRY.fullmatch, out.append
    for m in _YAML_DATA_KEY.finditer(text):
        start, pos_end = m.span()
        if start < pos:
            continue
        raw_indent, flow = m.groups()
        append(text[pos:pos_end] if not flow else text[pos : m.start("flow")] + "{" + REDACTED + "}")
        pos = pos_end
        indent = len(raw_indent)
        while pos < size and text[pos] == "\n":
            nl = find("\n", pos + 1)
            end = size if nl < 0 else nl
            line = text[pos + 1 : end]
            content = line.lstrip(" \t")
            blank = not content.strip()
            if not blank and len(line) - len(content) <= indent:
                break
            entry = entry_of(line)
            value = entry.group("val").strip() if entry else ""
            if entry and value and value[0] not in "|>" and not _safe_value(value):
                append("\n" + entry.group("head") + REDACTED)
            elif entry or blank:
                append("\n" + line)
            else:
                append("\n" + line[: len(line) - len(content)] + REDACTED)  # a block scalar's content
            pos = end
    out.append(text[pos:])
    return "".join(out)


# --- entry points -----------------------------------------------------------------------------


def redact(text: str, limit: int = MAX_REDACT_CHARS) -> str:
    """Return `text` with credential-looking values replaced by [REDACTED] (bounded, linear).

    Text past `limit` characters is dropped, never passed on unredacted.
    """
    if not text:
        return text
    if len(text) > limit:
        dropped = len(text) - limit
        text = text[:limit] + f"\n[... {dropped} characters dropped before redaction]"
    text = _KEY_BLOCK.sub(
        lambda m: f"-----BEGIN {m.group('label')}-----{REDACTED}-----END {m.group('label')}-----", text
    )
    text = _PUTTY_KEY.sub(REDACTED, text)
    text = _mask_secret_json(text)
    text = _mask_secret_yaml(text)
    text = _mask_tokens(text)
    if "://" in text:
        text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:{REDACTED}@", text)
    if "earer" in text:  # [Bb]earer
        text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    if "Basic" in text:
        text = _BASIC.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _AUTH_HEADER.sub(lambda m: m.group(0) if _safe_value(m.group(2)) else f"{m.group(1)}{REDACTED}", text)
    text = _PROSE.sub(_mask_prose, text)  # before netrc's `login x password y`, which reads `is` as y
    text = _mask_cli_and_netrc(text)
    if "value" in text:  # every name/value shape spells it
        for pattern in (_YAML_ENV, _JSON_ENV, _JSON_ENV_REVERSED, _XML_ATTR_PAIR, _FLOW_ENV):
            text = pattern.sub(_mask_named_value, text)
    if "</" in text:
        text = _XML_ELEMENT.sub(_mask_xml_element, text)
    text = _mask_describe_data(text)
    text = _mask_key_values(text)
    text = _FLAG_NEXT.sub(_mask_flag_next, text)
    return text


async def redact_async(text: str, limit: int = MAX_REDACT_CHARS) -> str:
    """`redact` in a worker thread, so a large output never blocks the event loop."""
    if len(text) < 4096:
        return redact(text, limit)  # cheaper than a thread hop
    return await asyncio.to_thread(redact, text, limit)


def redact_object(obj: Any) -> Any:
    """Structurally mask a Kubernetes object (dicts/lists from JSON) before it is rendered.

    A value under a credential-named key (a ConfigMap's `DB_PASSWORD`, an annotation, a CRD's
    `password: 1234`) is masked whole, whatever its shape: multi-line, PEM, with blanks, a
    number, a list of strings. So are env entries with credential names, the value after a
    credential flag in an argument list (`["--password", "x"]`, `["sshpass", "-p", "x"]`), and
    a `last-applied-configuration` annotation is re-serialised with the same masking. Every
    other string goes through the text rules, so a value rendered without its key (jsonpath,
    custom-columns) is masked already: the rendered object is safe before any text rule runs.
    """
    if isinstance(obj, list):
        return _redact_list(obj)
    if isinstance(obj, str):
        if len(obj) <= 4:
            return obj
        return _redact_field(obj) if len(obj) <= _FIELD_CACHE_CHARS else redact(obj)
    if not isinstance(obj, dict):
        return obj
    out: dict[str, Any] = {}
    is_env_entry = isinstance(obj.get("name"), str) and "value" in obj and set(obj) <= {"name", "value", "valueFrom"}
    for key, value in obj.items():
        if is_env_entry and key == "value" and is_sensitive_key(obj["name"]):
            out[key] = _masked_whole(value)
        elif key == "kubectl.kubernetes.io/last-applied-configuration" and isinstance(value, str):
            out[key] = _redact_json_string(value)
        elif isinstance(key, str) and is_sensitive_key(key) and not isinstance(value, dict):
            out[key] = _masked_whole(value)
        else:
            out[key] = redact_object(value)
    if obj.get("kind") == "Secret":
        for field in ("data", "stringData"):
            if isinstance(obj.get(field), dict):
                out[field] = {k: REDACTED for k in obj[field]}
    return out


_FIELD_CACHE_CHARS = 256


@functools.lru_cache(maxsize=8192)
def _redact_field(value: str) -> str:
    """`redact` of a short field value, remembered: objects repeat most of theirs (images, names,
    labels, reasons) from one read to the next, and each runs every text rule (at most ~5 MB)."""
    return redact(value)


def _masked_whole(value: Any) -> Any:
    """A credential's value, masked whatever its type (booleans, null and references kept)."""
    if isinstance(value, list):
        return [_masked_whole(v) for v in value]
    if isinstance(value, dict):
        return redact_object(value)
    if value is None or isinstance(value, bool) or (isinstance(value, str) and _safe_value(value)):
        return value
    return REDACTED


# `sshpass -p PASSWORD`, `mysql -p PASSWORD` style tools, as separate list items.
_SHORT_PASSWORD_FLAGS = {
    "sshpass": ("-p",),
    "redis-cli": ("-a",),
    "mysql": ("-p",),
    "mysqldump": ("-p",),
    "mysqladmin": ("-p",),
    "mariadb": ("-p",),
    "htpasswd": ("-b",),
}


def _redact_list(items: list[Any]) -> list[Any]:
    out = [redact_object(v) for v in items]
    programs = {str(v).rsplit("/", 1)[-1] for v in items if isinstance(v, str)}
    short = {flag for program, flags in _SHORT_PASSWORD_FLAGS.items() if program in programs for flag in flags}
    for i, item in enumerate(items[:-1]):
        if not isinstance(item, str) or not item.startswith("-") or "=" in item or not isinstance(items[i + 1], str):
            continue
        if item in short or is_sensitive_key(item.lstrip("-")):
            if not _safe_value(items[i + 1]) and not items[i + 1].startswith("-"):
                out[i + 1] = REDACTED
    return out


def _redact_json_string(value: str) -> str:
    try:
        parsed = json.loads(value)
    except ValueError:
        return redact(value)
    return json.dumps(redact_object(parsed), separators=(",", ":"))
