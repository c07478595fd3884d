"""The plain install (`kubectl apply -f manifests/`) and the sample job."""
from __future__ import annotations

import yaml
from kopf._cogs.structs import references as kopf_references

from hack import chart
from pets_api import names
from tests.support.kube_schemas import crd_schemas, problems

INSTALL_FILES = ("crd.yaml", "kopf-peering-crds.yaml", "operator.yaml")
SAMPLE_JOB = chart.MANIFESTS_DIR / "job.yaml"


def load(name: str) -> list[dict]:
    return chart.documents((chart.MANIFESTS_DIR / name).read_text())


def all_crds() -> list[dict]:
    return [doc for name in INSTALL_FILES for doc in load(name) if doc["kind"] == "CustomResourceDefinition"]


def test_manifests_dir_holds_the_install_files_and_the_sample_job():
    assert sorted(path.name for path in chart.MANIFESTS_DIR.glob("*.y*ml")) == sorted((*INSTALL_FILES, "job.yaml"))


def test_operator_manifest_is_generated_from_the_chart(k8s_tools):
    rendered = chart.render_operator_manifest(k8s_tools.helm)
    current = chart.OPERATOR_MANIFEST.read_text()
    assert current == rendered, f"manifests/operator.yaml is out of date with the chart; run: {chart.REGENERATE_COMMAND}"


def test_every_install_object_is_valid_for_kubernetes():
    custom = crd_schemas(all_crds())
    objects = [doc for name in INSTALL_FILES for doc in load(name)]
    assert [p for obj in objects for p in problems(obj, custom)] == []


def test_operator_manifest_creates_its_namespace_before_anything_in_it():
    objects = load("operator.yaml")
    assert objects[0]["kind"] == "Namespace"
    namespace = objects[0]["metadata"]["name"]
    assert {obj["metadata"]["namespace"] for obj in objects if "namespace" in obj["metadata"]} == {namespace}


def test_peering_crds_are_the_ones_kopf_looks_for():
    served = {(crd["spec"]["group"], version["name"], crd["spec"]["names"]["plural"], crd["spec"]["scope"])
              for crd in load("kopf-peering-crds.yaml") for version in crd["spec"]["versions"] if version["served"]}
    cluster, namespaced = kopf_references.CLUSTER_PEERINGS_K, kopf_references.NAMESPACED_PEERINGS_K
    assert served == {
        (cluster.group, cluster.version, cluster.any_name, "Cluster"),
        (namespaced.group, namespaced.version, namespaced.any_name, "Namespaced"),
    }


def test_sample_job_is_a_valid_two_node_cpu_job():
    (job,) = chart.documents(SAMPLE_JOB.read_text())
    assert problems(job, crd_schemas(all_crds())) == []
    spec = job["spec"]
    assert spec["numNodes"] == 2
    assert "synthetic" in spec["data"], "the sample must run anywhere: generated images, no volume"
    assert "nvidia.com/gpu" not in yaml.safe_dump(spec.get("resources", {}))
    assert names.job_name_problems(job["metadata"]["name"], spec["numNodes"]) == []
    assert "namespace" not in job["metadata"], "kubectl apply -n <ns> must be able to place it"


def test_the_gpu_example_is_the_tutorial_s_recipe_and_valid():
    from pets_api.contract import RESERVED_ENV
    from pets_operator.spec import with_defaults
    from pets_operator.validation import spec_problems

    documents = chart.documents((chart.MANIFESTS_DIR / "examples" / "oxford-pets-gpu.yaml").read_text())
    claim, job = documents
    assert claim["kind"] == "PersistentVolumeClaim" and job["kind"] == "PetsTrainingJob"
    assert problems(job, crd_schemas(all_crds())) == [] and problems(claim, {}) == []
    spec = job["spec"]
    assert spec_problems(job["metadata"]["name"], with_defaults(spec, "img"), RESERVED_ENV) == []
    # The tutorial: resnet50d pretrained from the Hub, fp16, batch 64, 5 epochs, max LR 0.03, 2 nodes x 1 GPU.
    assert (spec["model"], spec["pretrained"], spec["mixedPrecision"], spec["batchSize"], spec["epochs"],
            spec["maxLearningRate"], spec["numNodes"], spec["processesPerNode"]) == (
        "resnet50d", True, "fp16", 64, 5, 0.03, 2, 1)
    assert "pretrainedWeights" not in spec and spec["data"] == {"oxfordPets": {}, "path": "images"}
    assert spec["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert spec["output"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]


def test_the_tracking_example_is_valid_and_tracks_to_both():
    from pets_api.contract import RESERVED_ENV
    from pets_operator.spec import with_defaults
    from pets_operator.validation import spec_problems

    claim, job = chart.documents((chart.MANIFESTS_DIR / "examples" / "tracking.yaml").read_text())
    assert claim["kind"] == "PersistentVolumeClaim" and job["kind"] == "PetsTrainingJob"
    assert problems(job, crd_schemas(all_crds())) == [] and problems(claim, {}) == []
    spec = job["spec"]
    assert spec_problems(job["metadata"]["name"], with_defaults(spec, "img"), RESERVED_ENV) == []
    assert set(spec["tracking"]) >= {"tensorboard", "mlflow"}
    assert spec["output"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
