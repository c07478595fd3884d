"""What can be checked of the images without a container engine: the Dockerfiles themselves."""
from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hack import chart

OPERATOR_DOCKERFILE = chart.REPO_ROOT / "Dockerfile"
TRAINER_DOCKERFILE = chart.REPO_ROOT / "trainer_image" / "Dockerfile"
PACKAGE_MANIFESTS = chart.REPO_ROOT / "operator" / "pets_api" / "manifests"


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


def copied_sources(steps: list[tuple[str, str]]) -> list[str]:
    """The build-context paths the COPY steps take (not what they copy from another stage)."""
    sources = []
    for keyword, rest in steps:
        words = rest.split()
        if keyword == "COPY" and not any(word.startswith("--from=") for word in words):
            sources += [word for word in words if not word.startswith("--")][:-1]
    return sources


def package_link_targets() -> set[str]:
    """What operator/pets_api/manifests/ links to: the build context must hold these files
    for the wheel to carry them (a COPY of the package copies the links, not their targets)."""
    links = [path for path in PACKAGE_MANIFESTS.iterdir() if path.is_symlink()]
    return {path.resolve().relative_to(chart.REPO_ROOT).as_posix() for path in links}


def assert_ships_the_api_package_not_the_local_cluster(path: Path) -> list[str]:
    sources = copied_sources(instructions(path))
    assert "operator/pets_api/" in sources, f"{path.name}: does not copy the pets_api package"
    wholesale = [s for s in sources if s.rstrip("/") in (".", "operator") or "pets_localkube" in s or "pets_client" in s]
    assert not wholesale, f"{path.name}: copies the local cluster or the SDK with {wholesale}"
    missing = package_link_targets() - set(sources)
    assert not missing, f"{path.name}: pets_api/manifests/ links to {sorted(missing)}, which it does not copy"
    return sources


def test_the_package_manifests_are_links_to_the_repository_manifests():
    assert package_link_targets() == {"manifests/crd.yaml", "manifests/job.yaml"}


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
    assert "-r requirements/operator.lock" in installs
    assert not re.search(r"trainer|torch|\[test|\[local", installs)
    (cmd,) = [rest for keyword, rest in final_stage(steps) if keyword == "CMD"]
    assert json.loads(cmd) == ["pets-operator", "run"]


def test_operator_image_ships_only_the_operator_package():
    sources = assert_ships_the_api_package_not_the_local_cluster(OPERATOR_DOCKERFILE)
    assert sorted(sources) == sorted(["requirements/operator.lock", "requirements/build.lock", "pyproject.toml",
                                      "README.m[d]", "operator/pets_api/", "operator/pets_operator/",
                                      *package_link_targets()])


def test_the_operator_package_runs_without_the_local_cluster():
    """As in the operator image: every pets_operator module imports with pets_localkube absent,
    and `pets-operator demo` says in one line that it needs it."""
    script = textwrap.dedent("""
        import importlib, pkgutil, sys

        class NotInstalled:  # pets_localkube, as an import finds it in the operator image
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] == "pets_localkube":
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        sys.meta_path.insert(0, NotInstalled())
        import pets_operator
        for module in pkgutil.iter_modules(pets_operator.__path__):
            if not module.name.startswith("_"):
                importlib.import_module(f"pets_operator.{module.name}")
        from pets_operator.cli import main
        sys.exit(main(["demo"]))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: `pets-operator demo` needs the local cluster package pets_localkube")


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


def test_trainer_image_ships_the_api_package_but_not_the_controller():
    sources = assert_ships_the_api_package_not_the_local_cluster(TRAINER_DOCKERFILE)
    assert "trainer_image/" in sources or "trainer_image/pets_trainer/" in sources
    assert not [s for s in sources if "pets_operator" in s], f"the trainer image copies the controller: {sources}"


def test_trainer_image_user_is_the_uid_the_operator_runs_pods_as():
    from pets_operator import builders

    user = [rest for keyword, rest in final_stage(instructions(TRAINER_DOCKERFILE)) if keyword == "USER"][-1]
    assert user == f"{builders.RUN_AS_USER}:{builders.RUN_AS_USER}"


# --- supply chain: every package from a lock with hashes (docs/supply-chain.md) ----------------

def shell_commands(steps: list[tuple[str, str]]) -> list[str]:
    """The simple commands of the RUN steps (split at && and ;)."""
    return [command.strip() for keyword, rest in steps if keyword == "RUN"
            for command in re.split(r"&&|;", rest) if command.strip()]


@pytest.mark.parametrize("dockerfile", [OPERATOR_DOCKERFILE, TRAINER_DOCKERFILE], ids=["operator", "trainer"])
def test_every_pip_install_takes_a_hashed_lock_or_the_projects_own_wheel(dockerfile):
    commands = [command for command in shell_commands(instructions(dockerfile)) if re.search(r"\bpip (install|wheel)\b", command)]
    from_locks = [c for c in commands if "pip install" in c and " -r " in c]
    own_wheel = [c for c in commands if "pip install" in c and "/tmp/dist/" in c]
    wheels = [c for c in commands if "pip wheel" in c]
    assert from_locks and own_wheel and wheels, f"{dockerfile.name}: {commands}"
    assert sorted(from_locks + own_wheel + wheels) == sorted(commands), f"{dockerfile.name}: an unlocked pip command"
    for command in from_locks:
        assert {"--require-hashes", "--no-deps", "--only-binary=:all:"} <= set(command.split()), command
    for command in own_wheel:
        assert "--no-deps" in command.split() and "--require-hashes" not in command, command
    for command in wheels:
        assert {"--no-deps", "--no-build-isolation"} <= set(command.split()), command
    assert any("pip check" in command for command in shell_commands(instructions(dockerfile))), \
        f"{dockerfile.name}: no `pip check` of what the lock installed"


@pytest.mark.parametrize("dockerfile, locks", [(OPERATOR_DOCKERFILE, {"operator.lock", "build.lock"}),
                                               (TRAINER_DOCKERFILE, {"trainer.lock", "build.lock"})],
                         ids=["operator", "trainer"])
def test_the_locks_an_image_installs_exist_and_are_copied_before_the_sources(dockerfile, locks):
    steps = instructions(dockerfile)
    sources = copied_sources(steps)
    copied = {lock for lock in locks if any(fnmatch.fnmatch(f"requirements/{lock}", source) for source in sources)}
    assert copied == locks, f"{dockerfile.name} copies {sources}"
    assert all((chart.REPO_ROOT / "requirements" / lock).is_file() for lock in locks)
    first_lock_copy = sources.index(next(s for s in sources if s.startswith("requirements/")))
    assert first_lock_copy < sources.index("pyproject.toml"), "a source change would reinstall every package"


def trainer_lock_install() -> str:
    (command,) = [rest for keyword, rest in instructions(TRAINER_DOCKERFILE)
                  if keyword == "RUN" and "requirements/trainer" in rest]
    return command


@pytest.fixture
def recording_pip(tmp_path):
    """A `pip` first on PATH that writes down its arguments and the extra indexes it was given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pip = bin_dir / "pip"
    pip.write_text('#!/bin/sh\necho "$PIP_EXTRA_INDEX_URL" > "$RECORD.index"\necho "$@" > "$RECORD.args"\n')
    pip.chmod(0o755)
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "trainer.lock").write_text("")

    def run(**build_args: str) -> tuple[subprocess.CompletedProcess, str, list[str]]:
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD": str(tmp_path / "pip"), "VARIANT": "",
               "TORCH_INDEX_URL": "", "PIP_EXTRA_INDEX_URL": "", **build_args}
        result = subprocess.run(["sh", "-c", trainer_lock_install()], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            return result, "", []
        return result, (tmp_path / "pip.args").read_text().strip(), (tmp_path / "pip.index").read_text().split()

    run.requirements = tmp_path / "requirements"
    return run


def test_the_trainer_installs_trainer_lock_from_the_given_indexes_by_default(recording_pip):
    result, args, indexes = recording_pip(PIP_EXTRA_INDEX_URL="http://127.0.0.1:38400/simple")
    assert result.returncode == 0, result.stderr
    assert args.endswith("-r requirements/trainer.lock")
    assert indexes == ["http://127.0.0.1:38400/simple"]


def test_a_trainer_variant_needs_its_lock_and_takes_torch_from_its_pytorch_index(recording_pip):
    result, _, _ = recording_pip(VARIANT="cpu")
    assert result.returncode != 0
    assert "no requirements/trainer-cpu.lock: make locks LOCKS_ARGS='--torch-backend cpu'" in result.stderr
    (recording_pip.requirements / "trainer-cpu.lock").write_text("")
    result, args, indexes = recording_pip(VARIANT="cpu")
    assert args.endswith("-r requirements/trainer-cpu.lock")
    assert indexes == ["https://download.pytorch.org/whl/cpu"]
    result, args, indexes = recording_pip(VARIANT="cpu", TORCH_INDEX_URL="http://mirror.example/cpu")
    assert indexes == ["http://mirror.example/cpu"]
