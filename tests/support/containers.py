"""Whether the container tests can run here: a docker daemon that answers and the project's images.

`.ci/containers` installs the engine and builds the images where it can; elsewhere the container
tests skip with the reason this module gives.
"""
from __future__ import annotations

import shutil
import subprocess

OPERATOR_IMAGE = "pets-operator:0.1.0"
TRAINER_IMAGE = "pets-trainer:0.1.0"
BUILD_HINT = "build them with hack/build_images.sh (or .ci/containers as root)"


def _docker(*args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)


def unavailable(images: tuple[str, ...] = (OPERATOR_IMAGE, TRAINER_IMAGE)) -> str | None:
    """None when docker runs and every image in `images` exists; else why the container tests skip."""
    if shutil.which("docker") is None:
        return "no docker client on PATH"
    try:
        info = _docker("info", "--format", "{{.ServerVersion}}")
    except subprocess.TimeoutExpired:
        return "docker info did not answer in 20 s"
    if info.returncode != 0:
        return f"no docker daemon: {(info.stderr or info.stdout).strip().splitlines()[-1:] or ['docker info failed']}"
    missing = [image for image in images if _docker("image", "inspect", image).returncode != 0]
    if missing:
        return f"image(s) {', '.join(missing)} not built; {BUILD_HINT}"
    return None


def run_in(image: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`docker run --rm image command...`, output captured."""
    return _docker("run", "--rm", "--network", "none", image, *command, timeout=timeout)
