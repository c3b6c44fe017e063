"""docs/layout.md, the map of the repository, names every module of every package, and no two
modules share a file name (so that a file name alone says which module it is).

"Every package" is the code a reader navigates: every ``.py`` file (but ``__init__.py``) under
the library ``jax_lossy_comm/``, the trainer ``models/``, the benchmarks ``bench/`` and
``tools/``, and every file of the native codec ``xla_ffi/``. Not covered: ``tests/`` (test
modules are named after the modules they test; the map names the shared helpers),
``tests/native/cuda_emu`` and ``tests/native/fuzz`` (C++ test harnesses), ``docs/conf.py``
and shell scripts. The tree is what git tracks (``git ls-files``); the test skips outside a
git checkout (an unpacked sdist).

A module counts as named when its file name (``codec.py``), or a path ending in it
(``error_bound/schedules.py``), appears in the map's block of its top-level folder: the lines
from the folder's own line (``jax_lossy_comm/``, at the start of a line of the map's code
block) to the next top-level folder's line.

File names may repeat only for ``__init__.py`` and ``conftest.py``; the check covers every
tracked ``.py``, ``.cc``, ``.h``, ``.cu`` and ``.cuh`` file, tests included.
"""

import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ROOT / "docs" / "layout.md"

#: Top-level folders whose ``.py`` files (but ``__init__.py``) the map must name.
PYTHON_PACKAGES = ("jax_lossy_comm", "models", "bench", "tools")
#: Top-level folders every file of which the map must name.
NATIVE_PACKAGES = ("xla_ffi",)
#: File names that may occur more than once in the tree.
MAY_REPEAT = {"__init__.py", "conftest.py"}
#: Source files whose names must be unique.
SOURCE_SUFFIXES = {".py", ".cc", ".h", ".cu", ".cuh"}


@pytest.fixture(scope="module")
def tracked() -> list[PurePosixPath]:
    """Every file git tracks in this checkout, relative to its root."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (the tree is what `git ls-files` lists)")
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    # A file deleted in the work tree but not yet from the index is not part of the tree.
    return [PurePosixPath(p) for p in out.split("\0") if p and (ROOT / p).is_file()]


def modules(tracked: list[PurePosixPath]) -> list[PurePosixPath]:
    """The modules the map must name (see the module docstring)."""
    out = []
    for path in tracked:
        top = path.parts[0]
        if top in PYTHON_PACKAGES and path.suffix == ".py" and path.name != "__init__.py":
            out.append(path)
        elif top in NATIVE_PACKAGES and len(path.parts) > 1:
            out.append(path)
    return out


def map_blocks(text: str) -> dict[str, str]:
    """The map's code block split by top-level folder: ``{"jax_lossy_comm": lines, ...}``.

    A top-level line starts at column 0 with a path ending in ``/`` (``models/dlrm/``); its
    block runs to the next such line."""
    fences = [m.end() for m in re.finditer(r"^```[^\n]*\n", text, re.M)]
    assert len(fences) >= 2, f"{LAYOUT.name}: no code block with the repository map"
    tree = text[fences[0] : text.index("```", fences[0])]
    blocks: dict[str, list[str]] = defaultdict(list)
    top = None
    for line in tree.splitlines():
        head = re.match(r"([\w.-]+)(/[\w.-]*)*/(\s|$)", line)
        if head:
            top = head.group(1)
        if top is not None:
            blocks[top].append(line)
    return {k: "\n".join(v) for k, v in blocks.items()}


def named(file_name: str, block: str) -> bool:
    """Whether ``file_name`` appears in ``block`` as a whole name (alone or ending a path)."""
    return re.search(rf"(?<![\w.-]){re.escape(file_name)}(?![\w-]|\.\w)", block) is not None


def test_the_map_names_every_module(tracked):
    blocks = map_blocks(LAYOUT.read_text())
    mods = modules(tracked)
    assert mods, "no modules found: is this the repository root?"
    missing = [str(p) for p in mods if not named(p.name, blocks.get(p.parts[0], ""))]
    assert not missing, (
        f"docs/layout.md does not name {len(missing)} module(s) in its map (in the block of "
        f"their top-level folder, by file name): {', '.join(missing)}"
    )


def test_no_two_modules_share_a_file_name(tracked):
    by_name = defaultdict(list)
    for path in tracked:
        if path.suffix in SOURCE_SUFFIXES and path.name not in MAY_REPEAT:
            by_name[path.name].append(str(path))
    repeated = {name: paths for name, paths in sorted(by_name.items()) if len(paths) > 1}
    assert not repeated, "file names used by more than one module (rename one of each): " + (
        "; ".join(f"{name}: {', '.join(paths)}" for name, paths in repeated.items())
    )


def test_the_checks_see_a_missing_module_and_a_repeated_name():
    """The matching itself: a name counts only whole and only in its own folder's block."""
    blocks = map_blocks(
        "# x\n\n```\njax_lossy_comm/   the library\n  codec.py  error_bound/config.py\n"
        "models/dlrm/      the trainer\n  train.py step.py\n```\n"
    )
    assert set(blocks) == {"jax_lossy_comm", "models"}
    assert named("codec.py", blocks["jax_lossy_comm"])
    assert named("config.py", blocks["jax_lossy_comm"])
    assert not named("train.py", blocks["jax_lossy_comm"])
    assert named("train.py", blocks["models"])
    assert not named("step.py", blocks["jax_lossy_comm"])
    assert not named("dec.py", blocks["jax_lossy_comm"])  # not a part of codec.py
    assert not named("codec.p", blocks["jax_lossy_comm"])


#: Most lines a module may have, by top-level folder: the trainer and the benchmarks are read
#: as examples (small modules, one concern each); the library's modules hold one API each.
MAX_LINES = {"models": 500, "bench": 500, "jax_lossy_comm": 700}


def test_no_module_outgrows_its_room(tracked):
    too_long = []
    for path in tracked:
        limit = MAX_LINES.get(path.parts[0])
        if limit is not None and path.suffix == ".py":
            n = len((ROOT / path).read_text().splitlines())
            if n > limit:
                too_long.append(f"{path} ({n} lines, at most {limit})")
    assert not too_long, "split by concern: " + ", ".join(too_long)
