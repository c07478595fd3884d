"""The tutorial's own `epoch N: XX.XX` lines as epochs (metric_lines, epochs, the log follower), and
`pets_trainer.report`, the exact alternative."""
from __future__ import annotations

import io
import json

import pytest

from pets_api import metric_lines
from pets_operator.epochs import EpochBook, epoch_entries, epoch_status, merge_epochs
from pets_operator.logfollow import add_entries, epoch_batches


@pytest.mark.parametrize("line, epoch, accuracy", [
    ("epoch 0: 88.12", 0, 0.8812),
    ("[rank0]: epoch 1: 90.00", 1, 0.9),
    ("[rank0]:epoch 2: 7.50", 2, 0.075),
    ("2026-01-01T00:00:00.000000000Z epoch 12: 100.00", 12, 1.0),
    ("  epoch 3: 45  ", 3, 0.45),
    ("Epoch 4: 50.5", 4, 0.505),
    ("train  5%|#  | 1/20\repoch 5: 61.25", 5, 0.6125),  # a progress bar drew over the start of the line
])
def test_a_printed_epoch_line_is_an_epoch_event(line, epoch, accuracy):
    event = metric_lines.parse_printed_epoch(line)
    assert event == {"event": "epoch", "epoch": epoch, "accuracy": accuracy, "printed": True}
    assert metric_lines.parse_progress_line(line) == event


@pytest.mark.parametrize("line", [
    "", "epoch", "epoch 0", "epoch 0:", "epoch 0: 88.12 (best)", "epoch 0: 101.00", "epoch -1: 50",
    "myepoch 0: 50.00", "epoch x: 50", "loss at epoch 0: nan", "epoch 0: 88.12.3",
])
def test_other_lines_are_not(line):
    assert metric_lines.parse_printed_epoch(line) is None


def test_json_metric_lines_are_unchanged_and_still_win():
    text = json.dumps({"event": "epoch", "epoch": 0, "accuracy": 0.881234, "train_loss": 0.4})
    assert metric_lines.parse_progress_line(text) == json.loads(text)
    # The trainer's parser (the one its tests use) still takes JSON lines only.
    assert metric_lines.parse_lines(["epoch 0: 88.12", text]) == [json.loads(text)]


def test_the_tutorials_output_between_other_lines():
    log = """Generating synthetic data
[W socket.cpp:464] [c10d] some warning
epoch 0: 62.50
some other output
[rank0]: epoch 1: 87.50
done"""
    assert epoch_entries(log.splitlines()) == [{"epoch": 0, "accuracy": 0.625, "printed": True},
                                               {"epoch": 1, "accuracy": 0.875, "printed": True}]
    status = epoch_status(merge_epochs([], epoch_entries(log.splitlines())))
    assert status == {"epochs": [{"epoch": 0, "accuracy": 0.625}, {"epoch": 1, "accuracy": 0.875}],
                      "accuracy": 0.875, "bestAccuracy": 0.875, "currentEpoch": 2}, "the marker stays out of the status"


def test_a_metric_line_replaces_a_printed_one_and_never_the_reverse():
    printed = epoch_entries(["epoch 0: 88.12"])
    exact = epoch_entries([json.dumps({"event": "epoch", "epoch": 0, "accuracy": 0.881234, "train_loss": 0.4})])
    # The built-in recipe prints the line, then the JSON: the JSON's exact figure and loss stay.
    assert merge_epochs(merge_epochs([], printed), exact) == [{"epoch": 0, "accuracy": 0.881234, "trainLoss": 0.4}]
    # report() first, then the tutorial's print: the report stays.
    assert merge_epochs(merge_epochs([], exact), printed) == [{"epoch": 0, "accuracy": 0.881234, "trainLoss": 0.4}]
    # Re-reading a log (an operator restart) changes nothing.
    known = [{"epoch": 0, "accuracy": 0.8812}]
    assert merge_epochs(known, printed) == known


def test_the_follower_publishes_printed_epochs():
    published = []
    book = EpochBook([], published.append, limit=None)  # a function job: no epoch bound
    log = "2026-01-01T00:00:00Z starting\n2026-01-01T00:00:01Z epoch 0: 50.00\nepoch 1: 75.00\nepoch 7: 80.00\n"
    for entries, _, resumed in epoch_batches(log.splitlines()):  # what the follower does with the lines it read
        add_entries(book, entries, None, resumed)
    assert published[-1]["epochs"] == [{"epoch": 0, "accuracy": 0.5}, {"epoch": 1, "accuracy": 0.75},
                                       {"epoch": 7, "accuracy": 0.8}]
    assert published[-1]["bestAccuracy"] == 0.8


def test_a_function_job_has_no_epoch_bound():
    from pets_operator.spec import epoch_limit, with_defaults

    assert epoch_limit(with_defaults({"data": {"synthetic": {}}, "epochs": 3}, "img")) == 3
    assert epoch_limit(with_defaults({"function": {"configMap": "fn"}, "epochs": 3}, "img")) is None


def test_report_prints_the_metric_line_on_the_main_process(monkeypatch):
    from pets_trainer import report

    out = io.StringIO()
    monkeypatch.delenv("RANK", raising=False)
    assert report(epoch=2, accuracy=0.91, train_loss=0.25, seconds=3, stream=out)
    (line,) = out.getvalue().splitlines()
    assert json.loads(line) == {"event": "epoch", "epoch": 2, "accuracy": 0.91, "train_loss": 0.25, "seconds": 3.0}
    assert epoch_entries([line]) == [{"epoch": 2, "accuracy": 0.91, "trainLoss": 0.25, "seconds": 3.0}]

    other = io.StringIO()
    monkeypatch.setenv("RANK", "1")
    assert not report(epoch=2, accuracy=0.91, stream=other)
    assert other.getvalue() == ""


def test_report_refuses_what_would_be_a_wrong_status():
    from pets_trainer import report

    with pytest.raises(ValueError, match="a percentage"):
        report(epoch=0, accuracy=88.12, stream=io.StringIO())
    with pytest.raises(ValueError, match="epoch"):
        report(epoch=-1, accuracy=0.5, stream=io.StringIO())
    with pytest.raises(TypeError, match="train_loss"):
        report(epoch=0, accuracy=0.5, train_loss="low", stream=io.StringIO())
    with pytest.raises(ValueError, match="finite"):
        report(epoch=0, accuracy=0.5, train_loss=float("nan"), stream=io.StringIO())


def test_report_takes_a_tensor_value():
    import torch

    from pets_trainer import report

    out = io.StringIO()
    report(epoch=0, accuracy=torch.tensor(0.5), train_loss=torch.tensor(1.5), stream=out)
    assert json.loads(out.getvalue())["accuracy"] == 0.5
