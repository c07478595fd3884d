"""The kit's `local up` command (`pets-operator local up`, the product's wiring of it, is in test_product.py)."""
from __future__ import annotations

import sys

from kubernetes import client, config

from pets_localkube import cli

from .helpers import local_up


def test_a_missing_crd_file_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["up", "--workdir", str(tmp_path), "--crd", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"error: CRD manifest {tmp_path / 'nope.yaml'} does not exist"


def test_the_kits_local_up_applies_no_crd_of_its_own(tmp_path):
    kit = [sys.executable, "-c", "import sys; from pets_localkube import cli; sys.exit(cli.main())"]
    with local_up(kit, tmp_path / "work") as printed:
        assert "current-context: pets-local" in "".join(printed)
        with config.new_client_from_config(str(tmp_path / "work" / "kubeconfig")) as api:
            crds = client.ApiextensionsV1Api(api).list_custom_resource_definition().items
            assert crds == []
            assert client.CoreV1Api(api).read_node("local-node").status.capacity["pods"] == "110"
