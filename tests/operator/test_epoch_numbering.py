"""One numbering for the epochs a person reads: counted from 1, as the CRD's `status.currentEpoch` says,
while `status.epochs` keeps the trainer's 0-based index."""
from __future__ import annotations

import subprocess

from kubernetes import client, config

from pets_api import metric_lines
from pets_client import progress
from pets_operator.epochs import epoch_entries, epoch_status, merge_epochs

GROUP, VERSION, PLURAL = "training.pets.dev", "v1alpha1", "petstrainingjobs"


def test_the_trainer_s_epoch_0_is_epoch_1_in_kubectl_and_in_the_client_s_progress(kubectl, local_cluster):
    # The trainer's line for its first finished epoch, as the operator turns it into status fields.
    line = metric_lines.format_line(metric_lines.epoch_event(0, 0.8125, 0.5, 2.0))
    fields = epoch_status(merge_epochs([], epoch_entries([line])))
    assert [entry["epoch"] for entry in fields["epochs"]] == [0]
    assert fields["currentEpoch"] == 1

    job = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob", "metadata": {"name": "numbered"},
           "spec": {"numNodes": 2, "epochs": 4, "data": {"synthetic": {}}}}
    with config.new_client_from_config(str(local_cluster.kubeconfig)) as api:
        custom = client.CustomObjectsApi(api)
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job)
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "numbered",
                                                     {"status": {"phase": "Running", **fields}})
        resource = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "numbered")

    listed = subprocess.run([kubectl, "--kubeconfig", str(local_cluster.kubeconfig), "get", "ptj", "numbered"],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    header, row = (line.split() for line in listed.stdout.splitlines())
    assert dict(zip(header, row))["EPOCH"] == "1"

    shown = progress.progress("numbered", resource)
    assert progress.epoch_line(shown, shown.epochs[0]) == "numbered: epoch 1/4: accuracy 0.8125, train loss 0.5000, 2.0 s"
    assert progress.summary(shown).startswith("Running, 1/4 epochs")
    assert shown.done == resource["status"]["currentEpoch"] == 1
