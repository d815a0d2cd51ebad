"""hutch's imports go one way: no module imports, however indirectly, a module that imports it.

The graph is read from the source with `ast`, not by importing: every import statement counts, at
module level, inside functions and under TYPE_CHECKING alike, since each says which module leans on
which. An edge goes to the module named; `from package import name` goes to `package.name` where
that is a module, else to the package itself.
"""

from __future__ import annotations

import ast
import functools
from collections import deque
from pathlib import Path

import hutch

ROOT = Path(hutch.__file__).parent


def module_names() -> dict[str, Path]:
    """Every module under hutch/ by dotted name (a package by its own name, for its __init__)."""
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_by(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The hutch modules that the module `name` (at `path`) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package, one level up for each dot past the first
                base = package.rsplit(".", node.level - 1)[0]
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source)
    return {m for m in found if m in modules and m != name}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imported_by(name, path, modules) for name, path in modules.items()}


def knots(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of two or more modules that each reach all the others (Tarjan's strongly
    connected components): every import cycle lies within one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def path_around(group: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest way from the group's first module back to itself, within the group."""
    start = min(group)
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node] & group):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"no way around {sorted(group)}")


def test_the_graph_is_read_from_every_kind_of_import() -> None:
    graph = import_graph()
    assert len(graph) > 50 and "hutch.e2b.connect" in graph
    assert "hutch.errors" in graph["hutch.e2b.connect"]  # from hutch.errors import ApiError, Code
    assert "hutch.e2b" not in graph["hutch.e2b.connect"]


def test_cycles_are_found_and_shown_as_a_path() -> None:
    graph = {"a": {"b"}, "b": {"c", "x"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}, "x": {"a"}}
    assert knots(graph) == [{"a", "b", "c", "x"}]
    assert path_around({"a", "b", "c", "x"}, graph) == ["a", "b", "c", "a"]
    assert knots({"x": {"y"}, "y": {"x"}, "z": {"x"}}) == [{"x", "y"}]


def test_no_import_cycle_in_hutch() -> None:
    graph = import_graph()
    shown = []
    for knot in knots(graph):
        path = path_around(knot, graph)
        rest = sorted(knot - set(path))
        shown.append("  " + " -> ".join(path) + (f"  (the same knot holds {', '.join(rest)})" if rest else ""))
    assert not shown, "import cycles in hutch:\n" + "\n".join(shown)


# --- the layers' rules: which package may lean on which ---------------------------------------------

FRONTS = ("hutch.server", "hutch.e2b", "hutch.console")  # HTTP's, E2B's and the console's fronts
WIRING = ("hutch.fleet", "hutch.cli")  # a fleet's reach to its nodes; the command line
CLIENT = ("hutch.sdk", "hutch.integrations", "hutch.shell")  # what runs in a user's process
BELOW_SERVICES = ("hutch.node", "hutch.store", "hutch.egress", "hutch.preview", "hutch.secrets",
                  "hutch.templates", "hutch.guest", "hutch.errors", "hutch.http_relay", "hutch.tracing")
COMPOSITION_ROOTS = {"hutch.server.app"}  # with hutch.cli: where the fleet, E2B and the console are wired in


def within(module: str, packages: tuple[str, ...] | str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in ((packages,) if isinstance(packages, str) else packages))


def broken(rule: str, importer: tuple[str, ...] | str, forbidden: tuple[str, ...] | str,
           exempt: set[str] | None = None) -> list[str]:
    """Each import, by a module of `importer`, of a module of `forbidden`: one line per breach."""
    return [f"{rule}: {a} imports {b}" for a, bs in sorted(import_graph().items()) for b in sorted(bs)
            if within(a, importer) and not within(a, forbidden) and within(b, forbidden)
            and a not in (exempt or set())]


LAYER_RULES: list[tuple[str, tuple[str, ...] | str, tuple[str, ...] | str, set[str]]] = [
    ("the services know no front and no wiring", "hutch.services", (*FRONTS, *WIRING, *CLIENT), set()),
    ("what lies below the services knows nothing above it", BELOW_SERVICES,
     ("hutch.services", *FRONTS, *WIRING, *CLIENT), set()),
    ("the HTTP layer wires in the fleet, E2B and the console only at its composition root", "hutch.server",
     ("hutch.fleet", "hutch.e2b", "hutch.console"), COMPOSITION_ROOTS),
    ("the fleet is below the fronts", "hutch.fleet", (*FRONTS, "hutch.cli"), set()),
    ("E2B's facade and the console are fronts side by side", "hutch.e2b", "hutch.console", set()),
    ("the console and E2B's facade are fronts side by side", "hutch.console", "hutch.e2b", set()),
    ("a user's process holds the client alone", CLIENT,
     ("hutch.services", *FRONTS, *WIRING, *BELOW_SERVICES), set()),
    ("only the node speaks to the agent", "hutch", "hutch.guest", {m for m in module_names() if within(m, "hutch.node")}),
]


def test_the_rules_see_a_breach() -> None:
    assert within("hutch.services.sandboxes", "hutch.services") and not within("hutch.servicesx", "hutch.services")
    assert broken("r", "hutch.server", "hutch.services")  # the routes do call the services
    assert broken("r", "hutch", "hutch.guest")  # the node does speak to the agent


def test_each_layer_leans_only_on_the_layers_below_it() -> None:
    breaches = [line for rule, importer, forbidden, exempt in LAYER_RULES
                for line in broken(rule, importer, forbidden, exempt)]
    assert not breaches, "imports across the layers' rules:\n  " + "\n  ".join(breaches)
