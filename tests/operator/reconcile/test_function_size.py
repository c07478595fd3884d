"""The reconcile package stays a ladder of small policies: no function in it longer than 40 lines."""
import ast
from pathlib import Path

import pets_operator.reconcile

MAX_LINES = 40
PACKAGE = Path(pets_operator.reconcile.__file__).parent


def function_lengths():
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{path.name}:{node.lineno} {node.name}", node.end_lineno - node.lineno + 1


def test_the_package_has_its_policy_modules():
    found = {path.stem for path in PACKAGE.glob("*.py")}
    assert {"__init__", "step", "group", "deadline", "failure", "disruption", "finish", "waiting"} <= found


def test_no_function_in_the_reconcile_package_is_longer_than_40_lines():
    lengths = dict(function_lengths())
    assert len(lengths) > 20  # the package's functions were found
    too_long = {name: length for name, length in lengths.items() if length > MAX_LINES}
    assert too_long == {}
