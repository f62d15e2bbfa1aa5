"""Model-written code tries to break out of the rlm REPL's sandbox; every attempt must fail.

Each test runs hostile code in the real sandbox (Landlock + seccomp + rlimits, a real CPython
process) and checks both that the code was refused and that the side effect did not happen
(no byte read, no connection accepted, no file created, the parent alive).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import socket
import sys
import textwrap
from pathlib import Path

from rlmkit import Calls, failed_with, run_code

import lestrade
from lestrade.operator.rlm import Repl, SandboxLimits

SECRET = "s3cr3t-operator-credential-7f1d"


def _code(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


async def test_cannot_read_the_operators_credentials(tmp_path: Path) -> None:
    # Stand-ins for the ServiceAccount token, the kubeconfig and the model list with API keys.
    files = {name: tmp_path / name for name in ("token", "kubeconfig", "models.yaml")}
    for path in files.values():
        path.write_text(f"{SECRET}\n")
    # the operator's home (kubeconfigs), mounted secrets, other processes' files, its working folder
    folders = [os.path.expanduser("~"), str(tmp_path), "/var/run", "/etc", "/tmp", "."]
    code = _code(f"""
        results = {{}}
        for path in {json.dumps([str(p) for p in files.values()])}:
            try:
                results[path] = open(path).read()
            except OSError as exc:
                results[path] = type(exc).__name__
        for folder in {json.dumps(folders)}:
            try:
                results[folder] = os.listdir(folder)
            except OSError as exc:
                results[folder] = type(exc).__name__
        print(results)
    """)
    result = await run_code("import os\n" + code)
    assert result.error is None, result.error
    assert SECRET not in result.stdout
    assert result.stdout.count("PermissionError") == 3 + 6, result.stdout


async def test_cannot_read_process_environments_or_memory() -> None:
    code = _code("""
        import os
        for path in ["/proc/1/environ", f"/proc/{os.getppid()}/environ", f"/proc/{os.getppid()}/mem",
                     "/proc/self/environ", f"/proc/{os.getppid()}/cmdline", "/proc"]:
            try:
                with open(path, "rb") as handle:
                    print(path, "READ", handle.read(64))
            except OSError as exc:
                print(path, type(exc).__name__)
    """)
    result = await run_code(code)
    assert result.error is None, result.error
    assert "READ" not in result.stdout
    assert result.stdout.count("PermissionError") + result.stdout.count("IsADirectoryError") == 6, result.stdout


async def test_the_parents_environment_is_not_inherited(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", f"sk-{SECRET}")
    monkeypatch.setenv("KUBECONFIG", "/etc/kubernetes/admin.conf")
    result = await run_code("import os\nprint(dict(os.environ))\nprint(os.environ.get('OPENAI_API_KEY'))")
    assert result.error is None, result.error
    assert SECRET not in result.stdout and "KUBECONFIG" not in result.stdout
    assert result.stdout.splitlines()[-1] == "None"


async def test_no_tcp_to_a_real_listening_server() -> None:
    accepted: list[object] = []

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("peername"))
        writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        code = _code(f"""
            import socket
            socket.create_connection(("127.0.0.1", {port}), timeout=5)
        """)
        result = await run_code(code)
        # the server is still listening: a connection would have been accepted by now
        probe = await asyncio.open_connection("127.0.0.1", port)
        probe[1].close()
        await asyncio.wait_for(_until(lambda: len(accepted) >= 1), 10)
    finally:
        server.close()
        await server.wait_closed()
    assert failed_with(result, "PermissionError"), result.error
    assert len(accepted) == 1  # the test's own probe only


async def test_no_listening_socket() -> None:
    result = await run_code("import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()")
    assert failed_with(result, "PermissionError"), result.error


async def test_no_udp() -> None:
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.setblocking(False)
    port = receiver.getsockname()[1]
    try:
        code = f"import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'leak', ('127.0.0.1', {port}))"
        result = await run_code(code)
        assert failed_with(result, "PermissionError"), result.error
        try:
            data = receiver.recvfrom(100)  # loopback delivery is immediate: it would be here
        except BlockingIOError:
            data = None
        assert data is None
    finally:
        receiver.close()


async def test_no_unix_sockets(tmp_path: Path) -> None:
    path = str(tmp_path / "operator.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    listener.setblocking(False)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind(f"\0lestrade-test-{os.getpid()}")
    abstract.listen()
    abstract.setblocking(False)
    try:
        code = _code(f"""
            import socket
            for address in [{path!r}, "\\0lestrade-test-{os.getpid()}"]:
                try:
                    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(address)
                    print("CONNECTED")
                except OSError as exc:
                    print(type(exc).__name__)
            socket.socketpair()
        """)
        result = await run_code(code)
        assert "CONNECTED" not in result.stdout
        assert result.stdout.split() == ["PermissionError", "PermissionError"]
        assert failed_with(result, "PermissionError"), result.error  # socketpair too
        for sock in (listener, abstract):
            try:
                sock.accept()
                raise AssertionError("the REPL connected to a unix socket")
            except BlockingIOError:
                pass
    finally:
        listener.close()
        abstract.close()


async def test_cannot_write_anywhere(tmp_path: Path) -> None:
    targets = [
        tmp_path / "dropped",
        Path("/tmp") / f"lestrade-rlm-escape-{os.getpid()}",
        Path("/dev/shm") / f"lestrade-rlm-escape-{os.getpid()}",
        Path("dropped-in-cwd"),
    ]
    code = _code(f"""
        import os
        for path in {json.dumps([str(t) for t in targets])}:
            try:
                with open(path, "w") as handle:
                    handle.write("x")
                print("WROTE", path)
            except OSError as exc:
                print(type(exc).__name__)
        os.mkdir("/tmp/lestrade-rlm-dir-{os.getpid()}")
    """)
    result = await run_code(code)
    assert "WROTE" not in result.stdout
    assert failed_with(result, "PermissionError"), result.error
    assert not any(t.exists() for t in targets[:3])
    assert not Path(f"/tmp/lestrade-rlm-dir-{os.getpid()}").exists()


async def test_no_new_processes_or_programs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    attempts = {
        "fork": "import os\nos.fork()",
        "subprocess": f"import subprocess\nsubprocess.run(['/bin/touch', {str(marker)!r}])",
        "posix_spawn": f"import os\nos.posix_spawn('/bin/touch', ['touch', {str(marker)!r}], {{}})",
        "exec": f"import os\nos.execv('/bin/touch', ['touch', {str(marker)!r}])",
        "thread": "import threading\nthreading.Thread(target=print).start()",
    }
    async with Repl() as repl:
        for name, code in attempts.items():
            result = await repl.execute(code, Calls())
            assert result.error and not result.ended, (name, result)
            assert failed_with(result, "PermissionError", "RuntimeError"), (name, result.error)
        system = await repl.execute(f"import os\nos.system('touch {marker}')", Calls())
    assert system.stdout.strip() not in ("", "0"), system  # system() could not start a shell
    assert not marker.exists()


async def test_a_memory_bomb_fails_inside_the_repl() -> None:
    limits = SandboxLimits(memory_bytes=512 * 1024 * 1024)
    async with Repl(limits) as repl:
        await repl.execute("kept = 'still here'", Calls())
        first = await repl.execute("blob = bytearray(8 * 1024 ** 3)", Calls())
        second = await repl.execute("chunks = [bytearray(64 * 1024 ** 2) for _ in range(64)]", Calls())
        after = await repl.execute("del chunks\nkept" if second.error is None else "kept", Calls())
    assert failed_with(first, "MemoryError"), first.error
    assert failed_with(second, "MemoryError"), second.error
    assert after.stdout.strip() == "'still here'"  # the REPL survived with its state


BLOCK_FOREVER = "import os\n_r, _w = os.pipe()\nos.read(_r, 1)"
"""Code that waits until the REPL is ended: a read of a pipe nobody writes to."""


async def test_an_infinite_loop_is_ended_by_the_wall_clock() -> None:
    limits = SandboxLimits(wall_seconds=1.0)
    async with Repl(limits) as repl:
        pid = repl.pid
        looped = await repl.execute("while True:\n    pass", Calls())
        assert pid is not None and not _alive(pid)
        # Blocks without using CPU (a read of a pipe nobody writes): only the wall clock ends it.
        slept = await repl.execute(BLOCK_FOREVER, Calls())
        fresh = await repl.execute("print('fresh')", Calls())
    for result in (looped, slept):
        assert result.ended and "timed out after 1 s" in (result.error or ""), result
        assert result.seconds < 20
    assert fresh.stdout == "fresh\n" and not fresh.ended


async def test_an_infinite_loop_is_ended_by_the_cpu_limit() -> None:
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=120.0)
    result = await run_code("while True:\n    pass", limits=limits)
    assert result.ended and "CPU time (1 s)" in (result.error or ""), result


async def test_output_floods_are_truncated() -> None:
    limits = SandboxLimits(max_output=1000, wall_seconds=2.0)
    async with Repl(limits) as repl:
        big = await repl.execute("print('x' * 10_000_000)\nimport sys\nsys.stderr.write('e' * 10_000_000)", Calls())
        raised = await repl.execute("raise ValueError('v' * 10_000_000)", Calls())
        raw = await repl.execute(
            "import os\nfor _ in range(200):\n    os.write(1, b'r' * 100_000)\nprint('done')", Calls()
        )
        endless = await repl.execute("while True:\n    print('y' * 1000)", Calls())
    assert big.truncated and len(big.stdout) == 1000 and len(big.stderr) == 1000
    assert raised.truncated and len(raised.error or "") <= 1000
    assert raw.stdout == "done\n" and "r" * 100 not in raw.text()  # raw descriptor writes are dropped
    assert endless.ended and len(endless.text()) < 2000


async def test_ctypes_system_calls_are_refused() -> None:
    numbers = {
        "x86_64": {"socket": 41, "fork": 57, "ptrace": 101, "unshare": 272},
        "aarch64": {"socket": 198, "clone": 220, "ptrace": 117, "unshare": 97},
    }[platform.machine()]
    code = _code(f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        PTRACE_ATTACH, CLONE_NEWUSER, AF_INET, SOCK_STREAM = 16, 0x10000000, 2, 1
        arguments = {{"socket": (AF_INET, SOCK_STREAM, 0), "fork": (), "clone": (17, 0, 0, 0, 0),
                     "ptrace": (PTRACE_ATTACH, os.getppid(), 0, 0), "unshare": (CLONE_NEWUSER,)}}
        for name, number in {numbers!r}.items():
            ctypes.set_errno(0)
            value = libc.syscall(number, *arguments[name])
            print(name, value, os.strerror(ctypes.get_errno()))
    """)
    result = await run_code(code)
    assert result.error is None, result.error
    lines = result.stdout.splitlines()
    assert len(lines) == 4 and all(line.endswith("-1 Operation not permitted") for line in lines), lines


async def test_cannot_signal_the_parent() -> None:
    code = _code("""
        import os, signal
        for target in [os.getppid(), -os.getpgid(os.getppid()), 1]:
            try:
                os.kill(target, signal.SIGKILL)
                print("SENT")
            except OSError as exc:
                print(type(exc).__name__)
    """)
    result = await run_code(code)
    assert result.stdout.split() == ["PermissionError"] * 3, result
    os.kill(os.getpid(), 0)  # and we are alive to say so


async def test_cannot_reach_lestrade_or_site_packages() -> None:
    package = Path(lestrade.__file__)
    code = _code(f"""
        for path in [{str(package)!r}, {str(Path(sys.prefix) / "pyvenv.cfg")!r}]:
            try:
                open(path).read()
                print("READ", path)
            except OSError as exc:
                print(type(exc).__name__)
        import lestrade
    """)
    result = await run_code(code)
    assert result.stdout.split() == ["PermissionError", "PermissionError"], result
    assert failed_with(result, "ModuleNotFoundError"), result.error


async def test_cannot_raise_its_own_limits() -> None:
    result = await run_code("import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))")
    assert failed_with(result, "PermissionError", "ValueError"), result.error


async def test_the_kernel_reports_the_repl_confined() -> None:
    async with Repl() as repl:
        status = Path(f"/proc/{repl.pid}/status").read_text()
        limits = Path(f"/proc/{repl.pid}/limits").read_text()
    fields = _status_fields(status)
    inherited = int(_status_fields(Path("/proc/self/status").read_text()).get("Seccomp_filters", "0"))
    assert fields["NoNewPrivs"] == "1"
    assert fields["Seccomp"] == "2"  # filter mode
    assert int(fields["Seccomp_filters"]) == inherited + 2  # before exec, and the REPL's own (execve)
    assert any(line.startswith("Max file size") and " 0 " in line for line in limits.splitlines())


async def test_a_forged_frame_ends_the_repl_and_unknown_functions_are_refused() -> None:
    calls = Calls()
    async with Repl() as repl:
        unknown = await repl.execute("import __main__\n__main__._call('delete_everything', {})", calls)
        huge = await repl.execute(
            "import __main__, os, struct\nos.write(__main__._OUT, struct.pack('>I', 2**31))\n" + BLOCK_FOREVER, calls
        )
        garbage = await repl.execute(
            "import __main__, os\nos.write(__main__._OUT, b'\\x00\\x00\\x00\\x05nope!')\n" + BLOCK_FOREVER, calls
        )
    assert failed_with(unknown, "ToolError") and "no function 'delete_everything'" in (unknown.error or "")
    assert calls.seen == []
    assert huge.ended and "broke the protocol" in (huge.error or ""), huge
    assert garbage.ended and "not JSON" in (garbage.error or ""), garbage


async def test_hostile_frames_cannot_crash_the_operator() -> None:
    frames = {
        "nesting": "'[' * 100_000 + ']' * 100_000",
        "big number": '\'{"type": "call", "name": "llm_query", "args": {"prompt": \' + \'9\' * 100_000 + \'}}\'',
        "wrong shape": '\'{"type": "call", "name": "llm_query", "args": [1]}\'',
        "unknown type": '\'{"type": "shell", "command": "id"}\'',
    }
    async with Repl() as repl:
        for name, payload in frames.items():
            code = f"import __main__, os, struct\ndata = ({payload}).encode()\nos.write(__main__._OUT, struct.pack('>I', len(data)) + data)\n{BLOCK_FOREVER}"
            result = await repl.execute(code, Calls())
            assert result.ended and "broke the protocol" in (result.error or ""), (name, result)
        odd = await repl.execute("print('\\ud800 lone surrogate')", Calls())
    assert odd.stdout == "? lone surrogate\n"
    odd.text().encode("utf-8")  # what the harness sends on is valid UTF-8


def _status_fields(status: str) -> dict[str, str]:
    return {key: value.strip() for key, value in (line.split(":", 1) for line in status.splitlines() if ":" in line)}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.01)
