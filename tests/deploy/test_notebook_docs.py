"""The example notebook is a valid nbformat-4 document whose code cells are Python."""
from __future__ import annotations

import ast
import json

from hack import chart

NOTEBOOK = chart.REPO_ROOT / "docs" / "notebook.ipynb"


def test_example_notebook_parses_and_uses_the_client_api():
    notebook = json.loads(NOTEBOOK.read_text())
    assert notebook["nbformat"] == 4
    sources = ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]
    for source in sources:
        ast.parse(source)
    called = {node.func.attr for source in sources for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert {"submit", "wait", "epochs", "logs", "delete"} <= called
