"""kopf, as the operator runs it, against the local API server: discovery, list+watch, patches, events."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from kubernetes import client

from .helpers import GROUP, PLURAL, VERSION, api_client, job, wait_for

OPERATOR = textwrap.dedent('''
    import kopf

    @kopf.on.startup()
    def configure(settings, **_):
        settings.watching.server_timeout = 2  # short watches: every reconnect resumes from a resourceVersion
        settings.posting.level = 20

    @kopf.on.create("training.pets.dev", "v1alpha1", "petstrainingjobs")
    def created(spec, patch, body, **_):
        patch.status["phase"] = "Running"
        patch.status["message"] = f"nodes={spec['numNodes']}"
        kopf.info(body, reason="Seen", message="hello from kopf")

    @kopf.on.field("training.pets.dev", "v1alpha1", "petstrainingjobs", field="spec.ttlSecondsAfterFinished")
    def ttl_changed(new, patch, **_):
        patch.status["currentEpoch"] = new

    @kopf.on.delete("training.pets.dev", "v1alpha1", "petstrainingjobs")
    def deleted(**_):
        pass
''')


def test_kopf_handles_create_update_and_delete(local_cluster, tmp_path):
    script = tmp_path / "operator.py"
    script.write_text(OPERATOR)
    log = (tmp_path / "kopf.log").open("w")
    env = {**os.environ, "KUBECONFIG": str(local_cluster.kubeconfig)}
    kopf = subprocess.Popen([sys.executable, "-m", "kopf", "run", "--standalone", "--all-namespaces", str(script)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with api_client(local_cluster) as api:
            custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)

            def read():
                return custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "k")

            custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("k", numNodes=3))
            wait_for(lambda: read().get("status", {}).get("phase") == "Running", timeout=60, what="kopf's create handler")
            assert read()["status"]["message"] == "nodes=3"
            assert "kopf.zalando.org/KopfFinalizerMarker" in read()["metadata"]["finalizers"]
            events = wait_for(lambda: [e for e in core.list_namespaced_event("default").items if e.reason == "Seen"], what="kopf's event")
            assert events[0].message == "hello from kopf" and events[0].involved_object.name == "k"

            time.sleep(2.5)  # past the server-side watch timeout: the change arrives on a resumed watch
            custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "k", {"spec": {"ttlSecondsAfterFinished": 7}})
            wait_for(lambda: read().get("status", {}).get("currentEpoch") == 7, timeout=30, what="kopf's field handler")

            custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "k")
            wait_for(lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"],
                     timeout=30, what="kopf to release its finalizer")
    finally:
        os.killpg(kopf.pid, signal.SIGINT)
        try:
            kopf.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(kopf.pid, signal.SIGKILL)
            kopf.wait()
        log.close()
    output = (tmp_path / "kopf.log").read_text()
    assert "Traceback" not in output, output
