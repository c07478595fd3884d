import json

from pets_operator.follower import EpochBook, PodLogFollower, split_lines


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
                          "accuracy": 0.7, "bestAccuracy": 0.7, "currentEpoch": 1}]


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
