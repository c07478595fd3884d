"""The lock files the images install from (requirements/*.lock, `make locks`): current with their
inputs, every package pinned to one version with its hashes, nothing pip could install unhashed."""
from __future__ import annotations

import pytest
from packaging.requirements import Requirement

from hack import locks

# The images' interpreter and platform, as the locks are resolved for them (hack/locks.py).
IMAGE_MARKERS = {"python_version": locks.PYTHON_VERSION, "python_full_version": f"{locks.PYTHON_VERSION}.0",
                 "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
                 "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython"}


@pytest.mark.parametrize("spec", locks.LOCKS, ids=lambda spec: spec.name)
def test_every_input_requirement_has_a_hashed_pin_that_satisfies_it(spec):
    pins = locks.parse_lock(spec.path.read_text())
    requirements = locks.direct_requirements(spec, locks.pyproject(), locks.makefile_torch_pins())
    assert requirements, f"{spec.name}: no inputs"
    problems = []
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate(IMAGE_MARKERS):
            continue
        pin = pins.get(locks.normalize(requirement.name))
        if pin is None:
            problems.append(f"{requirement.name} is not pinned")
        elif not requirement.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{requirement} but the lock pins {pin.version}")
    assert not problems, f"{spec.path.name} is stale (make locks): {problems}"


@pytest.mark.parametrize("spec", locks.LOCKS, ids=lambda spec: spec.name)
def test_each_lock_says_the_one_command_that_makes_it(spec):
    header = spec.path.read_text().splitlines()[:2]
    assert header[1].strip("# ") == "make locks", f"{spec.path.name}: {header}"


def test_the_trainer_lock_holds_torch_at_the_makefile_pins():
    pins = locks.parse_lock(locks.REQUIREMENTS.joinpath("trainer.lock").read_text())
    for pin_text in locks.makefile_torch_pins():
        name, _, version = pin_text.partition("==")
        assert pins[name].version == version, f"trainer.lock pins {name} {pins[name].version}, TORCH_PINS {version}"


def test_the_operator_lock_has_no_torch_and_the_trainer_lock_no_kubernetes_client():
    operator = locks.parse_lock(locks.REQUIREMENTS.joinpath("operator.lock").read_text())
    trainer = locks.parse_lock(locks.REQUIREMENTS.joinpath("trainer.lock").read_text())
    assert not {"torch", "torchvision", "timm"} & operator.keys()
    assert not {"kopf", "kubernetes"} & trainer.keys()


def test_parse_lock_reads_pins_with_their_hashes():
    sha_a, sha_b = "a" * 64, "b" * 64
    text = (f"# header\nPyYAML==6.0.4 \\\n    --hash=sha256:{sha_a} \\\n    --hash=sha256:{sha_b}\n"
            "    # via pets-operator (pyproject.toml)\n")
    assert locks.parse_lock(text) == {"pyyaml": locks.Pin("pyyaml", "6.0.4", (f"sha256:{sha_a}", f"sha256:{sha_b}"))}


@pytest.mark.parametrize("line, complaint", [
    ("requests==2.34.2\n", "no sha256 hash"),
    (f"requests>=2 --hash=sha256:{'a' * 64}\n", "is not `name==version"),
    ("-e .\n", "is not `name==version"),
    (f"requests==2.34.2 --hash=sha256:{'a' * 64} --index-url http://elsewhere/\n", "unexpected"),
    (f"requests==2.34.2 --hash=md5:{'a' * 32}\n", "no sha256 hash"),
])
def test_parse_lock_rejects_what_pip_could_install_unhashed(line, complaint):
    with pytest.raises(ValueError, match=complaint):
        locks.parse_lock(line)


def test_parse_lock_rejects_a_package_pinned_twice():
    line = f"requests==2.34.2 --hash=sha256:{'a' * 64}\n"
    with pytest.raises(ValueError, match="pinned twice"):
        locks.parse_lock(line + line.replace("2.34.2", "2.34.1"))


def test_direct_requirements_follow_the_extras_self_references():
    project = {"project": {"name": "pets-operator", "dependencies": ["base>=1"], "optional-dependencies": {
        "operator": ["kopf>=1.38"], "notebook": ["pets-operator[operator]", "tqdm>=4"]}}}
    spec = locks.LockSpec("notebook", extras=("notebook",))
    assert sorted(locks.direct_requirements(spec, project, [])) == ["base>=1", "kopf>=1.38", "tqdm>=4"]
    with pytest.raises(ValueError, match="no extra 'missing'"):
        locks.direct_requirements(locks.LockSpec("x", extras=("missing",)), project, [])


def test_the_build_lock_is_compiled_from_the_build_system_requirements():
    (build,) = [spec for spec in locks.LOCKS if spec.name == "build"]
    project = locks.pyproject()
    command = locks.compile_command(build, "uv", locks.REQUIREMENTS / "build.lock")
    assert command[-1] == "-" and "pyproject.toml" not in command
    assert locks.compile_stdin(build, project, ["torch==9"]).split() == project["build-system"]["requires"]


def test_the_trainer_lock_takes_torch_pins_as_constraints_for_the_images_platform():
    (trainer,) = [spec for spec in locks.LOCKS if spec.name == "trainer"]
    command = locks.compile_command(trainer, "uv", locks.REQUIREMENTS / "trainer.lock")
    assert command[command.index("--constraint") + 1] == "-"
    assert command[command.index("--extra") + 1] == "trainer"
    assert command[command.index("--python-platform") + 1] == locks.PLATFORM
    assert command[command.index("--custom-compile-command") + 1] == "make locks"
    assert "--generate-hashes" in command and "--upgrade" not in command
    assert locks.compile_stdin(trainer, locks.pyproject(), ["torch==1", "torchvision==2"]) == "torch==1\ntorchvision==2\n"


def test_a_variant_lock_takes_torch_from_that_pytorch_index():
    spec = locks.variant_lock("cpu")
    assert spec.path.name == "trainer-cpu.lock"
    command = locks.compile_command(spec, "uv", spec.path, upgrade=True)
    assert command[command.index("--torch-backend") + 1] == "cpu" and "--upgrade" in command
    with pytest.raises(ValueError, match="--torch-backend"):
        locks.variant_lock("cpu; rm -rf /")


def test_makefile_torch_pins_are_read_from_the_makefile(tmp_path):
    makefile = tmp_path / "Makefile"
    makefile.write_text("VENV ?= .venv\nTORCH_PINS ?= torch==2.14.1 torchvision==0.29.1\n")
    assert locks.makefile_torch_pins(makefile) == ["torch==2.14.1", "torchvision==0.29.1"]
    makefile.write_text("VENV ?= .venv\n")
    with pytest.raises(ValueError, match="no TORCH_PINS"):
        locks.makefile_torch_pins(makefile)


@pytest.mark.parametrize("spec", [spec for spec in locks.LOCKS if spec.name != "build"], ids=lambda spec: spec.name)
def test_each_lock_is_a_closed_graph_rooted_at_its_inputs(spec):
    """Every pinned package is required by an input or by another pinned package (uv's `# via`),
    and the packages the inputs require directly are exactly the inputs' requirements."""
    text = spec.path.read_text()
    pins = locks.parse_lock(text)
    required_by = locks.required_by(text)
    assert required_by.keys() == pins.keys()
    orphans = [name for name, dependents in required_by.items() if not dependents]
    assert not orphans, f"{spec.path.name}: nothing requires {orphans}"
    unknown = {dependent for dependents in required_by.values() for dependent in dependents} - pins.keys() - {""}
    assert not unknown, f"{spec.path.name}: required by unpinned {unknown}"
    direct = {locks.normalize(Requirement(r).name)
              for r in locks.direct_requirements(spec, locks.pyproject(), [])
              if not Requirement(r).marker or Requirement(r).marker.evaluate(IMAGE_MARKERS)}
    assert {name for name, dependents in required_by.items() if "" in dependents} == direct


def test_required_by_reads_single_and_listed_annotations():
    sha = "a" * 64
    text = (f"aiohttp==3.14.5 \\\n    --hash=sha256:{sha}\n    # via\n    #   pets-operator (pyproject.toml)\n"
            f"    #   kopf\nkopf==1.45.2 \\\n    --hash=sha256:{sha}\n    # via pets-operator (pyproject.toml)\n"
            f"Multi_Dict==7.2.1 \\\n    --hash=sha256:{sha}\n    # via aiohttp\n"
            f"uv==0.13.9 \\\n    --hash=sha256:{sha}\n    # via -r requirements/tools.in\n")
    assert locks.required_by(text) == {"aiohttp": {"", "kopf"}, "kopf": {""}, "multi-dict": {"aiohttp"}, "uv": {""}}
