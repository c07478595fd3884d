import json

from pets_api.metric_lines import split_lines
from pets_operator.follower import EpochBook, PodLogFollower


def epoch_line(epoch, accuracy):
    return json.dumps({"event": "epoch", "epoch": epoch, "accuracy": accuracy}) + "\n"


class FakeResponse:
    def __init__(self, chunks):
        self.chunks = [c.encode() for c in chunks]

    def read1(self, size):
        return self.chunks.pop(0) if self.chunks else b""

    def release_conn(self):
        pass

    def close(self):
        pass


def test_split_lines_across_chunks():
    assert list(split_lines([b"ab", b"c\nde", b"f\n\ng"])) == ["abc", "def", "", "g"]


def test_book_publishes_only_changes():
    published = []
    book = EpochBook([{"epoch": 0, "accuracy": 0.5}], published.append)
    assert not book.add([{"epoch": 0, "accuracy": 0.5}])
    assert book.add([{"epoch": 1, "accuracy": 0.7}])
    assert published == [{"epochs": [{"epoch": 0, "accuracy": 0.5}, {"epoch": 1, "accuracy": 0.7}],
                          "accuracy": 0.7, "bestAccuracy": 0.7, "currentEpoch": 2}]


def test_follower_rereads_a_dropped_log_without_doubling():
    published = []
    book = EpochBook([], published.append)
    # The first connection drops mid-line while the pod still runs; the second has the whole log.
    responses = [FakeResponse(["text\n", epoch_line(0, 0.4), '{"event": "ep']),
                 FakeResponse(["text\n", epoch_line(0, 0.4), epoch_line(1, 0.6)])]
    states = iter([("uid", "Running"), ("uid", "Succeeded")])
    drained = []
    follower = PodLogFollower("uid", lambda: responses.pop(0), lambda: next(states), book,
                              lambda: drained.append(True))
    follower._run()  # in this thread, for the test
    assert drained == [True] and follower.drained.is_set()
    assert book.epochs == [{"epoch": 0, "accuracy": 0.4}, {"epoch": 1, "accuracy": 0.6}]
    assert len(published) == 2


def test_follower_gives_up_when_the_pod_is_gone():
    def unreadable():
        raise ConnectionError("refused")

    follower = PodLogFollower("uid", unreadable, lambda: None, EpochBook([], lambda _: None), lambda: None)
    follower._run()
    assert follower.drained.is_set()


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


def test_follower_passes_its_attempt_and_resumed_lines_to_the_book():
    calls = []

    class Book:
        def add(self, entries, attempt=None, resumed=False):
            calls.append(([e["epoch"] for e in entries], attempt, resumed))

    resumed_line = json.dumps({"event": "epoch", "epoch": 0, "accuracy": 0.5, "resumed": True}) + "\n"
    response = FakeResponse([resumed_line, epoch_line(1, 0.6)])
    follower = PodLogFollower("uid", lambda: response, lambda: ("uid", "Succeeded"), Book(), lambda: None, attempt=2)
    follower._run()
    assert calls == [([0], 2, True), ([1], 2, False)]


def test_the_book_keeps_the_current_attempt_s_download_progress():
    from pets_operator.follower import EpochBook
    from pets_api.metric_lines import init_event, initialized_event

    book = EpochBook([], publish=lambda fields: None, attempt=1)
    book.note_init(init_event("data", "http://h/a.tgz", 5, 10), attempt=0)  # an earlier group's line
    assert book.initialization.artefacts == {}
    book.note_init(init_event("data", "http://h/a.tgz", 5, 10), attempt=1)
    book.note_init(initialized_event(), attempt=1)
    assert book.initialization.artefacts == {"data": ("http://h/a.tgz", 5, 10)} and book.initialization.done
    book.start_attempt(2, keep=True)  # a new group downloads (or finds its cache) anew
    assert not book.initialization.done and book.initialization.artefacts == {}
