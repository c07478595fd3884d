"""A small notebook API for PetsTrainingJobs, on the official `kubernetes` client.

    from pets_client.client import PetsTrainingJobClient

    client = PetsTrainingJobClient()                      # in-cluster, else KUBECONFIG / ~/.kube/config
    job = client.submit("pets", num_nodes=2, epochs=3, model="resnet50d",
                        data={"persistentVolumeClaim": {"claimName": "pets-images"}})
    job.wait(timeout=3600)                                # watches the job; a live bar in Jupyter, lines elsewhere
    job.epochs()                                          # [{"epoch": 0, "accuracy": 0.88, ...}, ...]
    job.plot()                                            # accuracy (and train loss) per epoch
    job.tracking                                          # spec.tracking's MLflow run (id, URL) and TensorBoard dir
    job.tracking_metrics(["accuracy"])                    # the MLflow run's metric history (mlflow client)
    job.logs(follow=True)                                 # pod 0's output as it comes (a failed job: the failed worker's)
    job.delete(wait=True)                                 # and its pods, Service, ConfigMap

Spec fields are the CRD's (`kubectl explain ptj.spec`); top-level keywords may be given in
snake_case (`num_nodes`) or camelCase (`numNodes`), not both. Nested values are passed as they are.
To ship a notebook's own training function instead of the built-in recipe, see
`pets_client.launcher.cluster_launcher`.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from pets_api import API_VERSION, GROUP, KIND, PLURAL, VERSION
from pets_api.names import LABEL_ATTEMPT, LABEL_JOB_NAME, LABEL_REPLICA_INDEX, pod_name
from pets_api.phases import FAILED, FINAL_PHASES

from . import progress as progress_display

FINISHED = FINAL_PHASES
WATCH_SECONDS = 300  # one watch request at most this long; the next resumes where it ended
WATCH_GRACE = 30  # beyond the server's own end of a watch before the client gives up on the connection
WATCH_RETRY_SECONDS = 1.0  # after a dropped watch connection
CONNECT_SECONDS = 10
IN_CLUSTER_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class PetsClientError(RuntimeError):
    """A request was refused; the message is the API server's, `status` its HTTP status."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class JobFailed(PetsClientError):
    """`wait(raise_on_failure=True)` saw the job end in phase Failed.

    `message` is the job's status.message (why it failed: the worker's error line when it wrote
    one), `reason` its Failed condition's reason, `job_status` the whole status."""

    def __init__(self, job: str, job_status: dict[str, Any]):
        self.job_status = dict(job_status)
        self.message = job_status.get("message") or "no message"
        self.reason = next((c.get("reason") for c in job_status.get("conditions") or []
                            if c.get("type") == FAILED and c.get("status") == "True"), None)
        super().__init__(f"{job} failed: {self.message}")


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def spec_fields(spec: dict[str, Any]) -> dict[str, Any]:
    """Top-level keywords in camelCase; one field given in both spellings (num_nodes and numNodes) is an error."""
    fields: dict[str, Any] = {}
    given: dict[str, str] = {}
    for key, value in spec.items():
        field = camel_case(key)
        if field in fields:
            raise ValueError(f"{given[field]} and {key} both set spec.{field}: give it once")
        fields[field], given[field] = value, key
    return fields


def job_manifest(name: str, spec: dict[str, Any], namespace: str | None = None,
                 labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec_fields(spec)}


def _api_error(error: Exception) -> PetsClientError:
    """The API server's own message (from its Status body) instead of the client's HTTP dump."""
    body = getattr(error, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (TypeError, ValueError):
        message = None
    status = getattr(error, "status", None)
    return PetsClientError(f"{message or getattr(error, 'reason', None) or error} (HTTP {status})", status)


def _load_api_client() -> Any:
    """The operator's own loader (`pets_api.connection.load_api_client`: in-cluster, else the kubeconfig)."""
    from kubernetes import config

    from pets_api.connection import load_api_client

    try:
        return load_api_client()
    except config.ConfigException as error:
        raise PetsClientError(f"no cluster to talk to: {error}; set KUBECONFIG, "
                              "or run inside a pod with a service account") from None


def _in_cluster() -> bool:
    """Whether `_load_api_client` connects through the pod's service account (what it tries first)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and IN_CLUSTER_NAMESPACE_FILE.is_file()


def _default_namespace() -> str:
    """The namespace of the connection `_load_api_client` makes: the pod's, else the kubeconfig context's."""
    from kubernetes import config

    from pets_api.connection import kubeconfig_path

    if _in_cluster():
        return IN_CLUSTER_NAMESPACE_FILE.read_text().strip() or "default"
    try:
        _, current = config.list_kube_config_contexts(config_file=kubeconfig_path())
        namespace = (current or {}).get("context", {}).get("namespace")
        if namespace:
            return namespace
    except (config.ConfigException, OSError):
        if IN_CLUSTER_NAMESPACE_FILE.is_file():
            return IN_CLUSTER_NAMESPACE_FILE.read_text().strip()
    return "default"


class PetsTrainingJob:
    """One submitted job: its status, its epochs as they finish, its pods' logs."""

    def __init__(self, client: PetsTrainingJobClient, name: str, namespace: str):
        self.client, self.name, self.namespace = client, name, namespace

    def __repr__(self) -> str:
        return f"PetsTrainingJob({self.namespace}/{self.name})"

    def get(self) -> dict[str, Any]:
        """The whole resource as the API server has it now."""
        return self.client.get_raw(self.name, self.namespace)

    def status(self) -> dict[str, Any]:
        return self.get().get("status") or {}

    @property
    def phase(self) -> str | None:
        return self.status().get("phase")

    def epochs(self) -> list[dict[str, Any]]:
        """One entry per finished epoch: {epoch, accuracy, trainLoss?, seconds?}."""
        return list(self.status().get("epochs") or [])

    @property
    def tracking(self) -> dict[str, Any]:
        """Where the job's experiment tracking goes (spec.tracking), as status.tracking says once pod 0's trackers
        started: `mlflow` {runId, experimentId, runName, trackingUri, url}, `tensorboard` {logDir, and
        persistentVolumeClaim or hostPath}; {} before that."""
        return dict(self.status().get("tracking") or {})

    def tracking_metrics(self, keys: Iterable[str] | None = None,
                         tracking_uri: str | None = None) -> dict[str, list[dict[str, Any]]]:
        """The job's MLflow run's metric history, read through the mlflow client (`pip install mlflow-skinny`):
        key -> [{step, value, timestamp}] in step order; `keys` default to every metric of the run (`accuracy`
        per epoch, `train_loss` and `learning_rate` per logged step, `images_per_second`, ...).

        `tracking_uri` replaces the server address in status.tracking (the pods' may not resolve from here);
        credentials come from this process's MLFLOW_TRACKING_USERNAME/PASSWORD or MLFLOW_TRACKING_TOKEN."""
        run = self.tracking.get("mlflow") or {}
        if not run.get("runId"):
            raise PetsClientError(f"{self.namespace}/{self.name} has no MLflow run in status.tracking (yet): "
                                  "spec.tracking.mlflow sets one up, and pod 0 reports it once its tracker started")
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise ImportError("tracking_metrics reads the run through the mlflow client: pip install mlflow-skinny") \
                from None
        client = MlflowClient(tracking_uri=tracking_uri or run.get("trackingUri"))
        if keys is None:
            keys = sorted(client.get_run(run["runId"]).data.metrics)
        return {key: [{"step": m.step, "value": m.value, "timestamp": m.timestamp}
                      for m in sorted(client.get_metric_history(run["runId"], key), key=lambda m: (m.step, m.timestamp))]
                for key in keys}

    def wait(self, timeout: float | None = 3600, phases: Iterable[str] = FINISHED,
             on_epoch: Callable[[dict[str, Any]], Any] | None = None,
             raise_on_failure: bool = False, display: bool = True,
             total_epochs: int | None = None) -> dict[str, Any]:
        """Block until the phase is one of `phases`; return the status then.

        It watches the job (`PetsTrainingJobClient.watch_raw`): each change of its status arrives as
        the operator writes it, no polling. `display` shows the progress live: in Jupyter a bar over
        the epochs (phase, latest and best accuracy) that updates in place, elsewhere one line per
        phase change and per epoch. `on_epoch` is called once for each epoch entry as it appears.
        Raises TimeoutError after `timeout` seconds (None: no limit), JobFailed (with the job's
        status.message) for phase Failed when `raise_on_failure` is set, and PetsClientError (404)
        when the job is deleted meanwhile.

        `total_epochs`: the epochs the display counts to for a shipped function (`cluster_launcher`), whose
        loop only the notebook knows; the built-in recipe's is spec.epochs."""
        wanted = set(phases)
        if not wanted:
            raise ValueError("phases must name at least one phase")
        shown = progress_display.live_display(self.name) if display else None
        reported = 0
        phase = None
        current = progress_display.Progress(self.name)
        try:
            for resource in self.client.watch_raw(self.name, self.namespace, timeout=timeout):
                status = resource.get("status") or {}
                current = progress_display.progress(self.name, resource, total_epochs)
                if shown is not None:
                    shown.update(current)
                epochs = status.get("epochs") or []
                if on_epoch is not None:
                    for entry in epochs[reported:]:
                        on_epoch(entry)
                reported = max(reported, len(epochs))
                phase = status.get("phase")
                if phase in wanted:
                    if raise_on_failure and phase == FAILED:
                        raise JobFailed(f"{self.namespace}/{self.name}", status)
                    return status
            raise TimeoutError(f"{self.namespace}/{self.name} is {phase or 'not started'} after {timeout:g}s; "
                               f"waited for {', '.join(sorted(wanted))}")
        finally:
            if shown is not None:
                shown.close(current)

    def logs(self, index: int | None = None, tail_lines: int | None = None, follow: bool = False,
             file: TextIO | None = None, timeout: float = 600) -> str | None:
        """The log of pod `<job>-<index>` (pod 0 carries the metric lines). No `index`: the failed worker's
        of a failed job (the pods of a failed attempt stay until the job is deleted), else pod 0's.

        `follow=True` prints the log as it comes (to `file`, else stdout) until the container ends,
        waiting up to `timeout` seconds for the pod to start, and returns None."""
        index = self.failed_worker() if index is None else index
        pod = pod_name(self.name, index)
        if not follow:
            return self.client.pod_log(pod, self.namespace, tail_lines=tail_lines)
        for line in self.stream_logs(index, tail_lines, timeout):
            print(line, file=file or sys.stdout, flush=True)
        return None

    def failed_worker(self) -> int:
        """The index of the worker whose failure failed the job (the one its status names, else the first failed
        pod of its last attempt); 0 for a job that has not failed."""
        status = self.status()
        if status.get("phase") != FAILED:
            return 0
        selector = f"{LABEL_JOB_NAME}={self.name},{LABEL_ATTEMPT}={status.get('attempt') or 0}"
        pods = self.client._call(self.client.core.list_namespaced_pod, self.namespace, label_selector=selector).items
        failed = sorted((p for p in pods if p.status.phase == FAILED),
                        key=lambda p: int(p.metadata.labels.get(LABEL_REPLICA_INDEX, 0)))
        named = [p for p in failed if f"worker {p.metadata.name} failed" in (status.get("message") or "")]
        chosen = (named or failed)[:1]
        return int(chosen[0].metadata.labels.get(LABEL_REPLICA_INDEX, 0)) if chosen else 0

    def stream_logs(self, index: int = 0, tail_lines: int | None = None, timeout: float = 600) -> Iterator[str]:
        """The lines of pod `<job>-<index>`'s log as they are written, until its container ends."""
        from pets_api.metric_lines import split_lines

        pod = pod_name(self.name, index)
        deadline = time.monotonic() + timeout
        while True:
            try:
                response = self.client.open_pod_log(pod, self.namespace, tail_lines=tail_lines)
                break
            except PetsClientError as error:
                # 404: the pod is not made yet; 400: its container has not started.
                if error.status not in (400, 404) or time.monotonic() >= deadline:
                    raise
                time.sleep(1.0)
        try:
            yield from split_lines(iter(lambda: response.read1(65536), b""))
        finally:
            response.release_conn()

    def plot(self, ax: Any = None) -> Any:
        """Accuracy per epoch (and the train loss, where reported, on a second axis) with matplotlib; the Axes."""
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        resource = self.get()
        shown = progress_display.progress(self.name, resource)
        if ax is None:
            _, ax = plt.subplots(figsize=(6.4, 3.6))
        epochs = [progress_display.epoch_number(entry) for entry in shown.epochs]
        ax.plot(epochs, [100 * entry["accuracy"] for entry in shown.epochs], marker="o", color="tab:blue",
                label="eval accuracy")
        ax.set_xlabel("epoch")
        ax.set_ylabel("eval accuracy (%)", color="tab:blue")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{self.name}: {progress_display.summary(shown)}", fontsize="medium")
        ax.grid(alpha=0.3)
        losses = [(progress_display.epoch_number(entry), entry["trainLoss"])
                  for entry in shown.epochs if entry.get("trainLoss") is not None]
        if losses:
            loss_ax = ax.twinx()
            loss_ax.plot(*zip(*losses), marker="s", linestyle="--", color="tab:orange", label="train loss")
            loss_ax.set_ylabel("train loss", color="tab:orange")
        return ax

    def delete(self, missing_ok: bool = True, wait: bool = False, timeout: float = 300) -> None:
        """Delete the job; its Service, pods and function ConfigMap go with it (they are owned by it).

        `wait=True` blocks until the job and everything it owns are gone (foreground deletion)."""
        self.client.delete(self.name, self.namespace, missing_ok=missing_ok, wait=wait, timeout=timeout)


class PetsTrainingJobClient:
    """Submit, find and delete PetsTrainingJobs.

    With no arguments it connects as the operator does: inside a pod through its service account
    (and the pod's namespace), elsewhere like kubectl (KUBECONFIG or ~/.kube/config, and the
    current context's namespace). `custom_api` / `core_api` take ready
    `CustomObjectsApi` / `CoreV1Api` objects instead (e.g. built on your own ApiClient)."""

    def __init__(self, namespace: str | None = None, api_client: Any = None,
                 custom_api: Any = None, core_api: Any = None):
        if custom_api is None or core_api is None:
            from kubernetes import client

            api_client = api_client or _load_api_client()
            custom_api = custom_api or client.CustomObjectsApi(api_client)
            core_api = core_api or client.CoreV1Api(api_client)
        self.custom, self.core = custom_api, core_api
        self.namespace = namespace or _default_namespace()

    def job(self, name: str, namespace: str | None = None) -> PetsTrainingJob:
        """A handle on an existing job (no request is made)."""
        return PetsTrainingJob(self, name, namespace or self.namespace)

    def submit(self, name: str, namespace: str | None = None, labels: dict[str, str] | None = None,
               replace: bool = False, **spec: Any) -> PetsTrainingJob:
        """Create a job; the API server validates `spec` against the CRD and fills in defaults.

        A job of that name already there is an error, unless `replace=True`: then it is deleted (its
        pods with it), and the new one submitted once it is gone."""
        namespace = namespace or self.namespace
        body = job_manifest(name, spec, namespace, labels)
        create = self.custom.create_namespaced_custom_object
        try:
            self._call(create, GROUP, VERSION, namespace, PLURAL, body, field_validation="Strict")
        except PetsClientError as error:
            if error.status != 409:
                raise
            if not replace:
                raise PetsClientError(
                    f"{namespace}/{name} already exists: submit(..., replace=True) deletes it (its pods go with it), "
                    f"waits until it is gone and submits this one; or choose another name (HTTP 409)", 409) from None
            self.delete(name, namespace, wait=True)
            self._call(create, GROUP, VERSION, namespace, PLURAL, body, field_validation="Strict")
        return self.job(name, namespace)

    def get_raw(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self._call(self.custom.get_namespaced_custom_object, GROUP, VERSION,
                          namespace or self.namespace, PLURAL, name)

    def watch_raw(self, name: str, namespace: str | None = None, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """The job as the API server has it now, then again at each change, until `timeout` seconds have
        passed (None: for ever); the caller stops early by leaving the loop.

        One WATCH of the job (field selector `metadata.name`) from the resourceVersion of a first GET,
        renewed from the last version seen when the server ends it (every WATCH_SECONDS); a version the
        server no longer has (410 Gone) starts again from a fresh GET. PetsClientError (404) when the
        job is not there or is deleted."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import MaxRetryError, ProtocolError, ReadTimeoutError

        namespace = namespace or self.namespace
        deadline = None if timeout is None else time.monotonic() + timeout
        version: str | None = None
        while True:
            if version is None:
                job = self.get_raw(name, namespace)
                version = job["metadata"]["resourceVersion"]
                yield job
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            seconds = WATCH_SECONDS if remaining is None else min(WATCH_SECONDS, remaining)
            # The server ends the watch after timeoutSeconds (whole seconds); the read timeout ends a
            # silent one at the deadline itself.
            read_timeout = seconds if remaining is not None and remaining < WATCH_SECONDS else seconds + WATCH_GRACE
            events = watch.Watch().stream(
                self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                field_selector=f"metadata.name={name}", resource_version=version,
                timeout_seconds=max(1, math.ceil(seconds)), _request_timeout=(CONNECT_SECONDS, read_timeout))
            try:
                for event in events:
                    job = event["raw_object"]
                    if event["type"] == "DELETED":
                        raise PetsClientError(f"{namespace}/{name} was deleted", 404)
                    version = job["metadata"].get("resourceVersion") or version
                    if event["type"] != "BOOKMARK":
                        yield job
                    if deadline is not None and time.monotonic() >= deadline:
                        return
            except ApiException as error:
                if error.status != 410:  # 410 Gone: the version is too old to watch from
                    raise _api_error(error) from None
                version = None
            except (ReadTimeoutError, MaxRetryError) as error:
                if isinstance(error, MaxRetryError) and not isinstance(error.reason, ReadTimeoutError):
                    raise
                # silent until the deadline (or the server missed its timeoutSeconds): checked above
            except ProtocolError:
                time.sleep(WATCH_RETRY_SECONDS)  # the connection dropped: resume from the last version
            finally:
                events.close()

    def jobs(self, namespace: str | None = None, label_selector: str | None = None) -> list[PetsTrainingJob]:
        namespace = namespace or self.namespace
        kwargs = {"label_selector": label_selector} if label_selector else {}
        listing = self._call(self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, **kwargs)
        return [self.job(item["metadata"]["name"], namespace) for item in listing.get("items", [])]

    def delete(self, name: str, namespace: str | None = None, missing_ok: bool = True, wait: bool = False,
               timeout: float = 300, poll: float = 0.5) -> None:
        """Delete a job. `wait=True`: foreground deletion, and block until the job is gone, which is
        after everything it owns (pods, Service, function ConfigMap) is gone; TimeoutError after `timeout`."""
        namespace = namespace or self.namespace
        try:
            self._call(self.custom.delete_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name,
                       propagation_policy="Foreground" if wait else "Background")
        except PetsClientError as error:
            if not (missing_ok and error.status == 404):
                raise
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.get_raw(name, namespace)
            except PetsClientError as error:
                if error.status == 404:
                    return
                raise
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{namespace}/{name} is still there {timeout:g}s after it was deleted")
            time.sleep(poll)

    def pod_log(self, pod: str, namespace: str | None = None, tail_lines: int | None = None) -> str:
        kwargs = {"tail_lines": tail_lines} if tail_lines is not None else {}
        return self._call(self.core.read_namespaced_pod_log, pod, namespace or self.namespace, **kwargs)

    def open_pod_log(self, pod: str, namespace: str | None = None, tail_lines: int | None = None) -> Any:
        """A streaming response (urllib3) of the log, followed until the container ends."""
        kwargs = {"tail_lines": tail_lines} if tail_lines is not None else {}
        return self._call(self.core.read_namespaced_pod_log, pod, namespace or self.namespace, follow=True,
                          _preload_content=False, **kwargs)

    def create_config_map(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(self.core.create_namespaced_config_map, body["metadata"]["namespace"], body)

    def read_config_map(self, name: str, namespace: str | None = None) -> Any:
        return self._call(self.core.read_namespaced_config_map, name, namespace or self.namespace)

    def delete_config_map(self, name: str, namespace: str | None = None) -> None:
        self._call(self.core.delete_namespaced_config_map, name, namespace or self.namespace)

    @staticmethod
    def _call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return method(*args, **kwargs)
        except ApiException as error:
            raise _api_error(error) from None


def submit(name: str, namespace: str | None = None, **spec: Any) -> PetsTrainingJob:
    """Shortcut: `PetsTrainingJobClient().submit(...)` on the default connection."""
    return PetsTrainingJobClient(namespace=namespace).submit(name, **spec)
