"""Epoch lines -> `status.epochs` (`epochs`): the entries and their merge, and the job's epoch book."""
import json

import pytest

from pets_api import metric_lines
from pets_api.metric_lines import parse_line
from pets_operator.epochs import EpochBook, epoch_entries, epoch_status, merge_epochs


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


def test_book_publishes_only_changes():
    published = []
    book = EpochBook([{"epoch": 0, "accuracy": 0.5}], published.append)
    assert not book.add([{"epoch": 0, "accuracy": 0.5}])
    assert book.add([{"epoch": 1, "accuracy": 0.7}])
    assert published == [{"epochs": [{"epoch": 0, "accuracy": 0.5}, {"epoch": 1, "accuracy": 0.7}],
                          "accuracy": 0.7, "bestAccuracy": 0.7, "currentEpoch": 2}]


def entry(epoch, accuracy):
    return {"epoch": epoch, "accuracy": accuracy}


def test_book_keeps_nothing_at_or_beyond_spec_epochs():
    published = []
    stale = [entry(n, 0.1 * n) for n in range(8)]  # a run with more epochs than the spec now has
    book = EpochBook(stale, published.append, limit=5)
    assert [e["epoch"] for e in book.epochs] == [0, 1, 2, 3, 4]
    assert book.fields()["currentEpoch"] == 5
    assert not book.add([entry(5, 0.9)]) and published == []


def test_book_ignores_lines_of_another_attempt():
    published = []
    book = EpochBook([], published.append, attempt=1)
    assert not book.add([entry(0, 0.5)], attempt=0)
    assert book.add([entry(0, 0.6)], attempt=1)
    assert book.epochs == [entry(0, 0.6)]


def test_a_restart_without_checkpoint_forgets_the_epochs():
    published = []
    book = EpochBook([entry(0, 0.5), entry(1, 0.6), entry(2, 0.7)], published.append, attempt=0)
    book.start_attempt(1, keep=False)
    assert book.epochs == [] and book.fields() == {"epochs": [], "accuracy": None, "bestAccuracy": None,
                                                    "currentEpoch": None}
    assert not book.add([entry(3, 0.9)], attempt=0)  # the old pod 0's log, still being read
    assert book.add([entry(0, 0.4)], attempt=1)
    assert published[-1] == {"epochs": [entry(0, 0.4)], "accuracy": 0.4, "bestAccuracy": 0.4, "currentEpoch": 1}


def test_a_restart_with_checkpoint_keeps_epochs_up_to_the_resume_point():
    published = []
    book = EpochBook([entry(0, 0.5), entry(1, 0.6), entry(2, 0.7)], published.append, attempt=0)
    book.start_attempt(1, keep=True)
    assert len(book.epochs) == 3  # until the new group says otherwise
    # The checkpoint holds epochs 0 and 1 (epoch 2 finished but its save was cut off): re-reported.
    assert not book.add([entry(0, 0.5)], attempt=1, resumed=True)
    assert not book.add([entry(1, 0.6)], attempt=1, resumed=True)
    # The first epoch it trains is 2 again: the old epoch 2 is replaced, nothing beyond it stays.
    assert book.add([entry(2, 0.75)], attempt=1)
    assert book.epochs == [entry(0, 0.5), entry(1, 0.6), entry(2, 0.75)]


def test_a_restart_with_an_unusable_checkpoint_starts_over():
    book = EpochBook([entry(0, 0.5), entry(1, 0.6), entry(2, 0.7)], lambda _: None, attempt=0)
    book.start_attempt(1, keep=True)
    assert book.add([entry(0, 0.3)], attempt=1)  # fresh, nothing re-reported
    assert book.epochs == [entry(0, 0.3)]


def test_a_failed_publish_records_nothing_so_a_reread_publishes_again():
    published = []

    def flaky(fields):
        if not published:
            published.append(None)
            raise ConnectionError("API down")
        published.append(fields)

    book = EpochBook([], flaky)
    try:
        book.add([entry(0, 0.5)])
    except ConnectionError:
        pass
    assert book.epochs == []
    assert book.add([entry(0, 0.5)]) and published[-1]["currentEpoch"] == 1


def test_the_book_keeps_the_current_attempt_s_download_progress():
    from pets_api.metric_lines import init_event, initialized_event

    book = EpochBook([], publish=lambda fields: None, attempt=1)
    book.note_init(init_event("data", "http://h/a.tgz", 5, 10), attempt=0)  # an earlier group's line
    assert book.initialization.artefacts == {}
    book.note_init(init_event("data", "http://h/a.tgz", 5, 10), attempt=1)
    book.note_init(initialized_event(), attempt=1)
    assert book.initialization.artefacts == {"data": ("http://h/a.tgz", 5, 10)} and book.initialization.done
    book.start_attempt(2, keep=True)  # a new group downloads (or finds its cache) anew
    assert not book.initialization.done and book.initialization.artefacts == {}


def test_reading_the_book_never_waits_for_a_patch_in_flight():
    """The runner's step reads the book on the event loop: a status patch that takes seconds (a busy API
    server) must not hold it there, or every job's handling waits with it. Adds still leave in order."""
    import threading

    patching, release = threading.Event(), threading.Event()
    published = []

    def slow(fields):
        patching.set()
        assert release.wait(10)
        published.append(fields)

    book = EpochBook([], slow, attempt=0)
    adding = threading.Thread(target=book.add, args=([entry(0, 0.5)],))
    adding.start()
    try:
        assert patching.wait(5)
        reads = threading.Thread(target=lambda: (book.initialization, book.tracking, book.epochs,
                                                 book.note_init({"event": "initialized"})))
        reads.start()
        reads.join(2)
        assert not reads.is_alive(), "a read of the book waited for the status patch"
        assert book.epochs == []  # recorded only once the patch is stored
        later = threading.Thread(target=book.add, args=([entry(1, 0.6)],))
        later.start()
        later.join(0.2)
        assert later.is_alive()  # the next add waits for the patch in flight: patches stay in order
    finally:
        release.set()
        adding.join(5)
    later.join(5)
    assert [fields["currentEpoch"] for fields in published] == [1, 2]
    assert book.epochs == [entry(0, 0.5), entry(1, 0.6)]
