import pytest

from pets_api.contract import RESERVED_ENV
from pets_operator.spec import with_defaults
from pets_operator.validation import spec_problems


def problems(name="pets", **spec):
    spec.setdefault("data", {"synthetic": {}})
    return spec_problems(name, with_defaults(spec, "img"), RESERVED_ENV)


def test_a_plain_job_is_valid():
    assert problems() == []
    assert problems(data={"persistentVolumeClaim": {"claimName": "c"}, "path": "a/b"}, checkpoint={}) == []
    # Below the writable emptyDirs (/tmp, the home directory) a volume may sit: a nested mount.
    assert problems(data={"hostPath": "/srv/pets", "mountPath": "/tmp/pets"},
                    checkpoint={"path": "/home/trainer/c"}) == []


@pytest.mark.parametrize("spec, words", [
    ({"pretrained": True, "hub": {"offline": True}}, "needs a pre-filled cache"),
    ({"data": {"download": {"url": "https://h/p.tgz"}}}, "exactly one of sha256, md5"),
    ({"data": {"download": {"url": "ftp://h/p.tgz", "md5": "a" * 32}}}, "http or https"),
    ({"data": {"oxfordPets": {}, "synthetic": {}}}, "got synthetic, oxfordPets"),
    ({"cache": {"path": "/data/cache"}}, "cache.path '/data/cache' must not be '/', inside the data mount"),
    ({"output": {"hostPath": "/a", "persistentVolumeClaim": {"claimName": "c"}}}, "output must set at most one"),
    ({"output": {"path": "/tmp"}}, "output.path '/tmp' must not be /tmp or /home/trainer"),
    ({"cache": {"sizeLimit": "lots"}}, "cache.sizeLimit"),
    ({"pretrainedWeights": "weights.pt"}, "absolute"),
    ({"numNodes": 256, "processesPerNode": 8}, "at most 1024"),
    ({"data": {"hostPath": "data"}}, "data.hostPath 'data' must be an absolute path"),
    ({"data": {"hostPath": "/srv/../etc"}}, "'..'"),
    ({"data": {}}, "exactly one of"),
    ({"data": {"hostPath": "/a", "synthetic": {}}}, "got hostPath, synthetic"),
    ({"data": {"synthetic": {}, "path": "/abs"}}, "data.path"),
    ({"checkpoint": {"path": "checkpoints"}}, "checkpoint.path"),
    ({"checkpoint": {"path": "/data/ckpt"}}, "inside the data mount"),
    ({"checkpoint": {"hostPath": "/a", "persistentVolumeClaim": {"claimName": "c"}}}, "at most one"),
    ({"checkpoint": {"path": "/tmp"}}, "checkpoint.path '/tmp' must not be /tmp or /home/trainer"),
    ({"data": {"synthetic": {}, "mountPath": "/home/trainer/"}}, "the trainer's root filesystem is read-only"),
    ({"resources": {"limits": {"memory": "lots"}}}, "resources.limits.memory: 'lots' is not a quantity"),
    ({"resources": {"requests": {"cpu": "4"}, "limits": {"cpu": "2"}}}, "must not exceed"),
    ({"env": [{"name": "MASTER_ADDR", "value": "x"}]}, "set by the operator"),
    ({"env": [{"name": "A B", "value": "x"}]}, "not a valid environment variable name"),
    ({"env": [{"name": "A"}, {"name": "A"}]}, "twice"),
    ({"serviceAccountName": "Bad_Name"}, "DNS-1123 subdomain"),
    ({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}, "must not have a value"),
])
def test_problems_are_explained(spec, words):
    found = problems(**spec)
    assert len(found) == 1, found
    assert words in found[0]


def test_long_names_are_rejected_with_the_limit():
    assert problems(name="p" * 55) == []
    found = problems(name="p" * 56)
    assert found and "at most 55" in found[0]


def test_several_problems_are_all_reported():
    assert len(problems(name="Bad.Name", pretrainedWeights="w.pt", resources={"limits": {"cpu": "x"}})) == 3


def test_downloads_hub_weights_cache_and_output_are_valid():
    assert problems(pretrained=True) == []  # weights from the Hub
    assert problems(pretrained=True, hub={"offline": True}, cache={"persistentVolumeClaim": {"claimName": "c"}}) == []
    assert problems(data={"oxfordPets": {}, "path": "images"}, cache={"sizeLimit": "2Gi"}, output={}) == []
    assert problems(data={"download": {"url": "https://h/p.tgz", "sha256": "a" * 64}}, output={"hostPath": "/o"}) == []


def test_tracking_that_can_work_is_valid():
    mlflow = {"trackingUri": "https://mlflow.example", "tokenSecret": {"name": "m", "key": "t"}}
    assert problems(output={}, tracking={"tensorboard": {}, "mlflow": mlflow}) == []
    assert problems(tracking={"tensorboard": {"hostPath": "/srv/tb", "logDir": "/tb"}}) == []
    assert problems(output={"path": "/out"}, tracking={"tensorboard": {"logDir": "/out/runs"},
                                                       "mlflow": {"trackingUri": "file:///out/mlruns"}}) == []
    assert problems(tracking={"tensorboard": {"enabled": False}, "mlflow": mlflow}) == []


@pytest.mark.parametrize("tracking, words", [
    ({}, "tracking needs tensorboard, mlflow or both"),
    ({"tensorboard": {}}, "tracking.tensorboard needs a place for its event files: set spec.output"),
    ({"tensorboard": {"hostPath": "/srv/tb"}}, "tracking.tensorboard.logDir is required with a volume of its own"),
    ({"tensorboard": {"hostPath": "/srv/tb", "persistentVolumeClaim": {"claimName": "c"}, "logDir": "/tb"}},
     "at most one of persistentVolumeClaim, hostPath"),
    ({"tensorboard": {"hostPath": "/srv/tb", "logDir": "/data/tb"}}, "must not be '/', inside the data mount"),
    ({"tensorboard": {"hostPath": "/srv/tb", "logDir": "/tmp"}}, "must not be /tmp or /home/trainer"),
    ({"mlflow": {"trackingUri": "mlflow.example:5000"}}, "must be an http://, https:// or file:// URI"),
    ({"mlflow": {"trackingUri": "https://me:pw@mlflow.example"}}, "must not carry credentials"),
    ({"mlflow": {"trackingUri": "file:///var/mlruns"}}, "a file:// store must lie inside spec.output.path"),
    ({"mlflow": {"trackingUri": "http://m", "usernameSecret": {"name": "m", "key": "u"}}},
     "usernameSecret and passwordSecret go together"),
    ({"mlflow": {"trackingUri": "http://m", "tokenSecret": {"name": "m", "key": "t"},
                 "usernameSecret": {"name": "m", "key": "u"}, "passwordSecret": {"name": "m", "key": "p"}}},
     "not both"),
])
def test_tracking_problems_are_explained(tracking, words):
    found = problems(tracking=tracking)
    assert any(words in problem for problem in found), found


def test_tensorboard_under_the_output_stays_inside_it():
    found = problems(output={"path": "/out"}, tracking={"tensorboard": {"logDir": "/elsewhere"}})
    assert found == ["tracking.tensorboard.logDir '/elsewhere' must lie inside spec.output.path '/out', or tensorboard "
                     "needs a volume of its own (persistentVolumeClaim or hostPath)"]
