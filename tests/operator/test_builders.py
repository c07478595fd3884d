import kubernetes_validate
import pytest

from pets_api import contract, names
from pets_operator import builders
from pets_operator.spec import with_defaults


def env_of(pod):
    return {item["name"]: item["value"] for item in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("index", [0, 1])
def test_rendezvous_environment_per_index(job, spec, index):
    env = env_of(builders.pod_body(job, spec, index, attempt=0))
    assert env["MASTER_ADDR"] == "pets-0.pets-workers.ml.svc"
    assert env["MASTER_PORT"] == "29500"
    assert env["NUM_MACHINES"] == "2"
    assert env["MACHINE_RANK"] == env["JOB_COMPLETION_INDEX"] == str(index)
    assert env["NPROC_PER_NODE"] == "2" and env["WORLD_SIZE"] == "4"
    assert (env["MODEL"], env["EPOCHS"], env["SEED"], env["BATCH_SIZE"]) == ("resnet10t", "3", "42", "64")
    assert (env["MIXED_PRECISION"], env["MAX_LR"], env["NUM_WORKERS"], env["IMAGE_SIZE"]) == ("no", "0.03", "4", "224")
    assert env["DATA_DIR"] == "/data" and env["PRETRAINED"] == "false"
    assert (env["SYNTHETIC_CLASSES"], env["SYNTHETIC_IMAGES_PER_CLASS"], env["SYNTHETIC_IMAGE_SIZE"]) == ("3", "20", "64")
    assert "CHECKPOINT_DIR" not in env and "PRETRAINED_WEIGHTS" not in env


def test_every_managed_variable_is_reserved(job, spec):
    spec = with_defaults({**spec, "pretrained": True, "pretrainedWeights": "/w/r.safetensors", "checkpoint": {}},
                         "img")
    assert set(env_of(builders.pod_body(job, spec, 0, 0))) <= contract.RESERVED_ENV


def test_pod_identity_labels_and_owner(job, spec):
    pod = builders.pod_body(job, spec, 1, attempt=3)
    meta = pod["metadata"]
    assert meta["name"] == "pets-1" and meta["namespace"] == "ml"
    assert meta["labels"][names.LABEL_JOB_NAME] == "pets"
    assert meta["labels"][names.LABEL_REPLICA_INDEX] == "1"
    assert meta["labels"][names.LABEL_ATTEMPT] == "3"
    assert meta["annotations"][names.ANNOTATION_COMPLETION_INDEX] == "1"
    assert meta["ownerReferences"] == [{"apiVersion": "training.pets.dev/v1alpha1", "kind": "PetsTrainingJob",
                                        "name": "pets", "uid": "uid-1", "controller": True,
                                        "blockOwnerDeletion": True}]
    assert pod["spec"]["hostname"] == "pets-1" and pod["spec"]["subdomain"] == "pets-workers"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["containers"][0]["command"] == ["pets-train"]
    assert pod["spec"]["containers"][0]["image"] == "pets-trainer:0.1.0"


def test_security_defaults(job, spec):
    pod = builders.pod_body(job, spec, 0, 0)
    assert pod["spec"]["enableServiceLinks"] is False
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod["spec"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["spec"]["containers"][0]["securityContext"]
    assert container["allowPrivilegeEscalation"] is False and container["capabilities"] == {"drop": ["ALL"]}
    assert container["readOnlyRootFilesystem"] is True


def test_a_read_only_root_gets_writable_tmp_and_home(job, spec):
    pod = builders.pod_body(job, spec, 0, 0)
    assert volume(pod, "tmp") == {"name": "tmp", "emptyDir": {}}
    assert volume(pod, "home") == {"name": "home", "emptyDir": {}}
    assert mount(pod, "tmp") == {"name": "tmp", "mountPath": "/tmp"}
    assert mount(pod, "home") == {"name": "home", "mountPath": "/home/trainer"}
    env = env_of(pod)
    # The caches (Hugging Face's, torch hub's) default to XDG_CACHE_HOME: inside the home emptyDir.
    assert env["HOME"] == "/home/trainer" and env["XDG_CACHE_HOME"] == "/home/trainer/.cache"
    assert "TMPDIR" not in env  # /tmp itself is the emptyDir
    paths = [m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]]
    assert len(paths) == len(set(paths))


def test_the_job_s_identity_and_resume_rule_reach_the_trainer(job, spec):
    env = env_of(builders.pod_body(job, spec, 1, 0))
    assert (env["JOB_UID"], env["JOB_NAME"], env["JOB_NAMESPACE"]) == ("uid-1", "pets", "ml")
    assert "RESUME_FROM" not in env  # no checkpoint
    with_checkpoint = with_defaults({**spec, "checkpoint": {}}, "img")
    assert env_of(builders.pod_body(job, with_checkpoint, 0, 0))["RESUME_FROM"] == "SameJob"
    taking_over = with_defaults({**spec, "checkpoint": {"resumeFrom": "AnyJob"}}, "img")
    assert env_of(builders.pod_body(job, taking_over, 0, 0))["RESUME_FROM"] == "AnyJob"


def selects(selector, labels):
    """A LabelSelector's matchLabels/matchExpressions (In, NotIn, Exists, DoesNotExist) against labels."""
    ok = all(labels.get(key) == value for key, value in (selector.get("matchLabels") or {}).items())
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        ok = ok and {"In": lambda: labels.get(key) in values, "NotIn": lambda: labels.get(key) not in values,
                     "Exists": lambda: key in labels, "DoesNotExist": lambda: key not in labels}[operator]()
    return ok


def test_the_network_policy_admits_ingress_only_from_the_job_s_own_pods(job, spec):
    policy = builders.network_policy_body(job)
    assert (policy["apiVersion"], policy["kind"]) == ("networking.k8s.io/v1", "NetworkPolicy")
    assert policy["metadata"]["namespace"] == "ml"
    assert policy["metadata"]["ownerReferences"] == [builders.owner_reference(job)]
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress (DNS, storage) stays open
    (rule,) = policy["spec"]["ingress"]
    assert "ports" not in rule  # the collectives connect on ports of their own choosing
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}  # no namespaceSelector: the job's namespace only
    # Every pod of the job, of every attempt, is both protected and admitted ...
    own = [builders.pod_body(job, spec, index, attempt)["metadata"]["labels"] for index in (0, 1) for attempt in (0, 3)]
    assert all(selects(policy["spec"]["podSelector"], labels) for labels in own)
    assert all(selects(peer["podSelector"], labels) for labels in own)
    # ... and no pod of another job, not even one whose name starts the same way.
    for other_name in ("pets-2", "other", "pet"):
        other = {**job, "metadata": {**job["metadata"], "name": other_name, "uid": "uid-2"}}
        labels = builders.pod_body(other, spec, 0, 0)["metadata"]["labels"]
        assert not selects(policy["spec"]["podSelector"], labels)
        assert not selects(peer["podSelector"], labels)
    assert not selects(peer["podSelector"], {})  # nor a pod without labels


def test_service_account_mounts_its_token(job, spec):
    pod = builders.pod_body(job, {**spec, "serviceAccountName": "trainer"}, 0, 0)
    assert pod["spec"]["serviceAccountName"] == "trainer"
    assert pod["spec"]["automountServiceAccountToken"] is True


def test_scheduling_and_resources_are_passed_through(job, spec):
    spec = {**spec, "resources": {"limits": {"nvidia.com/gpu": 2, "memory": "8Gi"}, "requests": {"cpu": "2"}},
            "nodeSelector": {"gpu": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "imagePullPolicy": "IfNotPresent", "env": [{"name": "OMP_NUM_THREADS", "value": "4"}]}
    pod = builders.pod_body(job, spec, 0, 0)
    container = pod["spec"]["containers"][0]
    assert container["resources"] == spec["resources"]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert env_of(pod)["OMP_NUM_THREADS"] == "4"
    assert pod["spec"]["nodeSelector"] == {"gpu": "a100"}
    assert pod["spec"]["tolerations"] == spec["tolerations"]


def volume(pod, name):
    return next(v for v in pod["spec"]["volumes"] if v["name"] == name)


def mount(pod, name):
    return next(m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == name)


def test_synthetic_data_is_a_writable_empty_dir(job, spec):
    pod = builders.pod_body(job, spec, 0, 0)
    assert volume(pod, "data") == {"name": "data", "emptyDir": {}}
    assert mount(pod, "data") == {"name": "data", "mountPath": "/data", "readOnly": False}


def test_pvc_data_with_path_and_checkpoint(job):
    spec = with_defaults({"data": {"persistentVolumeClaim": {"claimName": "pets"}, "path": "images"},
                          "checkpoint": {"persistentVolumeClaim": {"claimName": "ckpt"}}}, "img")
    pod = builders.pod_body(job, spec, 0, 0)
    assert volume(pod, "data")["persistentVolumeClaim"] == {"claimName": "pets", "readOnly": True}
    assert mount(pod, "data")["readOnly"] is True
    assert volume(pod, "checkpoint")["persistentVolumeClaim"] == {"claimName": "ckpt"}
    assert mount(pod, "checkpoint")["mountPath"] == "/checkpoints"
    env = env_of(pod)
    assert env["DATA_DIR"] == "/data/images" and env["CHECKPOINT_DIR"] == "/checkpoints"


def test_host_path_data_and_checkpoint(job):
    spec = with_defaults({"data": {"hostPath": "/srv/pets"},
                          "checkpoint": {"hostPath": "/srv/ckpt", "path": "/state"}}, "img")
    pod = builders.pod_body(job, spec, 0, 0)
    assert volume(pod, "data")["hostPath"] == {"path": "/srv/pets", "type": "Directory"}
    assert volume(pod, "checkpoint")["hostPath"] == {"path": "/srv/ckpt", "type": "DirectoryOrCreate"}
    assert env_of(pod)["CHECKPOINT_DIR"] == "/state"


def test_headless_service(job, spec):
    service = builders.service_body(job, {**spec, "masterPort": 30000})
    assert service["metadata"]["name"] == "pets-workers"
    assert service["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {names.LABEL_JOB_NAME: "pets"}
    assert service["spec"]["ports"][0]["port"] == 30000


def test_bodies_are_valid_kubernetes_objects(job):
    spec = with_defaults({"numNodes": 3, "data": {"hostPath": "/srv"}, "checkpoint": {},
                          "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": 1}},
                          "tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute",
                                           "tolerationSeconds": 5}]}, "img")
    for body in (builders.service_body(job, spec), builders.pod_body(job, spec, 2, 1),
                 builders.network_policy_body(job)):
        kubernetes_validate.validate(body, "1.30", strict=True)


def test_the_trainer_s_error_is_its_termination_message(job, spec):
    container = builders.pod_body(job, spec, 0, 0)["spec"]["containers"][0]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert env_of(builders.pod_body(job, spec, 0, 0))["TERMINATION_MESSAGE_PATH"] == container["terminationMessagePath"]


def test_downloaded_data_hub_weights_and_output_volumes(job, spec):
    """data.oxfordPets and Hub weights go to the cache volume (one per pod by default, a size limit); the Hub
    token comes from its Secret, never as a value; the model goes to the output volume."""
    spec = with_defaults({**spec, "pretrained": True, "data": {"oxfordPets": {}, "path": "images"},
                          "cache": {"sizeLimit": "20Gi"}, "output": {"persistentVolumeClaim": {"claimName": "models"}},
                          "hub": {"endpoint": "https://hub.example", "tokenSecret": {"name": "hf", "key": "token"}}},
                         "img")
    pod = builders.pod_body(job, spec, 0, 0)
    container = pod["spec"]["containers"][0]
    env = {item["name"]: item for item in container["env"]}
    archive = f"/var/cache/pets/datasets/md5-{contract.OXFORD_PETS_MD5[:16]}"
    assert env["DATA_URL"]["value"] == contract.OXFORD_PETS_URL
    assert env["DATA_CHECKSUM"]["value"] == f"md5:{contract.OXFORD_PETS_MD5}"
    assert env["DATA_ARCHIVE_DIR"]["value"] == archive and env["DATA_DIR"]["value"] == archive + "/images"
    assert env["HF_HOME"]["value"] == "/var/cache/pets/huggingface" and env["HF_ENDPOINT"]["value"] == "https://hub.example"
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    # The trainer image sets HF_HUB_OFFLINE=1; this pod fetches Hub weights.
    assert env["HF_HUB_OFFLINE"]["value"] == "0" and env["OUTPUT_DIR"]["value"] == "/output"
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert "data" not in volumes and "data" not in mounts  # the archive is on the cache volume
    assert volumes["cache"] == {"name": "cache", "emptyDir": {"sizeLimit": "20Gi"}}
    assert volumes["output"] == {"name": "output", "persistentVolumeClaim": {"claimName": "models"}}
    assert (mounts["cache"], mounts["output"]) == ("/var/cache/pets", "/output")
    kubernetes_validate.validate(pod, "1.30", strict=True)
    # Only pod 0 (the main process writes the model) mounts the output: a ReadWriteOnce claim does.
    assert "output" not in {volume["name"] for volume in builders.pod_body(job, spec, 1, 0)["spec"]["volumes"]}


def test_a_shared_cache_and_a_sha256_download(job, spec):
    spec = with_defaults({**spec, "data": {"download": {"url": "https://h/p.tgz", "sha256": "AB" * 32}},
                          "cache": {"persistentVolumeClaim": {"claimName": "shared"}, "path": "/cache"}}, "img")
    pod = builders.pod_body(job, spec, 1, 0)
    env = env_of(pod)
    assert env["DATA_CHECKSUM"] == "sha256:" + "ab" * 32
    assert env["DATA_DIR"] == env["DATA_ARCHIVE_DIR"] == "/cache/datasets/sha256-" + "ab" * 8
    assert {"name": "cache", "persistentVolumeClaim": {"claimName": "shared"}} in pod["spec"]["volumes"]
    assert "OUTPUT_DIR" not in env


def test_no_cache_volume_without_downloads(job, spec):
    pod = builders.pod_body(job, spec, 0, 0)
    assert "cache" not in {volume["name"] for volume in pod["spec"]["volumes"]}
    assert "HF_HOME" not in env_of(pod)


def test_tracking_environment_and_the_tensorboard_volume(job, spec):
    """spec.tracking: MLflow's variables (credentials from their Secret, never as values), TensorBoard's directory
    under the output or on a volume of its own that only pod 0 (the main process) mounts."""
    mlflow = {"trackingUri": "https://mlflow.example", "runName": "first",
              "usernameSecret": {"name": "mlflow", "key": "user"}, "passwordSecret": {"name": "mlflow", "key": "pw"}}
    under_output = with_defaults({**spec, "output": {}, "tracking": {"tensorboard": {}, "mlflow": mlflow}}, "img")
    pod = builders.pod_body(job, under_output, 0, 0)
    env = {item["name"]: item for item in pod["spec"]["containers"][0]["env"]}
    assert env["TENSORBOARD_LOG_DIR"]["value"] == "/output/tensorboard" and env["LOG_EVERY_STEPS"]["value"] == "10"
    assert (env["MLFLOW_TRACKING_URI"]["value"], env["MLFLOW_EXPERIMENT_NAME"]["value"],
            env["MLFLOW_RUN_NAME"]["value"]) == ("https://mlflow.example", "pets", "first")
    assert env["MLFLOW_TRACKING_USERNAME"] == {"name": "MLFLOW_TRACKING_USERNAME",
                                              "valueFrom": {"secretKeyRef": {"name": "mlflow", "key": "user"}}}
    assert env["MLFLOW_TRACKING_PASSWORD"] == {"name": "MLFLOW_TRACKING_PASSWORD",
                                              "valueFrom": {"secretKeyRef": {"name": "mlflow", "key": "pw"}}}
    assert "MLFLOW_TRACKING_TOKEN" not in env
    assert "tensorboard" not in {volume["name"] for volume in pod["spec"]["volumes"]}
    own = with_defaults({**spec, "tracking": {"logEverySteps": 3, "tensorboard": {
        "persistentVolumeClaim": {"claimName": "tb"}, "logDir": "/tensorboard"}}}, "img")
    pod = builders.pod_body(job, own, 0, 0)
    env = env_of(pod)
    assert env["TENSORBOARD_LOG_DIR"] == "/tensorboard" and env["LOG_EVERY_STEPS"] == "3"
    assert "MLFLOW_TRACKING_URI" not in env
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    assert volumes["tensorboard"] == {"name": "tensorboard", "persistentVolumeClaim": {"claimName": "tb"}}
    assert {"name": "tensorboard", "mountPath": "/tensorboard"} in pod["spec"]["containers"][0]["volumeMounts"]
    kubernetes_validate.validate(pod, "1.30", strict=True)
    assert "tensorboard" not in {volume["name"] for volume in builders.pod_body(job, own, 1, 0)["spec"]["volumes"]}
    off = with_defaults({**spec, "output": {}, "tracking": {"tensorboard": {"enabled": False},
                                                            "mlflow": {"trackingUri": "http://m"}}}, "img")
    assert "TENSORBOARD_LOG_DIR" not in env_of(builders.pod_body(job, off, 0, 0))
