"""The REPL that runs inside the sandbox (its source is given to `python -I -S -B -c`).

Standard library only: the sandbox cannot read site-packages or Lestrade. Before it reads any
code it denies itself `execve` (the second seccomp stage, `argv[1]`, hex BPF), moves the
protocol off the standard descriptors (so a stray `os.write(1, ...)` cannot forge a message),
and then answers one message at a time, each a 4-byte big-endian length and a JSON object:

    operator -> REPL   {"type": "exec", "id": int, "code": str}
                       {"type": "reply", "ok": true, "value": str}
                       {"type": "reply", "ok": false, "error": "denied"|"depth"|"error", "message": str}
    REPL -> operator   {"type": "ready"}
                       {"type": "call", "name": str, "args": {...}}
                       {"type": "result", "id", "stdout", "stderr", "error", "final", "truncated"}

Functions the code can call (`argv[2]`, JSON list of {name, params, doc}) are stubs that send
a call and block until the operator replies; a refusal raises ToolDenied / DepthExceeded /
ToolError, which the code can catch.
"""

import ast
import builtins
import ctypes
import io
import json
import linecache
import os
import struct
import sys
import traceback


def _install_filter(bpf):
    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(bpf, len(bpf))
    program = SockFprog(len(bpf) // 8, ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(22, 2, ctypes.byref(program), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        raise SystemExit("seccomp: second stage refused")


_install_filter(bytes.fromhex(sys.argv[1]))
_IN = os.dup(0)
_OUT = os.dup(1)
os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
os.dup2(2, 1)  # raw writes to fd 1 join stderr, which the operator drains and drops
_MAX_OUTPUT = int(sys.argv[3])
_MAX_FINAL = 200_000  # characters of a final_answer(...): the operator caps a frame at a few MB


def _read_exactly(n):
    data = b""
    while len(data) < n:
        chunk = os.read(_IN, n - len(data))
        if not chunk:
            raise SystemExit(0)  # the operator closed the pipe: done
        data += chunk
    return data


def _receive():
    (length,) = struct.unpack(">I", _read_exactly(4))
    return json.loads(_read_exactly(length))


def _send(message):
    data = json.dumps(message, default=str).encode("utf-8", "replace")
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(_OUT, data) :]


class ToolDenied(Exception):
    """The operator's permission rules (or a person) refused this call."""


class DepthExceeded(Exception):
    """llm_query would go deeper than maxDepth."""


class ToolError(Exception):
    """The call failed."""


_ERRORS = {"denied": ToolDenied, "depth": DepthExceeded}


def _call(name, args):
    _send({"type": "call", "name": name, "args": args})
    reply = _receive()
    if reply.get("ok"):
        return reply.get("value", "")
    raise _ERRORS.get(reply.get("error"), ToolError)(reply.get("message", ""))


def _stub(name, params, doc):
    def function(*args, **kwargs):
        if len(args) > len(params):
            raise TypeError(f"{name}() takes at most {len(params)} positional arguments: {', '.join(params)}")
        for param, value in zip(params, args):
            if param in kwargs:
                raise TypeError(f"{name}() got two values for {param!r}")
            kwargs[param] = value
        json.dumps(kwargs)  # TypeError here, in the code, for arguments JSON cannot carry
        return _call(name, kwargs)

    function.__name__ = name
    function.__doc__ = doc
    return function


class _Capped(io.TextIOBase):
    def __init__(self, limit):
        self.parts, self.size, self.limit, self.dropped = [], 0, limit, 0

    def writable(self):
        return True

    def write(self, text):
        text = str(text)
        room = self.limit - self.size
        if room > 0:
            self.parts.append(text[:room])
            self.size += min(len(text), room)
        self.dropped += max(len(text) - max(room, 0), 0)
        return len(text)

    def value(self):
        return "".join(self.parts)


class _Final(BaseException):
    pass


_final: list = []


def final_answer(value):
    """Ends the session with `value` as the answer."""
    _final.append(str(value))
    raise _Final()


def _run(block, code, namespace):
    out, err = _Capped(_MAX_OUTPUT), _Capped(_MAX_OUTPUT)
    sys.stdout, sys.stderr = out, err
    error = None
    filename = f"<block {block}>"  # tracebacks quote the line, even from an earlier block
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        tree = ast.parse(code, filename, "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, filename, "exec"), namespace)
        if last is not None:  # a REPL echoes the value of a final expression
            value = eval(compile(ast.Expression(last.value), filename, "eval"), namespace)
            if value is not None:
                print(repr(value))
    except _Final:
        pass
    except SystemExit:
        error = "SystemExit: the REPL keeps running; call final_answer(...) to finish"
    except BaseException as exc:  # noqa: BLE001 - the code's own failure, reported to it
        frames = traceback.extract_tb(exc.__traceback__)
        own = [f for f in frames if f.filename.startswith("<block ")]
        header = ["Traceback (most recent call last):\n"] if own else []
        error = "".join(header + traceback.format_list(own) + traceback.format_exception_only(type(exc), exc))
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    final = _final.pop() if _final else None
    _final.clear()
    cut = bool(error and len(error) > _MAX_OUTPUT) or bool(final and len(final) > _MAX_FINAL)
    return {
        "type": "result",
        "stdout": out.value(),
        "stderr": err.value(),
        "error": error and error[-_MAX_OUTPUT:],
        "final": final and final[:_MAX_FINAL],
        "truncated": bool(out.dropped or err.dropped or cut),
    }


def _main():
    namespace = {
        "__name__": "__repl__",
        "__builtins__": builtins,
        "final_answer": final_answer,
        "ToolDenied": ToolDenied,
        "DepthExceeded": DepthExceeded,
        "ToolError": ToolError,
    }
    for spec in json.loads(sys.argv[2]):
        namespace[spec["name"]] = _stub(spec["name"], spec["params"], spec.get("doc", ""))
    _send({"type": "ready"})
    while True:
        message = _receive()
        if message.get("type") == "exec":
            result = _run(message.get("id"), str(message.get("code", "")), namespace)
            result["id"] = message.get("id")
            _send(result)


_main()
