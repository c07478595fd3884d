"""The trainer's one atomic write (synthetic images, image cache entries, checkpoint markers)."""
from __future__ import annotations

import pytest

from pets_trainer.atomic import write_atomically


def test_the_whole_file_or_the_old_one_and_no_leftovers(tmp_path):
    target = tmp_path / "finished.json"
    write_atomically(target, lambda stream: stream.write(b'{"epoch": 0}'))
    assert target.read_bytes() == b'{"epoch": 0}'

    def fail_halfway(stream):
        stream.write(b'{"epo')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(target, fail_halfway)
    assert target.read_bytes() == b'{"epoch": 0}'
    assert [path.name for path in tmp_path.iterdir()] == ["finished.json"]
