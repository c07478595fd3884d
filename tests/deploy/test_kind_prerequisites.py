"""The kind tests skip with a reason when their tools are missing (checked with fake tools)."""
from __future__ import annotations

from pathlib import Path

from tests.kind.kind_cluster import missing_prerequisite


def fake_tool(directory: Path, name: str, exit_code: int) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\nexit {exit_code}\n")
    path.chmod(0o755)


def test_missing_kind(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert missing_prerequisite() == "kind not found on PATH"


def test_missing_or_stopped_container_engine(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("KIND_EXPERIMENTAL_PROVIDER", raising=False)
    fake_tool(tmp_path, "kind", 0)
    assert missing_prerequisite() == "container engine 'docker' not found on PATH"
    fake_tool(tmp_path, "docker", 1)
    assert missing_prerequisite() == "container engine 'docker' is not running (docker info failed)"
    fake_tool(tmp_path, "docker", 0)
    assert missing_prerequisite() is None


def test_other_container_engine(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("KIND_EXPERIMENTAL_PROVIDER", "podman")
    fake_tool(tmp_path, "kind", 0)
    assert missing_prerequisite() == "container engine 'podman' not found on PATH"
