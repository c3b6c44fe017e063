"""The documentation site builds and its API reference lists every public name.

Needs Sphinx (``pip install -e '.[docs]'``); skipped without it. With ``JLC_DOCS_HTML`` set
to a folder that ``sphinx-build -b html docs DIR`` wrote (CI builds it once with -W), the test
reads that build instead of building again.
"""

import os
import re
from pathlib import Path

import pytest

import jax_lossy_comm
import jax_lossy_comm.error_bound

ROOT = Path(__file__).resolve().parents[2]
# The tests share one build of the site (the ``html`` fixture): one xdist worker runs them.
pytestmark = pytest.mark.xdist_group("docs_html")


@pytest.fixture(scope="module")
def html(tmp_path_factory) -> Path:
    if os.environ.get("JLC_DOCS_HTML"):
        return Path(os.environ["JLC_DOCS_HTML"])
    build = pytest.importorskip("sphinx.cmd.build")
    out = tmp_path_factory.mktemp("html")
    rc = build.build_main(["-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"), str(out)])
    assert rc == 0, "sphinx-build -W failed (warnings above)"
    return out


def _documented(page: Path) -> set[str]:
    """The objects a built page describes (the ids of its Python signatures)."""
    return set(re.findall(r'<dt class="sig sig-object py" id="([^"]+)"', page.read_text()))


@pytest.mark.parametrize(
    "module", [jax_lossy_comm, jax_lossy_comm.error_bound], ids=lambda m: m.__name__
)
def test_every_public_name_is_in_the_api_reference(html, module):
    documented = _documented(html / "api.html")
    missing = [n for n in module.__all__ if f"{module.__name__}.{n}" not in documented]
    assert not missing, f"not in docs/api.md's reference: {missing}"


def test_every_guide_is_built(html):
    guides = ["install", "getting_started", "exchange", "error_bound", "training", "gpu"]
    guides += ["frame_format", "benchmarks", "layout", "api"]
    for guide in guides:
        assert (ROOT / "docs" / f"{guide}.md").is_file(), guide
        assert (html / f"{guide}.html").is_file(), guide
    index = (html / "index.html").read_text()
    assert all(f'href="{g}.html"' in index for g in guides)
