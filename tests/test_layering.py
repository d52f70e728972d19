"""The arrows point one way: each room of the package imports only the rooms below it.

Rooms, bottom to top: the core (``conventions``, ``guards``, ``sinusoidal``, ``files``), ``families``, ``nn``,
``analysis``, ``interop``, ``ddpm``, ``cli``. Read from the source with ``ast``; function-local imports count.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "timestep_embed"
ORDER = ["core", "families", "nn", "analysis", "interop", "ddpm", "cli"]
OPTIONAL_HEAVY = {"diffusers", "matplotlib", "mlxtend"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "package"  # timestep_embed/__init__.py: the public face, re-exports only
    if parts[1] in ("families", "nn", "analysis", "interop", "ddpm", "cli", "__main__"):
        return "cli" if parts[1] == "__main__" else parts[1]
    return "core"


def imports(path: Path):
    """(imported module, line, inside a function?) for every import in ``path``."""
    tree = ast.parse(path.read_text())
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    local = {
        id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from . import x` names x (a submodule, or a name the package's __init__ holds), not the package
            names = [base] * bool(node.module) + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            yield name, node.lineno, id(node) in local


def own_target(name: str) -> str | None:
    """The package module that ``name`` refers to (a module file, or the package owning a name)."""
    if not (name == "timestep_embed" or name.startswith("timestep_embed.")):
        return None
    parts = name.split(".")
    while parts:
        candidate = PACKAGE.parent.joinpath(*parts)
        if candidate.with_suffix(".py").is_file() or (candidate / "__init__.py").is_file():
            return ".".join(parts)
        parts.pop()
    return None


FILES = sorted(PACKAGE.rglob("*.py"))
EDGES = [
    (module_name(p), target, line, is_local, p)
    for p in FILES
    for name, line, is_local in imports(p)
    if (target := own_target(name)) is not None and target != module_name(p)
]


def test_no_room_imports_a_room_above_it():
    bad = []
    for source, target, line, _, path in EDGES:
        a, b = room(source), room(target)
        if a == "package" or b == "package" and target == "timestep_embed":
            continue  # the public face may gather from any room; `from .. import __version__` is fine
        if ORDER.index(b) > ORDER.index(a):
            bad.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {a} imports {b} ({target})")
    assert not bad, "\n".join(bad)


def test_the_core_imports_no_subpackage():
    core = [e for e in EDGES if room(e[0]) == "core"]
    assert core and all(room(target) == "core" for _, target, *_ in core)


def test_only_interop_imports_diffusers_and_only_ddpm_and_the_cli_import_ddpm():
    bad = []
    for path in FILES:
        for name, line, _ in imports(path):
            where = room(module_name(path))
            if name.split(".")[0] == "diffusers" and where != "interop":
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports diffusers")
    for source, target, line, _, path in EDGES:
        if room(target) == "ddpm" and room(source) not in ("ddpm", "cli"):
            bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    assert not bad, "\n".join(bad)


def test_no_function_local_import_of_the_package_and_lazy_imports_only_of_optional_packages():
    local_own = [f"{p.relative_to(PACKAGE.parent)}:{line}" for _, _, line, is_local, p in EDGES if is_local]
    assert not local_own, local_own
    allowed = OPTIONAL_HEAVY | {"yaml", "safetensors", "tqdm", "tensorboard", "huggingface_hub", "threadpoolctl"}
    lazy = {
        "tensorboard" if name.startswith("torch.utils.tensorboard") else name.split(".")[0]  # needs tensorboard
        for p in FILES
        for name, _, is_local in imports(p)
        if is_local and not name.startswith("timestep_embed")
    }
    assert lazy <= allowed, lazy - allowed


def test_no_import_cycles():
    graph: dict[str, set[str]] = {}
    for source, target, *_ in EDGES:
        graph.setdefault(source, set()).add(target)
    state: dict[str, int] = {}

    def visit(node, trail):
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*trail[trail.index(nxt) :], nxt]))
            if nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for node in list(graph):
        if node not in state:
            visit(node, [node])


def test_importing_the_package_pulls_no_optional_heavy_dependency():
    code = f"import sys, timestep_embed; print(sorted(m for m in {OPTIONAL_HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_private_torch_internals():
    private = re.compile(r"torch\.nn\.modules\.module|\._version\b|def _apply\(|torch\._[a-z]|torch\.ops\.")
    hits = [f"{p.relative_to(PACKAGE.parent)}: {m.group()}" for p in FILES for m in private.finditer(p.read_text())]
    # The one exception: torch 2.2 (the last release for Intel Macs) lacks torch.compiler.is_compiling
    # (2.3+); modes.py falls back to the same function, torch._dynamo.is_compiling, there only.
    hits = [h for h in hits if h != "timestep_embed/modes.py: torch._d"]
    assert not hits, hits
