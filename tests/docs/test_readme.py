"""The README's Python example runs as written and its claims hold."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: The README's test command after its install step: the fast lane on two xdist workers.
FAST_LANE = '.venv/bin/python -m pytest -q -n 2 --dist loadgroup -m "not slow"'
#: The slow lane the README names beside it: the rest of the suite.
SLOW_LANE = ".venv/bin/python -m pytest -q -m slow"


def test_readme_api_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no python example"
    scope: dict = {}
    exec(compile(blocks[0], str(README), "exec"), scope)  # noqa: S102 - our own README
    # header, eb+base, n_outliers, 6-bit codes, rounded up to 16 bytes
    assert scope["cap"] == -(-(11 + 8 + 1 + 256 * 64 * 6 // 8) // 16) * 16
    assert scope["status"].shape == (26,) and not scope["status"].any()


def test_readme_gives_exactly_two_fresh_machine_commands():
    text = README.read_text()
    section = text.split("## Fresh machine: the two commands")[1].split("\n## ")[0]
    assert len(re.findall(r"```bash\n", section)) == 2


def _fresh_machine_commands():
    section = README.read_text().split("## Fresh machine: the two commands")[1].split("\n## ")[0]
    return section, re.findall(r"```bash\n(.*?)\n```", section, re.S)


def test_the_two_commands_share_one_install_step_that_skips_an_existing_install():
    """The second command must not rebuild the extension the first one built: both start with the same install step, which runs pip only when the virtual
    environment lacks the built extension or the test tools, and installs the extra that
    holds both the test and the training dependencies."""
    _, (train, test) = _fresh_machine_commands()
    install = "python3 -m venv .venv && { .venv/bin/python -c 'import jax_lossy_comm._ext, pytest, xdist' 2>/dev/null || .venv/bin/pip install -e '.[test]'; } && "
    assert train.startswith(install) and test.startswith(install)
    assert (
        train[len(install) :] == ".venv/bin/python -m models.dlrm.train --devices 8 --out runs/dlrm"
    )
    assert test[len(install) :] == FAST_LANE
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert "jax_lossy_comm[train]" in extras["test"] and "pytest>=8" in extras["test"]


def test_the_readme_names_the_build_prerequisites_and_the_cuda_switch():
    section, _ = _fresh_machine_commands()
    text = " ".join(section.split())
    assert "a C++17 compiler" in text
    assert (
        "CMake (3.18+) and Ninja are taken from the system when present, else the build fetches them from PyPI"
        in text
    )
    assert (
        "With `nvcc` on `PATH` the CUDA handlers are compiled too, which adds about two minutes; `export JLC_CUDA=OFF`"
        in text
    )
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert "cmake_minimum_required(VERSION 3.18" in cmake and "set(CMAKE_CXX_STANDARD 17)" in cmake


def test_the_readme_names_the_slow_lane_and_ci_runs_both_lanes():
    """The fast lane (``-m "not slow"``) and the slow lane (``-m slow``) are the whole suite;
    the README gives both commands and .ci/run runs both, with the same selection and workers
    (and ``-p no:cacheprovider``, as a fresh clone has no cache)."""
    assert f"`{SLOW_LANE}`" in " ".join(README.read_text().split())  # line breaks aside
    ci = [
        " ".join(line.split())
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if " -m pytest " in line and not line.lstrip().startswith("#")
    ]
    for lane in (FAST_LANE, SLOW_LANE):
        args = lane.split(" -m pytest -q ")[1]
        want = f"python -m pytest -q -p no:cacheprovider {args}"
        assert any(line.endswith(want) for line in ci), f".ci/run lacks {want!r}: {ci}"


def test_the_test_command_collects_every_test_module():
    """``python -m pytest -q`` (every test of both lanes) collects without errors: a worker
    script imported by --doctest-modules once set 4 devices for all."""
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "error" not in r.stdout.splitlines()[-1]
