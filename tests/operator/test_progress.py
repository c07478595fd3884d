"""The notebook display of a job (pets_client.progress): a failed job's bar is red, the cell's plain text (what
GitHub and nbconvert show) ends with the outcome, and a shipped function's total can be given."""
from __future__ import annotations

import pytest

from pets_client import progress

EPOCHS = [{"epoch": 0, "accuracy": 0.5}, {"epoch": 1, "accuracy": 0.75}]


def resource(phase, function=False, message=None):
    spec = {"epochs": 5, **({"function": {"configMap": "f", "key": "function.pkl"}} if function else {})}
    return {"spec": spec, "status": {"phase": phase, "epochs": EPOCHS, "message": message}}


@pytest.fixture
def notebook_bar(monkeypatch):
    """tqdm.auto's bar as in a Jupyter kernel: tqdm.notebook's widget."""
    pytest.importorskip("ipywidgets")
    import tqdm.auto
    import tqdm.notebook

    monkeypatch.setattr(tqdm.auto, "tqdm", tqdm.notebook.tqdm)


def test_a_failed_job_s_bar_is_red_not_green(notebook_bar, capsys):
    shown = progress.BarDisplay("pets")
    shown.close(progress.progress("pets", resource("Failed", message="worker pets-1 failed")))
    assert shown._bar.container.children[1].bar_style == "danger"
    assert shown._bar.colour == "red"
    done = progress.BarDisplay("done")
    done.close(progress.progress("done", {**resource("Succeeded"), "status": {
        "phase": "Succeeded", "epochs": [{"epoch": n, "accuracy": 0.5} for n in range(5)]}}))
    assert done._bar.container.children[1].bar_style == "success"


def test_the_cell_s_text_ends_with_the_outcome_not_0epoch(notebook_bar, capsys):
    shown = progress.BarDisplay("pets")
    shown.close(progress.progress("pets", resource("Failed", message="worker pets-1 failed: boom")))
    out, err = capsys.readouterr()
    assert out.rstrip().splitlines()[-1] == "pets: Failed, 2/5 epochs, accuracy 0.7500 (best 0.7500)"
    assert "pets failed: worker pets-1 failed: boom" in err


def test_a_function_s_total_comes_from_the_notebook():
    assert progress.progress("f", resource("Running", function=True)).total is None  # spec.epochs is unused
    given = progress.progress("f", resource("Running", function=True), total=7)
    assert given.total == 7 and progress.summary(given).startswith("Running, 2/7 epochs")
    assert progress.progress("r", resource("Running")).total == 5  # the recipe's spec.epochs
