"""`hack/chart.py` (build tooling, run by `make manifests`), for the tests that import it from here."""
import sys

import chart  # hack/ is on sys.path: tests/conftest.py

sys.modules[__name__] = chart
