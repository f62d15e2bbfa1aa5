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
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from lestrade.localcluster.versions import COMPONENTS, Component

__all__ = [
    "BuildError", "cache_root", "binary_path", "build_only", "ensure_binaries", "ensure_component",
]


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
    raise KeyError(f"no component builds {binary!r}")


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


@dataclass
class _Workspace:
    path: Path
    log: Path

    def run(self, *args: str, env: dict[str, str]) -> None:
        with self.log.open("a") as log:
            log.write(f"\n$ {' '.join(args)}\n")
            log.flush()
            proc = subprocess.run(args, cwd=self.path, env=env, stdout=log, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            tail = "\n".join(self.log.read_text().splitlines()[-15:])
            raise BuildError(
                f"`{' '.join(args[:3])} ...` failed (exit {proc.returncode}) while building in "
                f"{self.path}.\nFull log: {self.log}\nLast lines:\n{tail}"
            )


def _staging_replacements(go: str, ws: _Workspace, component: Component, env: dict[str, str]) -> list[str]:
    """`k8s.io/<staging> => k8s.io/<staging> v0.X.Y` lines for k8s.io/kubernetes."""
    ws.run(go, "mod", "download", "-json", f"{component.module}@{component.module_version}", env=env)
    modfile = (
        Path(env.get("GOMODCACHE") or _go_env(go, "GOMODCACHE"))
        / "cache" / "download" / "k8s.io" / "kubernetes" / "@v" / f"{component.module_version}.mod"
    )
    staging = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", modfile.read_text(), re.M)
    if not staging:
        raise BuildError(f"found no staging modules in {modfile}; log: {ws.log}")
    published = "v0." + component.module_version.split(".", 1)[1]
    return [f"\t{module} => {module} {published}" for module in staging]


def _go_list_dir(go: str, ws: _Workspace, module: str, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", module],
        cwd=ws.path, env=env, capture_output=True, text=True,
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


def _build(component: Component, target: Path) -> None:
    go = _go()
    work = Path(tempfile.mkdtemp(prefix=f"lestrade-build-{component.name}-"))
    target.parent.mkdir(parents=True, exist_ok=True)
    ws = _Workspace(work, target.parent / f"{component.name}-{component.version}.build.log")
    ws.log.write_text(f"building {component.name} {component.version} in {work}\n")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0", "GOWORK": "off"}
    replaces = (
        _staging_replacements(go, ws, component, env) if component.staging_replaces else []
    )
    gomod = [f"module lestrade.local/build/{component.name}", "", "go 1.25.0", ""]
    gomod.append(f"require {component.module} {component.module_version}")
    if replaces:
        gomod += ["", "replace (", *replaces, ")"]
    (work / "go.mod").write_text("\n".join(gomod) + "\n")
    imports = "\n".join(f'\t_ "{pkg}"' for pkg in component.packages.values())
    (work / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")
    ws.run(go, "mod", "tidy", env=env)
    staging = target.parent / f".{target.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for binary, package in component.packages.items():
        ldflags = ["-s", "-w", *(f"-X {k}={v}" for k, v in component.ldflags.items())]
        ws.run(go, "build", "-trimpath", "-ldflags", " ".join(ldflags), "-o",
               str(staging / binary), package, env=env)
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
    component = COMPONENTS[name]
    target = component_dir(component)
    if _complete(component, target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _complete(component, target):
            if not quiet:
                print(f"lestrade: building {name} {component.version} from Go modules "
                      f"(first run only; log in {target.parent})", flush=True)
            started = time.monotonic()
            _build(component, target)
            if not quiet:
                print(f"lestrade: built {name} in {time.monotonic() - started:.0f}s", flush=True)
    return target


def ensure_binaries(names: list[str] | None = None, *, quiet: bool = False) -> dict[str, Path]:
    """Builds (if needed) the named components, by default all but the on-demand ones (built
    when a test asks for them by name); returns binary → path."""
    paths: dict[str, Path] = {}
    for name in names or [c.name for c in COMPONENTS.values() if not c.on_demand]:
        folder = ensure_component(name, quiet=quiet)
        for binary in COMPONENTS[name].binaries:
            paths[binary] = folder / binary
    return paths
