"""Arguments that reach credential files, however the path is spelled.

The operator's pod holds credentials in files: the ServiceAccount token, the model keys under
/etc/lestrade, a kubeconfig, and every process's environment under /proc. A path can reach them
through `./` and `..`, a relative path from an unknown working directory, `/proc/self/root`,
percent-encoding (URLs, `--raw` paths) or an unquoted glob that the runner expands. So each
argument is decoded and normalised before the match, and a glob is matched against the known
credential paths as a pattern.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from urllib.parse import unquote

__all__ = ["credential_path"]

_SENSITIVE = re.compile(
    r"(?:^|/)(?:var/)?run/secrets(?:/|$)"
    r"|kubernetes\.io/serviceaccount|serviceaccount/(?:token|ca\.crt|namespace)"
    r"|(?:^|/)\.kube(?:/|$)|kubeconfig|(?:^|/)\.lestrade(?:/|$)"
    r"|(?:^|/)etc/(?:shadow|gshadow|sudoers|lestrade)(?:/|$)"
    r"|(?:^|/)proc/[^/]*/(?:environ|mem|root|cwd|fd|fdinfo|map_files|task)(?:/|$)",
    re.IGNORECASE,
)
# Concrete paths (and their folders) a glob must not be able to match.
_KNOWN = (
    "/var/run/secrets/kubernetes.io/serviceaccount/token",
    "/run/secrets/kubernetes.io/serviceaccount/token",
    "/etc/lestrade/models/model_list.yaml",
    "/root/.kube/config",
    "/proc/1/environ",
    "/proc/self/environ",
    "/proc/1/root",
    "/etc/shadow",
)
_KNOWN_WITH_FOLDERS = sorted({"/".join(p.split("/")[:n]) for p in _KNOWN for n in range(3, p.count("/") + 2)})
_GLOB = re.compile(r"[*?\[]")


def _spellings(arg: str) -> set[str]:
    """The argument, percent-decoded, normalised as absolute and as relative to `/`.

    Only words that can be paths count: with a `/`, a leading `.` or glob characters (a bare
    word like `kubeconfig-template` names an object, not a file).
    """
    out = {arg}
    decoded = arg
    for _ in range(3):
        decoded = unquote(decoded)
        out.add(decoded)
    for text in list(out):
        text = re.sub(r"^[a-z]+://", "/", text)  # file:///var/run/...
        out.add(posixpath.normpath("/" + text.lstrip("/")))
    return {s for s in out if "/" in s[1:] or s.startswith(".") or _GLOB.search(s)} | (
        {posixpath.normpath("/" + arg)} if arg.startswith(".") else set()
    )


def credential_path(arg: str) -> str | None:
    """The credential location `arg` can reach, or None."""
    candidates = {arg}
    if "=" in arg:
        candidates.add(arg.split("=", 1)[1])  # --opt=PATH
    if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
        candidates.add(arg[2:])  # -fPATH
    for candidate in candidates:
        for spelling in _spellings(candidate):
            if _SENSITIVE.search(spelling):
                return spelling
            if _GLOB.search(spelling):
                pattern = posixpath.normpath("/" + spelling.lstrip("/")).split("/")
                for known in _KNOWN_WITH_FOLDERS:
                    parts = known.split("/")
                    # component by component: a glob's `*` never matches a `/`
                    if len(parts) == len(pattern) and all(map(fnmatch.fnmatchcase, parts, pattern)):
                        return known
    return None
