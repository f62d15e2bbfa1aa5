"""Build the control-plane binaries from pinned Go modules and cache them per version.

No registry this project reaches ships Kubernetes server binaries, but the Go module proxy
serves their source. Each component is built once in a throwaway Go module (a temp dir with a
go.mod that requires the component and a `tools.go` that imports its commands) and the binaries
are kept in `<cache>/<component>-<version>/`, so warm runs only check that files exist.

`k8s.io/kubernetes` is special: its go.mod points every `k8s.io/<staging>` module at a folder
of its own repository, which a dependent module cannot see, so the throwaway module maps each of
them to the published `v0.<minor>.<patch>` release of the same code.
"""

from __future__ import annotations

import fcntl
import importlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from lestrade.localcluster.versions import COLD_BUILD_SECONDS, COMPONENTS, RUN_COMPONENTS, Component

__all__ = [
    "BuildError",
    "cache_root",
    "binary_path",
    "build_only",
    "build_plan",
    "ensure_binaries",
    "ensure_component",
    "missing_components",
    "component_names",
    "ALL_COMPONENTS",
]

# Components with a build of their own rather than a plain `go build` of a module's packages:
# name → (module, where its binary lives, the function that builds it if missing).
_OWN_BUILDS: dict[str, tuple[str, str, str]] = {
    "prometheus": ("lestrade.localcluster.prometheus", "prometheus_binary_path", "ensure_prometheus"),
    "otelcol": ("lestrade.localcluster.otelcol", "otelcol_binary_path", "ensure_otelcol"),
}

ALL_COMPONENTS: tuple[str, ...] = (*COMPONENTS, *_OWN_BUILDS)
"""Every component `python -m lestrade.localcluster build --all` builds."""


def _own_build(name: str, function: int) -> Callable[..., Path]:
    module, *functions = _OWN_BUILDS[name]
    return getattr(importlib.import_module(module), functions[function])


class BuildError(RuntimeError):
    """A component could not be built; the message says what to install or where the log is."""


def cache_root() -> Path:
    base = os.environ.get("LESTRADE_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(xdg) / "lestrade"


def component_dir(component: Component) -> Path:
    return cache_root() / f"{component.name}-{component.version}"


def binary_path(binary: str) -> Path:
    """Where a binary lives once built, whichever component builds it."""
    for component in COMPONENTS.values():
        if binary in component.binaries:
            return component_dir(component) / binary
    if binary in _OWN_BUILDS:
        return _own_build(binary, 0)()
    raise KeyError(f"no component builds {binary!r}")


def component_names(names: list[str] | tuple[str, ...]) -> list[str]:
    """Component names for names of components or of their binaries (`kubectl` → `kubernetes`),
    in order, without repeats; an unknown name is a BuildError naming the known ones."""
    found: list[str] = []
    for name in names:
        if name not in ALL_COMPONENTS:
            owner = next((c.name for c in COMPONENTS.values() if name in c.binaries), None)
            if owner is None:
                raise BuildError(f"unknown component {name!r}; known: {', '.join(ALL_COMPONENTS)}")
            name = owner
        if name not in found:
            found.append(name)
    return found


def _is_built(name: str) -> bool:
    if name in _OWN_BUILDS:
        path = binary_path(name)
        return path.is_file() and os.access(path, os.X_OK)
    component = COMPONENTS[name]
    return _complete(component, component_dir(component))


def missing_components(names: list[str] | tuple[str, ...]) -> list[str]:
    """The components of `names` that are not in the cache yet."""
    return [n for n in component_names(names) if not _is_built(n)]


def _minutes(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def build_jobs(count: int) -> int:
    """How many components build at once: `LESTRADE_BUILD_JOBS`, else all of them on 2 cores or
    more (a compile saturates the cores, but a module download, `go mod tidy` and the single-
    threaded link of a big binary leave them idle, which another component's build fills), else
    one."""
    configured = os.environ.get("LESTRADE_BUILD_JOBS", "").strip()
    if configured.isdigit() and int(configured) > 0:
        return min(count, int(configured))
    return max(1, min(count, 1 if (os.cpu_count() or 1) < 2 else count))


def build_plan(names: list[str]) -> str:
    """One line saying what will be built and about how long it takes cold."""
    missing = missing_components(names)
    if not missing:
        return ""
    seconds = [COLD_BUILD_SECONDS.get(n, 120) for n in missing]
    jobs = build_jobs(len(missing))
    # Components built side by side share the CPU: the whole takes about the CPU work of all of
    # them, minus the idle time a lone build leaves; never less than the longest one.
    estimate = sum(seconds) if jobs == 1 else max(max(seconds), 0.8 * sum(seconds))
    what = ", ".join(f"{n} (~{_minutes(COLD_BUILD_SECONDS.get(n, 120))})" for n in missing)
    together = f"{jobs} at a time" if jobs > 1 else "one at a time"
    return (
        f"lestrade: building {what} from Go modules, {together}: about {_minutes(estimate)} "
        f"on a 2-core machine with empty Go caches (first run only; cached in {cache_root()})"
    )


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "Go is not installed, and the local control plane is built from Go modules. "
            "Install Go 1.25 or newer (https://go.dev/doc/install, or `apt-get install golang`) "
            "and run again; or set LESTRADE_TEST_KUBECONFIG / LESTRADE_CLUSTER=current to use an "
            "existing cluster instead."
        )
    return go


Progress = Callable[[str], None]


def _silent(_: str) -> None:
    pass


@dataclass
class _Workspace:
    path: Path
    log: Path
    progress: Progress = field(default=_silent)

    def run(self, *args: str, env: dict[str, str], step: str = "") -> None:
        if step:
            self.progress(step)
        started = time.monotonic()
        with self.log.open("a") as log:
            log.write(f"\n[{time.strftime('%H:%M:%S')}] $ {' '.join(args)}\n")
            log.flush()
            proc = subprocess.run(args, cwd=self.path, env=env, stdout=log, stderr=subprocess.STDOUT)
            # timed, so the estimates in versions.py can be checked against a real cold build
            log.write(f"[{time.strftime('%H:%M:%S')}] exit {proc.returncode} after {time.monotonic() - started:.0f}s\n")
        if proc.returncode != 0:
            tail = "\n".join(self.log.read_text().splitlines()[-15:])
            raise BuildError(
                f"`{' '.join(args[:3])} ...` failed (exit {proc.returncode}) while building in "
                f"{self.path}.\nFull log: {self.log}\nLast lines:\n{tail}"
            )


def _staging_replacements(go: str, ws: _Workspace, component: Component, env: dict[str, str]) -> list[str]:
    """`k8s.io/<staging> => k8s.io/<staging> v0.X.Y` lines for k8s.io/kubernetes."""
    ws.run(
        go,
        "mod",
        "download",
        "-json",
        f"{component.module}@{component.module_version}",
        env=env,
        step=f"downloading {component.module}",
    )
    modfile = (
        Path(env.get("GOMODCACHE") or _go_env(go, "GOMODCACHE"))
        / "cache"
        / "download"
        / "k8s.io"
        / "kubernetes"
        / "@v"
        / f"{component.module_version}.mod"
    )
    staging = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", modfile.read_text(), re.M)
    if not staging:
        raise BuildError(f"found no staging modules in {modfile}; log: {ws.log}")
    published = "v0." + component.module_version.split(".", 1)[1]
    return [f"\t{module} => {module} {published}" for module in staging]


def _go_list_dir(go: str, ws: _Workspace, module: str, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", module],
        cwd=ws.path,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise BuildError(f"cannot locate the source of {module}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def _go_env(go: str, name: str) -> str:
    return subprocess.run([go, "env", name], capture_output=True, text=True, check=True).stdout.strip()


def build_only(name: str, binaries: list[str], target: str | Path) -> Path:
    """Builds just some binaries of a component into `target` (the container image needs only
    kubectl of the kubernetes component); no cache, no lock."""
    full = COMPONENTS[name]
    packages = {b: p for b, p in full.packages.items() if b in binaries}
    _build(replace(full, packages=packages, assets={}), Path(target))
    return Path(target)


def _build(component: Component, target: Path, progress: Progress = _silent) -> None:
    go = _go()
    work = Path(tempfile.mkdtemp(prefix=f"lestrade-build-{component.name}-"))
    target.parent.mkdir(parents=True, exist_ok=True)
    ws = _Workspace(work, target.parent / f"{component.name}-{component.version}.build.log", progress)
    ws.log.write_text(f"building {component.name} {component.version} in {work}\n")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0", "GOWORK": "off"}
    replaces = _staging_replacements(go, ws, component, env) if component.staging_replaces else []
    gomod = [f"module lestrade.local/build/{component.name}", "", "go 1.25.0", ""]
    gomod.append(f"require {component.module} {component.module_version}")
    if replaces:
        gomod += ["", "replace (", *replaces, ")"]
    (work / "go.mod").write_text("\n".join(gomod) + "\n")
    imports = "\n".join(f'\t_ "{pkg}"' for pkg in component.packages.values())
    (work / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")
    ws.run(go, "mod", "tidy", env=env, step="resolving its modules (go mod tidy)")
    staging = target.parent / f".{target.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for index, (binary, package) in enumerate(component.packages.items(), 1):
        ldflags = ["-s", "-w", *(f"-X {k}={v}" for k, v in component.ldflags.items())]
        ws.run(
            go,
            "build",
            "-trimpath",
            "-ldflags",
            " ".join(ldflags),
            "-o",
            str(staging / binary),
            package,
            env=env,
            step=f"compiling {binary} ({index}/{len(component.packages)})",
        )
    if component.assets:
        source = Path(_go_list_dir(go, ws, component.module, env))
        for relative, name in component.assets.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / relative, staging / name)
    (staging / "VERSION").write_text(f"{component.module}@{component.module_version}\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    shutil.rmtree(work, ignore_errors=True)


def _complete(component: Component, target: Path) -> bool:
    wanted = [*component.binaries, *component.assets.values(), "VERSION"]
    return all((target / name).exists() for name in wanted)


def ensure_component(name: str, *, quiet: bool = False) -> Path:
    """Returns the folder holding the component's binaries, building it on first use.

    A file lock makes parallel callers (two test sessions, `make run` during `make test`) wait
    for one build instead of racing.
    """
    if name == "prometheus":
        from lestrade.localcluster.prometheus import ensure_prometheus

        return _announced(name, quiet, lambda progress: ensure_prometheus(progress=progress)).parent  # type: ignore[attr-defined]
    if name in _OWN_BUILDS:
        return _announced(name, quiet, lambda progress: _own_build(name, 1)()).parent  # type: ignore[attr-defined]
    component = COMPONENTS[name]
    target = component_dir(component)
    if _complete(component, target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        if not quiet:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"lestrade: {name}: another process is building it; waiting", flush=True)
                fcntl.flock(lock, fcntl.LOCK_EX)
        else:
            fcntl.flock(lock, fcntl.LOCK_EX)
        if not _complete(component, target):
            _announced(name, quiet, lambda progress: _build(component, target, progress))
    return target


def _announced(name: str, quiet: bool, build: Callable[[Progress], object]) -> object:
    """Runs a build, printing its steps and its duration unless quiet."""
    if quiet:
        return build(_silent)
    started = time.monotonic()

    def progress(step: str) -> None:
        print(f"lestrade: [{_minutes(time.monotonic() - started):>6}] {name}: {step}", flush=True)

    progress(f"building (about {_minutes(COLD_BUILD_SECONDS.get(name, 120))} cold; log in {cache_root()})")
    result = build(progress)
    print(f"lestrade: built {name} in {_minutes(time.monotonic() - started)}", flush=True)
    return result


def ensure_binaries(names: list[str] | None = None, *, quiet: bool = False) -> dict[str, Path]:
    """Builds (if needed) the named components — or the components of the named binaries — the
    control plane's by default, side by side (`build_jobs`); returns binary → path."""
    wanted = component_names(list(names or RUN_COMPONENTS))
    missing = missing_components(wanted)
    if missing and not quiet:
        print(build_plan(wanted), flush=True)
    if len(missing) > 1 and build_jobs(len(missing)) > 1:
        with ThreadPoolExecutor(build_jobs(len(missing)), thread_name_prefix="build") as pool:
            # every build runs to its end even when another fails; the first failure is raised
            futures = [pool.submit(ensure_component, name, quiet=quiet) for name in missing]
            errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise errors[0]
    paths: dict[str, Path] = {}
    for name in wanted:
        folder = ensure_component(name, quiet=quiet)
        if name in _OWN_BUILDS:
            paths[name] = binary_path(name)
            continue
        for binary in COMPONENTS[name].binaries:
            paths[binary] = folder / binary
    return paths
