"""The installed package's guards: the torch wheel it links, and the `impala` launcher that the
wheel installs into the environment's bin/ (python/wheel-data/scripts/impala)."""

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from impala_rs import _torch_pin

from conftest import REPO

LAUNCHER = REPO / "python" / "wheel-data" / "scripts" / "impala"


def test_the_installed_torch_is_the_pinned_one():
    assert _torch_pin.torch_problem() is None


def test_another_torch_version_is_named_with_the_fix(monkeypatch):
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "2.10.0+cpu" if name == "torch" else real(name))
    problem = _torch_pin.torch_problem()
    assert "has torch 2.10.0+cpu" in problem and "pip install torch==2.11.0" in problem


def test_a_missing_torch_is_named_with_the_fix(monkeypatch):
    real = metadata.version

    def version(name):
        if name == "torch":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    problem = _torch_pin.torch_problem()
    assert "torch is not installed" in problem and "pip install torch==2.11.0" in problem


def fake_package(root, binary=None):
    """An `impala_rs` folder with the real torch check and, optionally, a `bin/impala`."""
    package = root / "impala_rs"
    package.mkdir()
    (package / "__init__.py").write_text("raise SystemExit('the launcher must not import the package')\n")
    shutil.copy(Path(_torch_pin.__file__), package / "_torch_pin.py")
    if binary is not None:
        (package / "bin").mkdir()
        (package / "bin" / "impala").write_text(binary)
        (package / "bin" / "impala").chmod(0o755)
    return root


def launch(root, *args, env=None):
    return subprocess.run(
        [sys.executable, str(LAUNCHER), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), **(env or {})},
    )


def test_the_launcher_runs_the_binary_with_this_interpreter_for_env_workers(tmp_path):
    root = fake_package(tmp_path, '#!/bin/sh\necho "args: $*"\necho "python: $IMPALA_PYTHON"\n')
    done = launch(root, "train", "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["args: train --quiet", f"python: {sys.executable}"]
    # An interpreter the user names wins.
    done = launch(root, "envs", env={"IMPALA_PYTHON": "/opt/python3"})
    assert done.stdout.splitlines()[1] == "python: /opt/python3"


def test_the_launcher_without_a_binary_says_how_to_get_one(tmp_path):
    done = launch(fake_package(tmp_path))
    assert done.returncode == 1
    assert "has no `impala` binary" in done.stderr and "./dev wheel" in done.stderr


def test_the_launcher_refuses_another_torch_before_the_loader_does(tmp_path):
    installed = "2.10.0"
    # A site folder whose torch is another version: the check reads the distributions there.
    root = fake_package(tmp_path, "#!/bin/sh\necho ran\n")
    dist = tmp_path / f"torch-{installed}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {installed}\n")
    done = launch(root)
    assert done.returncode == 1 and "ran" not in done.stdout
    assert f"has torch {installed}" in done.stderr and "pip install torch==2.11.0" in done.stderr
