"""What can be checked of the images without a container engine: the Dockerfiles themselves."""
from __future__ import annotations

import json
import re
from pathlib import Path


from tests.support import chart

OPERATOR_DOCKERFILE = chart.REPO_ROOT / "Dockerfile"
TRAINER_DOCKERFILE = chart.REPO_ROOT / "trainer_image" / "Dockerfile"


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def base_images(steps: list[tuple[str, str]]) -> list[str]:
    """The external images the stages start from, global ARG defaults substituted."""
    first_from = next(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    args = dict(rest.partition("=")[::2] for keyword, rest in steps[:first_from] if keyword == "ARG")
    images, stages = [], set()
    for keyword, rest in steps[first_from:]:
        if keyword == "FROM":
            words = rest.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), words[0])
            if image not in stages:
                images.append(image)
            if len(words) == 3 and words[1].upper() == "AS":
                stages.add(words[2])
    return images


def final_stage(steps: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]


def assert_pinned_bases_and_non_root(path: Path) -> list[tuple[str, str]]:
    steps = instructions(path)
    for image in base_images(steps):
        name, _, tag = image.partition(":")
        assert tag and tag != "latest" and re.match(r"\d+\.\d+", tag) or "@sha256:" in image, \
            f"{path.name}: base image {image!r} is not pinned to a version"
    users = [rest for keyword, rest in final_stage(steps) if keyword == "USER"]
    assert users, f"{path.name}: the final stage never switches away from root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"{path.name}: USER {users[-1]!r} must be a numeric non-root uid"
    return steps


def test_operator_image_is_slim_pinned_non_root_and_without_torch():
    steps = assert_pinned_bases_and_non_root(OPERATOR_DOCKERFILE)
    assert all("slim" in image for image in base_images(steps))
    installs = " ".join(rest for keyword, rest in steps if keyword == "RUN" and "pip install" in rest)
    assert "'.[operator]'" in installs
    assert not re.search(r"trainer\]|torch|\[test|\[local", installs)
    (cmd,) = [rest for keyword, rest in final_stage(steps) if keyword == "CMD"]
    assert json.loads(cmd) == ["pets-operator", "run"]


def test_operator_image_user_is_the_uid_the_chart_runs_as(k8s_tools):
    steps = instructions(OPERATOR_DOCKERFILE)
    user = [rest for keyword, rest in final_stage(steps) if keyword == "USER"][-1]
    (deployment,) = [obj for obj in chart.documents(chart.template(k8s_tools.helm)) if obj["kind"] == "Deployment"]
    pod_security = deployment["spec"]["template"]["spec"]["securityContext"]
    assert user == f"{pod_security['runAsUser']}:{pod_security['runAsGroup']}"


def test_trainer_image_is_pinned_and_non_root():
    steps = assert_pinned_bases_and_non_root(TRAINER_DOCKERFILE)
    (cmd,) = [rest for keyword, rest in final_stage(steps) if keyword == "CMD"]
    assert json.loads(cmd) == ["pets-train"]


def test_trainer_image_user_is_the_uid_the_operator_runs_pods_as():
    from pets_operator import builders

    user = [rest for keyword, rest in final_stage(instructions(TRAINER_DOCKERFILE)) if keyword == "USER"][-1]
    assert user == f"{builders.RUN_AS_USER}:{builders.RUN_AS_USER}"
