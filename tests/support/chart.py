"""`hack/chart.py` (build tooling, run by `make manifests`), for the tests that import it from here.

Loaded from its file rather than by name: a test module that puts tests/support/ itself on sys.path
(test_fetch.py and test_hub.py do, for their helpers) would make `import chart` find this shim.
"""
import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "hack" / "chart.py"  # it imports k8s_tools: hack/ is on sys.path

chart = sys.modules.get("chart")
if chart is None or Path(getattr(chart, "__file__", "") or "").resolve() != _PATH:
    _spec = importlib.util.spec_from_file_location("chart", _PATH)
    chart = importlib.util.module_from_spec(_spec)
    sys.modules["chart"] = chart
    _spec.loader.exec_module(chart)

sys.modules[__name__] = chart
