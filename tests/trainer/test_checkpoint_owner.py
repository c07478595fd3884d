"""A checkpoint belongs to the job that wrote it: another job refuses it unless told to take it over.

Fast tests with a stand-in accelerator (one process); `test_training.py` trains for real.
"""
from __future__ import annotations

import json

import pytest
import torch

from pets_api.contract import RESUME_FROM_CHOICES
from pets_trainer.checkpoint import (
    ANY_JOB,
    FINISHED_MARKER,
    SAME_JOB,
    Owner,
    epoch_dir,
    ownership_problem,
    restore_checkpoint,
)
from pets_trainer.errors import ConfigError
from pets_trainer.launch import TRAIN_OPTIONS, build_parser, make_train_config, resolve_options

FIRST = Owner("uid-a", "first", "ml")
SECOND = Owner("uid-b", "second", "ml")
BY_HAND = Owner()
FINGERPRINT = {"model": "resnet10t", "epochs": 3}


class OneProcess:
    """What restore_checkpoint uses of an Accelerator, for a single process."""

    device = torch.device("cpu")

    def __init__(self):
        self.loaded: list[str] = []
        self.printed: list[str] = []

    def gather(self, tensor):
        return tensor

    def load_state(self, path):
        self.loaded.append(path)

    def print(self, *args, **_):
        self.printed.append(" ".join(str(a) for a in args))


def write_checkpoint(directory, epoch, owner: Owner | None, fingerprint=FINGERPRINT):
    target = epoch_dir(directory, epoch)
    target.mkdir(parents=True)
    history = [{"epoch": e, "accuracy": 0.5, "train_loss": 1.0, "seconds": 1.0} for e in range(epoch + 1)]
    finished = {"epoch": epoch, "fingerprint": fingerprint, "history": history}
    if owner is not None:
        finished["owner"] = owner.record()
    (target / FINISHED_MARKER).write_text(json.dumps(finished))


def test_the_choices_are_the_crd_s():
    assert (SAME_JOB, ANY_JOB) == RESUME_FROM_CHOICES


@pytest.mark.parametrize("saved, running, resume_from, allowed", [
    (FIRST, FIRST, SAME_JOB, True),  # a restarted group, an operator restart: the same job
    (FIRST, SECOND, SAME_JOB, False),  # the bug: a new job on a finished job's checkpoint
    (FIRST, Owner("uid-c", "first", "ml"), SAME_JOB, False),  # deleted and recreated under the same name
    (FIRST, SECOND, ANY_JOB, True),  # taken over on purpose
    (BY_HAND, BY_HAND, SAME_JOB, True),  # pets-train by hand, twice
    (FIRST, BY_HAND, SAME_JOB, False),  # by hand on a job's checkpoint
    (FIRST, BY_HAND, ANY_JOB, True),
    (BY_HAND, SECOND, SAME_JOB, False),  # a job on a hand-made (or older trainer's) checkpoint
])
def test_who_may_resume(saved, running, resume_from, allowed, tmp_path):
    assert (ownership_problem(tmp_path, saved, running, resume_from) is None) == allowed


def test_the_refusal_is_one_line_naming_the_path_the_owner_and_the_way_out(tmp_path):
    message = ownership_problem(tmp_path / "ckpt", FIRST, SECOND, SAME_JOB)
    assert message == (f"the checkpoint in {tmp_path / 'ckpt'} belongs to job ml/first (uid uid-a), not to this job"
                       " ml/second (uid uid-b): set spec.checkpoint.resumeFrom: AnyJob (pets-train --resume-from"
                       " AnyJob) to take it over, or use an empty checkpoint directory")
    by_hand = ownership_problem(tmp_path, FIRST, BY_HAND, SAME_JOB)
    assert "not to this run (no JOB_UID: pets-train by hand)" in by_hand
    unowned = ownership_problem(tmp_path, BY_HAND, SECOND, SAME_JOB)
    assert "belongs to a run of no PetsTrainingJob (no JOB_UID" in unowned


def test_an_empty_variable_is_no_owner():
    assert Owner("", "", "") == BY_HAND
    assert Owner.from_record(None) == Owner.from_record({}) == Owner.from_record("junk") == BY_HAND
    assert Owner.from_record(FIRST.record()) == FIRST


def test_another_job_s_checkpoint_is_refused_before_anything_is_loaded(tmp_path):
    write_checkpoint(tmp_path, 1, FIRST)
    accelerator = OneProcess()
    with pytest.raises(ConfigError, match=r"belongs to job ml/first \(uid uid-a\), not to this job ml/second"):
        restore_checkpoint(accelerator, tmp_path, FINGERPRINT, SECOND)
    assert accelerator.loaded == []


def test_the_owner_resumes_and_another_job_takes_over_only_when_told(tmp_path):
    write_checkpoint(tmp_path, 0, FIRST)
    write_checkpoint(tmp_path, 1, FIRST)
    own = OneProcess()
    assert [e.epoch for e in restore_checkpoint(own, tmp_path, FINGERPRINT, FIRST)] == [0, 1]
    assert own.loaded == [str(epoch_dir(tmp_path, 1))] and own.printed == []
    taker = OneProcess()
    assert [e.epoch for e in restore_checkpoint(taker, tmp_path, FINGERPRINT, SECOND, ANY_JOB)] == [0, 1]
    assert taker.printed == [
        f"taking over the checkpoint of job ml/first (uid uid-a) in {tmp_path} (resume from AnyJob)"]


def test_taking_over_still_needs_the_same_training_settings(tmp_path):
    write_checkpoint(tmp_path, 1, FIRST)
    with pytest.raises(ConfigError, match=r"from a different run \(epochs=3 there, 5 now\)"):
        restore_checkpoint(OneProcess(), tmp_path, {**FINGERPRINT, "epochs": 5}, SECOND, ANY_JOB)


def test_a_checkpoint_without_an_owner_resumes_by_hand_only(tmp_path):
    write_checkpoint(tmp_path, 0, None)  # pets-train by hand, or a trainer from before owners were recorded
    assert len(restore_checkpoint(OneProcess(), tmp_path, FINGERPRINT, BY_HAND)) == 1
    with pytest.raises(ConfigError, match="belongs to a run of no PetsTrainingJob"):
        restore_checkpoint(OneProcess(), tmp_path, FINGERPRINT, SECOND)


def test_pets_train_reads_the_owner_and_the_rule_from_env_and_flags():
    environ = {"JOB_UID": "uid-a", "JOB_NAME": "first", "JOB_NAMESPACE": "ml", "RESUME_FROM": "SameJob"}
    config = make_train_config(resolve_options(TRAIN_OPTIONS, build_parser().parse_args([]), environ))
    assert (config.job_uid, config.job_name, config.job_namespace, config.resume_from) == ("uid-a", "first", "ml",
                                                                                           "SameJob")
    flagged = make_train_config(resolve_options(TRAIN_OPTIONS, build_parser().parse_args(
        ["--resume-from", "AnyJob"]), environ))
    assert flagged.resume_from == "AnyJob"
    by_hand = make_train_config(resolve_options(TRAIN_OPTIONS, build_parser().parse_args([]), {}))
    assert (by_hand.job_uid, by_hand.resume_from) == (None, "SameJob")
    with pytest.raises(ConfigError, match="RESUME_FROM='Any': must be one of SameJob, AnyJob"):
        resolve_options(TRAIN_OPTIONS, build_parser().parse_args([]), {"RESUME_FROM": "Any"})
