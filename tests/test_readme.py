"""The README's Python example runs as written and its claims hold."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_api_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no python example"
    scope: dict = {}
    exec(compile(blocks[0], str(README), "exec"), scope)  # noqa: S102 - our own README
    assert (
        scope["cap"] == 11 + 8 + 1 + 256 * 64 * 6 // 8
    )  # header, eb+base, n_outliers, 6-bit codes
    assert scope["status"].shape == (26,) and not scope["status"].any()


def test_readme_gives_exactly_two_fresh_machine_commands():
    text = README.read_text()
    section = text.split("## Fresh machine: the two commands")[1].split("\n## ")[0]
    assert len(re.findall(r"```bash\n", section)) == 2
