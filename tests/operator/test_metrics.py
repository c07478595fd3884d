import json

from pets_operator.metrics import epoch_entries, epoch_status, merge_epochs, parse_event


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
    assert parse_event(log[5]) == {"event": "done", "epochs": 2}


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
    assert status["accuracy"] == 0.6 and status["bestAccuracy"] == 0.7 and status["currentEpoch"] == 1
    assert len(status["epochs"]) == 2
    assert epoch_status([]) == {"epochs": []}
