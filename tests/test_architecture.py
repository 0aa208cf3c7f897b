"""The package's shape: module sizes, import cycles and the layer order (docs/DESIGN.md).

Read from the source with `ast`, nothing is imported, so a violation is found even in a module whose
dependencies (torch, TensorRT) are not installed. Each failure names the modules involved.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "fasttts_cli"
MAX_LINES = 500

# Top to bottom: a top-level package may import from its own layer and the layers BELOW it, never above.
# The names are fasttts_cli's top-level packages (or top-level modules); "" is fasttts_cli/__init__.py.
LAYERS: list[tuple[str, frozenset[str]]] = [
    ("cli", frozenset({"cli", "__main__"})),  # Typer commands: parse flags, render results
    ("tools", frozenset({"tools"})),  # bench, GPU acceptance programs, fakes of GPU libraries
    ("serve", frozenset({"serve"})),  # `fasttts serve`: the HTTP server over one warm engine
    ("app", frozenset({"app"})),  # dub / synth / inspect as stage sequences, engine loading, doctor
    (
        "dubbing",
        frozenset({"dubbing", "casting", "separation"}),
    ),  # script readers, plan, timing, line cache, work folder, cast
    ("build", frozenset({"build"})),  # checkpoint -> engine folder: export, quantize, engine builds
    ("indextts2", frozenset({"indextts2", "indextts25"})),  # the model: front end, stage flows, decoding, CFM
    ("synth", frozenset({"synth"})),  # the Synthesizer contract, engine selection, the draft voice
    ("backends", frozenset({"backends"})),  # the GPT step protocol, one adapter per runtime
    ("nets", frozenset({"nets"})),  # PyTorch definitions of the checkpoint's modules and its loader
    ("cfm", frozenset({"cfm"})),  # the one Euler CFM loop and its time grids (numpy/torch-neutral)
    ("audio", frozenset({"audio"})),  # float32 audio: loading, tempo, timeline and mix, loudness
    ("media", frozenset({"media"})),  # ffmpeg: probe, integrity, mux
    ("spec", frozenset({"spec"})),  # presets, the engine folder's manifest, the backend registry
    ("foundation", frozenset({"", "errors", "partials"})),  # error types, partial-file writes, version
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_statements(body: list[ast.stmt]):
    """Statements run when the module is imported: not function bodies, not `if TYPE_CHECKING:`."""
    for node in body:
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _top_level_statements(node.orelse)
            continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _top_level_statements(
                    [n for n in inner if isinstance(n, ast.stmt | ast.excepthandler)]
                )


def _resolve(name: str) -> str | None:
    """The module a dotted name lives in: the longest prefix that is one of ours."""
    mods = modules()
    while name:
        if name in mods:
            return name
        name = name.rpartition(".")[0]
    return None


_DOTTED = re.compile(r"fasttts_cli(?:\.\w+)+(?::\w+)?")
# Plugin tables: modules whose "module:callable" strings name implementations that are resolved only when
# one is used, as Python entry points are. The backend registry sits at the bottom (presets read it) and
# names the adapters above it this way; those strings are not imports (test_backend_registry resolves
# each). Any other module's dotted string counts as an import.
PLUGIN_TABLES = frozenset({"fasttts_cli.spec.registry"})


def _targets(node: ast.AST, importer: str, is_package: bool) -> list[str]:
    mods = modules()
    if isinstance(node, ast.Import):
        return [t for a in node.names if (t := _resolve(a.name))]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base_parts = importer.split(".") if is_package else importer.split(".")[:-1]
            base_parts = base_parts[: len(base_parts) - (node.level - 1)]
            base = ".".join([*base_parts, *([node.module] if node.module else [])])
        else:
            base = node.module or ""
        found = []
        for a in node.names:
            sub = f"{base}.{a.name}"
            t = sub if sub in mods else _resolve(base)
            if t:
                found.append(t)
        return found
    # an import by string: importlib.import_module("fasttts_cli.x.y") or a registry's "fasttts_cli.x:Factory"
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _DOTTED.fullmatch(node.value)
        and importer not in PLUGIN_TABLES
    ):
        t = _resolve(node.value.partition(":")[0])
        return [t] if t else []
    return []


@cache
def imports(top_level_only: bool) -> dict[str, frozenset[str]]:
    """Module -> the modules of ours it imports (itself excluded)."""
    graph: dict[str, frozenset[str]] = {}
    for name, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        nodes = _top_level_statements(tree.body) if top_level_only else ast.walk(tree)
        is_package = path.name == "__init__.py"
        found: set[str] = set()
        for node in nodes:
            if top_level_only and not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            found.update(_targets(node, name, is_package))
        found.discard(name)
        graph[name] = frozenset(found)
    return graph


def cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def top_package(module: str) -> str:
    """`fasttts_cli.indextts2.engine` -> "indextts2"; `fasttts_cli.errors` -> "errors"; the root -> ""."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def package_graph() -> dict[str, frozenset[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for importer, targets in imports(top_level_only=False).items():
        edges[top_package(importer)].update(top_package(t) for t in targets)
    return {p: frozenset(t - {p}) for p, t in edges.items()}


def _cycle_evidence(component: list[str], graph: dict[str, frozenset[str]], name=lambda m: m) -> list[str]:
    members = set(component)
    lines = []
    for importer, targets in imports(top_level_only=False).items():
        for t in sorted(targets):
            if name(importer) in members and name(t) in members and name(importer) != name(t):
                lines.append(f"{importer} -> {t}")
    return lines


def layer_of() -> dict[str, int]:
    return {name: i for i, (_, names) in enumerate(LAYERS) for name in names}


def test_no_module_over_500_lines():
    too_long = {}
    for name, path in modules().items():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            too_long[name] = n
    assert not too_long, f"modules over {MAX_LINES} lines (split them by job): {too_long}"


def test_no_import_cycle_at_module_level():
    found = cycles(imports(top_level_only=True))
    assert not found, (
        "import cycles among modules (top-level imports, TYPE_CHECKING excluded):\n"
        + "\n".join(" <-> ".join(c) for c in found)
    )


def test_no_cycle_between_top_level_packages():
    graph = package_graph()
    found = cycles(graph)
    detail = []
    for c in found:
        detail.append(" <-> ".join(p or "fasttts_cli" for p in c))
        detail += ["    " + line for line in _cycle_evidence(c, graph, name=top_package)]
    assert not found, (
        "cycles between top-level packages (all imports, function-level included):\n" + "\n".join(detail)
    )


def test_every_top_level_package_has_a_layer():
    known = layer_of()
    unplaced = sorted({top_package(m) for m in modules()} - set(known))
    assert not unplaced, f"top-level packages/modules missing from LAYERS (place them in a layer): {unplaced}"


def test_layers_import_only_downward():
    known = layer_of()
    upward = []
    for importer, targets in sorted(imports(top_level_only=False).items()):
        src = known.get(top_package(importer))
        for t in sorted(targets):
            dst = known.get(top_package(t))
            if src is not None and dst is not None and dst < src:
                upward.append(f"{importer} ({LAYERS[src][0]}) imports {t} ({LAYERS[dst][0]})")
    assert not upward, "imports that point up the layer order:\n" + "\n".join(upward)


# The checks themselves, on made-up graphs: a cycle finder that finds nothing would pass everything above.
def test_cycle_finder_finds_cycles_and_only_cycles():
    g = {
        "a": frozenset({"b"}),
        "b": frozenset({"c"}),
        "c": frozenset({"a"}),
        "d": frozenset({"a"}),
        "e": frozenset(),
    }
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"x": frozenset({"y"}), "y": frozenset()}) == []


def test_top_level_statements_skip_functions_and_type_checking():
    tree = ast.parse(
        "import a\nif TYPE_CHECKING:\n    import b\nelse:\n    import c\n"
        "def f():\n    import d\nclass K:\n    import e\n"
        "try:\n    import g\nexcept ImportError:\n    import h\n"
    )
    names = {
        n.names[0].name
        for n in _top_level_statements(tree.body)
        if isinstance(n, ast.Import | ast.ImportFrom)
    }
    assert names == {"a", "c", "e", "g", "h"}
