"""The project's layering: no import circles (imports inside functions count), mapping/ never
imports hw/, hw/base/ imports nothing else of hw/."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mapping", "hw", "boards", "sim")


def _modules():
    """{dotted name: (path, is package)} of every module of the project's packages."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imports(modules):
    """{module: set of project modules it imports anywhere in its body}."""
    def owner(name):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module
                targets.update(f"{prefix}.{alias.name}" for alias in node.names)
                targets.add(prefix)
        graph[name] = {t for t in map(owner, targets) if t is not None and t != name}
    return graph


GRAPH = _imports(_modules())


def _circles(graph):
    """Strongly connected components of two or more modules (Tarjan)."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return circles


def test_no_import_circles():
    assert _circles(GRAPH) == []


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("lower, upper", [("mapping", "hw"), ("mapping", "sim"), ("hw", "sim"),
                                          ("hw", "boards"), ("hw.base", "hw.")])
def test_lower_layers_never_import_upper_ones(lower, upper):
    offending = {module: sorted(t for t in targets if t.startswith(upper) and not t.startswith(lower))
                 for module, targets in GRAPH.items() if module.startswith(lower)}
    assert {module: targets for module, targets in offending.items() if targets} == {}
