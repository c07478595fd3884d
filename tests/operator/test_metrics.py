import json

import pytest

from pets_api import metric_lines
from pets_api.metric_lines import parse_line
from pets_operator.metrics import epoch_entries, epoch_status, merge_epochs


def test_parses_events_among_ordinary_text():
    log = [
        "Generating synthetic data",
        json.dumps({"event": "epoch", "epoch": 0, "accuracy": 0.5, "train_loss": 1.2, "seconds": 3.5}),
        "[rank0]: " + json.dumps({"event": "epoch", "epoch": 1, "accuracy": 0.75}),
        "{not json",
        json.dumps({"no": "event"}),
        json.dumps({"event": "done", "epochs": 2}),
        "2026-01-01T00:00:00Z " + json.dumps({"event": "epoch", "epoch": 2, "accuracy": 0.8}),
    ]
    assert epoch_entries(log) == [
        {"epoch": 0, "accuracy": 0.5, "trainLoss": 1.2, "seconds": 3.5},
        {"epoch": 1, "accuracy": 0.75},
        {"epoch": 2, "accuracy": 0.8},
    ]
    assert parse_line(log[5]) == {"event": "done", "epochs": 2}


def test_malformed_epoch_events_are_skipped():
    lines = [json.dumps(e) for e in (
        {"event": "epoch", "epoch": "1", "accuracy": 0.5}, {"event": "epoch", "epoch": 1},
        {"event": "epoch", "epoch": -1, "accuracy": 0.5}, {"event": "epoch", "epoch": True, "accuracy": 0.5},
        {"event": "epoch", "epoch": 1, "accuracy": float("nan")})]
    assert epoch_entries(lines) == []


def test_merge_by_epoch_number_never_doubles():
    known = [{"epoch": 0, "accuracy": 0.5}, {"epoch": 1, "accuracy": 0.6}]
    again = [{"epoch": 1, "accuracy": 0.6}, {"epoch": 0, "accuracy": 0.5}, {"epoch": 2, "accuracy": 0.7}]
    assert merge_epochs(known, again) == [{"epoch": 0, "accuracy": 0.5}, {"epoch": 1, "accuracy": 0.6},
                                          {"epoch": 2, "accuracy": 0.7}]


def test_a_later_report_replaces_the_epoch():
    assert merge_epochs([{"epoch": 0, "accuracy": 0.5}], [{"epoch": 0, "accuracy": 0.55}]) == [
        {"epoch": 0, "accuracy": 0.55}]


def test_epoch_status_fields():
    status = epoch_status([{"epoch": 0, "accuracy": 0.7}, {"epoch": 1, "accuracy": 0.6}])
    assert status["accuracy"] == 0.6 and status["bestAccuracy"] == 0.7 and status["currentEpoch"] == 2
    assert len(status["epochs"]) == 2
    assert epoch_status([]) == {"epochs": []}


def test_one_line_format_written_and_read():
    event = metric_lines.epoch_event(3, 0.875, 0.25, 1.5, train_seconds=1.0, resumed=True)
    line = metric_lines.format_line(event)
    assert "\n" not in line and json.loads(line) == event
    assert list(event)[:5] == ["event", "epoch", "accuracy", "train_loss", "seconds"]
    assert parse_line(line) == event
    assert epoch_entries([line]) == [{"epoch": 3, "accuracy": 0.875, "trainLoss": 0.25, "seconds": 1.5}]
    done = metric_lines.done_event(4, 0.9, 0.95)
    assert parse_line(metric_lines.format_line(done)) == {"event": "done", "epochs": 4, "accuracy": 0.9,
                                                          "best_accuracy": 0.95}


def test_what_a_reader_takes_for_an_event():
    event = {"event": "epoch", "epoch": 0, "accuracy": 0.5}
    text = json.dumps(event)
    for carrying in (text, "  " + text + "  ", "[rank0]: " + text, "2026-01-01T00:00:00Z " + text):
        assert parse_line(carrying) == event, carrying
    for other in ("", "plain text", "{not json", text + " trailing", json.dumps({"no": "event"}),
                  json.dumps({"event": 1}), json.dumps([event]), "[rank0]: " + json.dumps(["event"])):
        assert parse_line(other) is None, other
    assert metric_lines.parse_lines(f"a\n[rank0]: {text}\nb\n{text}") == [event, event]
    assert metric_lines.parse_lines(["a", text]) == [event]


def test_an_event_without_a_string_name_is_never_written():
    with pytest.raises(ValueError):
        metric_lines.format_line({"epoch": 1})
