"""Keeps tool processes away from the operator's credentials, by construction (Linux Landlock).

A command the bash tool runs is a child of the operator and, without more, could read whatever
the operator can: its ServiceAccount token (`/var/run/secrets/...`), its kubeconfig (under
`make run`: the admin one), the model list with API keys (`/etc/lestrade/models`), and its
environment and memory through `/proc/<pid>/`. Parsing the command cannot promise that much, so
each child confines itself before `exec` with Landlock (Linux 5.13+, no privileges needed;
inherited by everything it starts, and it cannot be undone):

- files: read and execute only below the system folders (`/usr`, `/bin`, `/lib*`, `/etc`
  except credential folders such as `/etc/lestrade`, `/etc/kubernetes`, `/etc/ssl/private`),
  the folders of the allowed programs and the tools' own folders; read and write only in the
  tools' private work folder. Nothing else — `/proc`, `/sys`, `/var`, `/tmp`, `/home`, `/root`,
  the operator's working folder — can be opened at all;
- network (Linux 6.7+): TCP connections only to the listed ports (the API server's), no
  listening sockets;
- scope (Linux 6.12+): no signals to, and no abstract unix sockets of, processes outside the
  sandbox (the operator).

Landlock also forbids ptrace of processes outside the sandbox. When the kernel has no Landlock,
`ToolSandbox.available` is false and the caller must refuse to run tool processes.

No maintained Python binding exists (the `landlock` package is a pre-release), and the
interface is three system calls, so they are called here through ctypes.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["ToolSandbox", "landlock_abi", "SYSTEM_READ_ROOTS", "HIDDEN_SYSTEM_PATHS"]

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on every arch
_CREATE_RULESET_VERSION = 1
_PR_SET_NO_NEW_PRIVS = 38
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2

_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_ALL_V1 = (1 << 13) - 1  # execute .. make_sym
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1

SYSTEM_READ_ROOTS: tuple[str, ...] = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
)
HIDDEN_SYSTEM_PATHS: tuple[str, ...] = (
    "/etc/lestrade",
    "/etc/kubernetes",
    "/etc/ssl/private",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/ssh",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/usr/local/etc/lestrade",
)
_DEVICES_RW = ("/dev/null", "/dev/zero")
_DEVICES_R = ("/dev/urandom", "/dev/random")

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    version = _syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _fs_rights(abi: int) -> int:
    rights = _FS_ALL_V1
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    if abi >= 5:
        rights |= _IOCTL_DEV
    return rights


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _allowed_parts(root: Path, hidden: list[Path]) -> list[Path]:
    """`root` minus the hidden paths below it: root itself, or its children recursively."""
    inside = [h for h in hidden if _within(h, root)]
    if not inside:
        return [root]
    if root in inside or not root.is_dir() or root.is_symlink():
        return []
    parts: list[Path] = []
    for child in sorted(root.iterdir()):
        parts.extend(_allowed_parts(child, inside))
    return parts


class ToolSandbox:
    """A Landlock ruleset built once in the operator; `preexec` applies it in each child."""

    def __init__(
        self,
        *,
        read: Iterable[str | os.PathLike[str]] = (),
        write: Iterable[str | os.PathLike[str]] = (),
        hidden: Iterable[str | os.PathLike[str]] = (),
        connect_ports: Iterable[int] | None = None,
        system: bool = True,
        list_only: Iterable[str | os.PathLike[str]] = (),
    ) -> None:
        """`read`: folders or files to read and execute; `write`: folders to read and write;
        `hidden`: paths to keep out even below an allowed folder (credentials); with
        `connect_ports`, TCP connections go only to those ports; `list_only`: folders whose
        entries (and those of the folders below) may be listed, not read - a folder split
        around a hidden path (rlm's standard library without site-packages) stays listable."""
        self.abi = landlock_abi()
        hide = [Path(os.path.realpath(p)) for p in (*HIDDEN_SYSTEM_PATHS, *hidden)]
        reads = [Path(os.path.realpath(p)) for p in (*(SYSTEM_READ_ROOTS if system else ()), *read)]
        writes = [Path(os.path.realpath(p)) for p in write]
        self.read_paths = [p for root in reads for p in _allowed_parts(root, hide) if p.exists()]
        self.write_paths = [p for root in writes for p in _allowed_parts(root, hide) if p.exists()]
        self.list_paths = [Path(os.path.realpath(p)) for p in list_only if os.path.isdir(p)]
        self.hidden = hide
        self.connect_ports = None if connect_ports is None else sorted(set(connect_ports))
        self._fd = self._build() if self.abi else -1

    @property
    def available(self) -> bool:
        return self._fd >= 0

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)
            self._fd = -1

    def permits(self, path: str | os.PathLike[str], *, write: bool = False) -> bool:
        """Whether a child could open `path` (used for redirections, which the operator opens)."""
        real = Path(os.path.realpath(path))
        if any(_within(real, h) for h in self.hidden):
            return False
        roots = self.write_paths if write else [*self.read_paths, *self.write_paths]
        if not write and str(real) in _DEVICES_R:
            return True
        return str(real) in _DEVICES_RW or any(_within(real, r) for r in roots)

    def _build(self) -> int:
        fs_all = _fs_rights(self.abi)
        handled = [fs_all]
        if self.abi >= 4:
            handled.append((_NET_BIND_TCP | _NET_CONNECT_TCP) if self.connect_ports is not None else 0)
        if self.abi >= 6:
            handled.append(_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL)
        attr = struct.pack(f"={len(handled)}Q", *handled)
        fd = _syscall(_SYS_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
        if fd < 0:
            return -1
        file_rights = _EXECUTE | _WRITE_FILE | _READ_FILE | (fs_all & (_TRUNCATE | _IOCTL_DEV))
        read_dir = _EXECUTE | _READ_FILE | _READ_DIR
        for path in self.read_paths:
            self._add_path(fd, path, read_dir, _EXECUTE | _READ_FILE)
        for path in self.write_paths:
            self._add_path(fd, path, fs_all, file_rights)
        for path in self.list_paths:
            self._add_path(fd, path, _READ_DIR, 0)
        for device in _DEVICES_RW:
            self._add_path(fd, Path(device), 0, _READ_FILE | _WRITE_FILE | (fs_all & _TRUNCATE))
        for device in _DEVICES_R:
            self._add_path(fd, Path(device), 0, _READ_FILE)
        for port in self.connect_ports or ():
            rule = struct.pack("=QQ", _NET_CONNECT_TCP, port)
            if _syscall(_SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_RULE_NET_PORT), rule, ctypes.c_uint32(0)):
                raise OSError(ctypes.get_errno(), f"landlock: cannot allow port {port}")
        return fd

    @staticmethod
    def _add_path(fd: int, path: Path, dir_rights: int, file_rights: int) -> None:
        try:
            target = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # vanished since listing: nothing to allow
        try:
            rights = dir_rights if stat.S_ISDIR(os.fstat(target).st_mode) else file_rights
            if not rights:
                return
            rule = struct.pack("=Qi", rights, target)
            if _syscall(_SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH), rule, ctypes.c_uint32(0)):
                raise OSError(ctypes.get_errno(), f"landlock: cannot allow {path}")
        finally:
            os.close(target)

    def preexec(self) -> Callable[[], None]:
        """The function to run in the child between fork and exec (confines it for good)."""
        if not self.available:
            raise RuntimeError("Landlock is not available; tool processes must not run")
        fd, syscall, prctl = self._fd, _syscall, _prctl

        def confine() -> None:
            # Only system calls here: this runs in a forked child of a threaded process.
            if prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                raise OSError("prctl(NO_NEW_PRIVS) failed")
            if syscall(_SYS_RESTRICT_SELF, fd, 0) != 0:
                raise OSError("landlock_restrict_self failed")

        return confine
