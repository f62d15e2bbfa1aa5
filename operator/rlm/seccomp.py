"""seccomp filters for the rlm REPL: the system calls model-written code must never make.

Built in the operator with libseccomp (through `pyseccomp`, a ctypes binding: no compiler, and
Debian's apt depends on libseccomp2, so every Debian-based image has the library). libseccomp
rather than a hand-written BPF program because it resolves system-call names per architecture
and adds the architecture checks a hand-written filter tends to get wrong (on x86_64: i386
calls through `int 0x80` and x32 calls, whose numbers differ, are killed). `pyseccomp` has had
one release (2021) but is a thin (500-line) ctypes layer with the API of libseccomp's official
bindings, which are not on PyPI; only `SyscallFilter`, `add_rule`, `export_bpf` and
`resolve_syscall` are used, so replacing it is mechanical.

The filter is compiled to raw BPF once, in the operator; installing it is then a single
`prctl(PR_SET_SECCOMP)`, which is safe between fork and exec in a threaded process. Denied calls
fail with EPERM (the code sees a PermissionError it can report) rather than killing the REPL.

Two stages, because a filter can only be added, never removed:
- `before_exec`: everything below except `execve`, which the REPL still needs to start Python;
- `after_start`: `execve`/`execveat`, installed by the REPL itself before it reads any code.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import tempfile

__all__ = ["DENIED_CALLS", "EXEC_CALLS", "SeccompProgram", "seccomp_available", "compile_filter"]

# No sockets at all (the REPL talks to the operator over inherited pipes): TCP, UDP, unix
# sockets, netlink. No new processes or threads; no inspecting or signalling other processes;
# no namespaces, mounts, kernel objects or facilities that have bypassed seccomp before (io_uring).
DENIED_CALLS: tuple[str, ...] = (
    # network
    "socket",
    "socketpair",
    "connect",
    "bind",
    "listen",
    "accept",
    "accept4",
    # processes and threads
    "fork",
    "vfork",
    "clone",
    "clone3",
    # other processes: memory, tracing, signals
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "kcmp",
    "pidfd_open",
    "pidfd_getfd",
    "pidfd_send_signal",
    "kill",
    "tkill",
    "tgkill",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    # namespaces and mounts
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    # kernel facilities with a history of escapes or leaks
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "personality",
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
    # the limits it was given, and its identity
    "setrlimit",
    "prlimit64",
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setgroups",
    "setfsuid",
    "setfsgid",
    "capset",
    # privileged anyway; denied in case the operator runs as root (a developer's machine)
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "syslog",
    "settimeofday",
    "clock_settime",
    "sethostname",
    "setdomainname",
    "iopl",
    "ioperm",
)
EXEC_CALLS: tuple[str, ...] = ("execve", "execveat")

_PR_GET_SECCOMP, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 21, 22, 2
_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class SeccompProgram:
    """A compiled BPF filter; `install()` makes one system call (usable between fork and exec)."""

    def __init__(self, bpf: bytes) -> None:
        if not bpf or len(bpf) % 8:
            raise ValueError("not a BPF program")
        self.bpf = bpf
        self._buffer = ctypes.create_string_buffer(bpf, len(bpf))
        self._fprog = _SockFprog(len(bpf) // 8, ctypes.addressof(self._buffer))

    def install(self) -> None:
        if _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(self._fprog), 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "seccomp filter refused")


def seccomp_available() -> str | None:
    """None when filters can be built and installed here; else why not."""
    if _prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) < 0:
        return "this kernel has no seccomp (CONFIG_SECCOMP_FILTER)"
    try:
        import pyseccomp  # noqa: F401  (raises when libseccomp.so.2 is missing)
    except (ImportError, RuntimeError, OSError) as exc:
        return f"libseccomp is not usable: {exc}"
    return None


@functools.lru_cache(maxsize=4)
def compile_filter(names: tuple[str, ...]) -> SeccompProgram:
    """A filter that makes each named call (those this architecture has) fail with EPERM."""
    import pyseccomp

    syscall_filter = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    for name in names:
        number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
        if number < 0:
            continue  # not on this architecture (e.g. fork on aarch64)
        syscall_filter.add_rule(pyseccomp.ERRNO(errno.EPERM), number)
    with tempfile.TemporaryFile() as out:
        syscall_filter.export_bpf(out)
        out.seek(0)
        return SeccompProgram(out.read())
