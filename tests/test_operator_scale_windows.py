"""The scale benchmark's summaries: nearest-rank percentiles, latencies by when they began (where a tail sits), and
the operator's latency histograms read back."""
import importlib.util
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "operator_scale.py"


@pytest.fixture(scope="module")
def scale():
    spec = importlib.util.spec_from_file_location("operator_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_nearest_rank_percentiles(scale):
    values = [float(v) for v in range(1, 101)]
    assert scale.summary(values) == {"p50": 50.0, "p99": 99.0, "max": 100.0}
    assert scale.summary([]) == {"p50": math.inf, "p99": math.inf, "max": math.inf}


def test_latencies_grouped_by_the_window_they_began_in(scale):
    begin = 1000.0
    starts = [1000.0, 1004.9, 1005.0, 1012.0, 1013.0]
    latencies = [0.1, 0.3, 2.0, 7.0, 5.0]
    windows = scale.by_arrival(starts, latencies, begin, window=5.0)
    assert [(w["from_s"], w["count"], w["max"]) for w in windows] == [(0.0, 2, 0.3), (5.0, 1, 2.0), (10.0, 2, 7.0)]
    assert windows[2]["p50"] == 5.0


def test_a_histogram_read_back_gives_the_share_over_a_bound_and_where_p99_sits(scale):
    text = "\n".join([
        '# TYPE x_seconds histogram',
        'x_seconds_bucket{le="1.0"} 90.0', 'x_seconds_bucket{le="2.0"} 95.0', 'x_seconds_bucket{le="5.0"} 99.0',
        'x_seconds_bucket{le="10.0"} 100.0', 'x_seconds_bucket{le="+Inf"} 100.0', 'x_seconds_count 100.0'])
    assert scale.histogram_split(text, "x_seconds", 2.0) == {"count": 100.0, "share_over": pytest.approx(0.05),
                                                             "p99_at_most": 5.0}
    assert scale.histogram_split("", "x_seconds", 2.0) == {"count": 0.0, "share_over": None, "p99_at_most": None}
