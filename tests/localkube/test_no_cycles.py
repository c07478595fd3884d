"""No import cycle among the project's modules, and no product in the local cluster kit.

The imports are read from the source (`ast`), all of them: at the top, inside functions, under
`TYPE_CHECKING`. `from package import name` counts as importing `package.name` when that is a
module, else `package` itself (as import-linter counts it).
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = [REPO / "operator" / name for name in ("pets_api", "pets_client", "pets_localkube", "pets_operator")]
PACKAGES.append(REPO / "trainer_image" / "pets_trainer")
KIT = "pets_localkube"
# The modules of the kit that know the pets product: its wiring, and the demo that runs it.
PRODUCT_SIDE = {"pets_localkube.product", "pets_localkube.demo"}
# What the kit may use of pets_api: Kubernetes' own rules, which pets_api holds for the operator too.
KIT_MAY_IMPORT = {
    "pets_api.k8s_names": None,  # any name
    "pets_api.quantities": {"parse_quantity"},
    "pets_api.contract": {"apply_schema_defaults"},  # OpenAPI schema defaulting, as the API server does it
}


def module_name(path: Path) -> str:
    root = next(package.parent for package in PACKAGES if path.is_relative_to(package))
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted(package.rglob("*.py"))}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str | None]]:
    """(module, name imported from it or None) for every import of the project's modules in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.append((submodule, None) if submodule in modules else (base, alias.name))
    return [(module, imported) for module, imported in found if module in modules]


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: {module for module, _ in imports_of(name, path, modules)} - {name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
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
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle_and_only_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_relative_imports_resolve_to_the_module_or_the_package():
    modules = project_modules()
    edges = imports_of("pets_localkube.runtimes.docker", modules["pets_localkube.runtimes.docker"], modules)
    assert {("pets_localkube.logs", None), ("pets_localkube.client", "ApiStatusError"),
            ("pets_localkube.runtimes.process", "PodWorker"), ("pets_localkube.runtimes.docker_args", "create_args")} <= set(edges)
    assert ("pets_localkube", "logs") not in edges


def test_no_module_imports_itself_back():
    graph = import_graph()
    assert len(graph) > 80, "the project's modules were not found"
    assert cycles(graph) == []


def test_the_kit_imports_only_kubernetes_rules_of_pets_api_and_nothing_else_of_the_product():
    modules = project_modules()
    wrong = []
    for name, path in modules.items():
        if not name.startswith(KIT + ".") and name != KIT or name in PRODUCT_SIDE:
            continue
        for module, imported in imports_of(name, path, modules):
            if module.startswith(KIT):
                if module in PRODUCT_SIDE:
                    wrong.append(f"{name} imports {module}")
                continue
            allowed = KIT_MAY_IMPORT.get(module, set())
            if allowed is not None and imported not in allowed:
                wrong.append(f"{name} imports {module}" + (f".{imported}" if imported else ""))
    assert wrong == []


def test_only_pets_api_is_imported_from_the_kits_package():
    modules = project_modules()
    outside = {module.partition(".")[0] for name, path in modules.items() if name.startswith(KIT)
               for module, _ in imports_of(name, path, modules)} - {KIT}
    assert outside == {"pets_api"}
