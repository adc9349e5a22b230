"""The package's layers and their arrows: each module imports only its own layer and the
layers below it, counting imports inside functions (an import moved into a function to dodge
a cycle is still an arrow), and no two modules import each other, directly or around a
circle. The layers, from the ground up, are the ones `ragframe/__init__.py`'s docstring and
CONTRIBUTING.md draw."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ragframe"

#: From the ground up. A module's layer is its first package below `ragframe`, or, for the
#: modules at the root, its own name. `testing` (the fake judge server the tests and the
#: docs run against) stands on top: it may use anything, and nothing of the package uses it.
LAYERS: list[set[str]] = [
    {"_version", "_sync", "errors", "prompts", "assets", "data"},
    {"stats"},
    {"inputs"},
    {"judge"},
    {"metrics"},
    {"engine"},
    {"decide"},
    {"report", "export"},
    {"ray"},
    {"cli"},
    {"__init__", "__main__"},
    {"testing"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The ragframe modules `path` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            while name not in known and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in known and name.startswith("ragframe."):
                found.add(name)
                break
    return found


def layer(module: str, path: Path) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    if len(parts) == 2 and path.name != "__init__.py":
        return parts[1] if parts[1] in RANK else f"(unplaced root module {parts[1]})"
    return parts[1]


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: imports(p, known) - {m} for m, p in known.items()}


def test_every_module_has_a_layer() -> None:
    known = modules()
    unplaced = sorted(m for m, p in known.items() if layer(m, p) not in RANK)
    assert not unplaced, f"modules in no layer: {unplaced} (add a package or a LAYERS entry)"


def test_the_root_holds_the_public_api_and_at_most_four_small_modules() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(root) <= 4, root


def test_arrows_point_down() -> None:
    known = modules()
    upward = []
    for module, targets in graph().items():
        here = RANK[layer(module, known[module])]
        for target in sorted(targets):
            there = RANK[layer(target, known[target])]
            if there > here:
                upward.append(f"{module} -> {target}")
    assert not upward, "imports pointing up a layer:\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert not cycles, f"import cycles: {cycles}"
