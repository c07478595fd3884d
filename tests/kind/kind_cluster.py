"""A kind cluster driven through the real CLIs (kind, docker, kubectl, helm) for the kind tests."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pets_operator.status import FINAL_PHASES

REPO_ROOT = Path(__file__).resolve().parents[2]
OPERATOR_IMAGE = "pets-operator:0.1.0"
TRAINER_IMAGE = "pets-trainer:0.1.0"
FINISHED = FINAL_PHASES


class CommandFailed(AssertionError):
    pass


def run(*argv: str | Path, check: bool = True, timeout: float = 600, **kwargs: Any) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise CommandFailed(f"{' '.join(map(str, argv))} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def missing_prerequisite() -> str | None:
    """Why the kind tests cannot run here, or None when they can."""
    if shutil.which("kind") is None:
        return "kind not found on PATH"
    provider = os.environ.get("KIND_EXPERIMENTAL_PROVIDER", "docker")
    if shutil.which(provider) is None:
        return f"container engine {provider!r} not found on PATH"
    if run(provider, "info", check=False, timeout=60).returncode != 0:
        return f"container engine {provider!r} is not running ({provider} info failed)"
    return None


@dataclass
class KindCluster:
    """One kind cluster; created (and later deleted) unless PETS_KIND_CLUSTER names one to reuse."""

    workdir: Path
    kubectl_path: Path
    helm_path: Path
    name: str = field(default_factory=lambda: os.environ.get("PETS_KIND_CLUSTER") or f"pets-e2e-{uuid.uuid4().hex[:6]}")
    owned: bool = field(default_factory=lambda: not os.environ.get("PETS_KIND_CLUSTER"))

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def engine(self) -> str:
        return os.environ.get("KIND_EXPERIMENTAL_PROVIDER", "docker")

    def create(self) -> None:
        existing = run("kind", "get", "clusters").stdout.split()
        if self.name not in existing:
            run("kind", "create", "cluster", "--name", self.name, "--wait", "180s", timeout=600)
        self.kubeconfig.write_text(run("kind", "get", "kubeconfig", "--name", self.name).stdout)

    def delete(self) -> None:
        if self.owned:
            run("kind", "delete", "cluster", "--name", self.name, check=False, timeout=300)

    def build_and_load_images(self) -> None:
        if not os.environ.get("PETS_KIND_SKIP_BUILD"):  # `make kind-load` built them already
            run(self.engine, "build", "-t", OPERATOR_IMAGE, ".", cwd=REPO_ROOT, timeout=1800)
            run(self.engine, "build", "-f", "trainer_image/Dockerfile", "-t", TRAINER_IMAGE, ".", cwd=REPO_ROOT,
                timeout=3600)
        if self.engine == "docker":
            run("kind", "load", "docker-image", "--name", self.name, OPERATOR_IMAGE, TRAINER_IMAGE, timeout=1200)
            return
        # `kind load docker-image` talks to docker only; other engines go through an archive.
        archive = self.workdir / "images.tar"
        run(self.engine, "save", "-o", archive, OPERATOR_IMAGE, TRAINER_IMAGE, timeout=1200)
        run("kind", "load", "image-archive", "--name", self.name, archive, timeout=1200)

    def kubectl(self, *args: str | Path, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        return run(self.kubectl_path, "--kubeconfig", self.kubeconfig, *args, check=check, timeout=timeout)

    def helm(self, *args: str | Path, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
        return run(self.helm_path, "--kubeconfig", self.kubeconfig, *args, check=check, timeout=timeout)

    def get_json(self, *args: str) -> dict[str, Any]:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def wait_for_job(self, name: str, namespace: str, timeout: float) -> dict[str, Any]:
        """The job once its phase is Succeeded or Failed; fails with its pods' story on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get_json("petstrainingjob", name, "-n", namespace)
            if (job.get("status") or {}).get("phase") in FINISHED:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"{namespace}/{name} not finished after {timeout:g}s: "
                                     f"{json.dumps(job.get('status'), indent=1)}\n{self.diagnostics(name, namespace)}")
            time.sleep(5)

    def diagnostics(self, job: str, namespace: str) -> str:
        parts = [self.kubectl("get", "pods,svc,events", "-n", namespace, "-o", "wide", check=False).stdout,
                 self.kubectl("logs", "-n", "pets-operator", "-l", "app.kubernetes.io/name=pets-operator",
                              "--tail", "100", check=False).stdout]
        for pod in self.kubectl("get", "pods", "-n", namespace, "-l", f"training.pets.dev/job-name={job}",
                                "-o", "name", check=False).stdout.split():
            parts.append(f"--- {pod}\n" + self.kubectl("logs", "-n", namespace, pod, "--tail", "60", check=False).stdout)
        return "\n".join(parts)
