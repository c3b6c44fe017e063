"""The documentation site builds and its API reference lists every public name.

Needs Sphinx (``pip install -e '.[docs]'``); skipped without it. With ``JLC_DOCS_HTML`` set
to a folder that ``sphinx-build -b html docs DIR`` wrote (CI builds it once with -W -n), the
test reads that build instead of building again.
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
    args = ["-W", "-n", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"), str(out)]
    assert build.build_main(args) == 0, "sphinx-build -W -n failed (warnings above)"
    return out


def _documented(pages: list[Path]) -> set[str]:
    """The objects the built pages describe (the ids of their Python signatures)."""
    ids = r'<dt class="sig sig-object py" id="([^"]+)"'
    return {i for page in pages for i in re.findall(ids, page.read_text())}


@pytest.mark.parametrize(
    "module", [jax_lossy_comm, jax_lossy_comm.error_bound], ids=lambda m: m.__name__
)
def test_every_public_name_is_in_the_api_reference(html, module):
    # The topic pages (docs/api/*.md) and the page of each name (docs/api/generated/).
    documented = _documented(sorted((html / "api").rglob("*.html")))
    missing = [n for n in module.__all__ if f"{module.__name__}.{n}" not in documented]
    assert not missing, f"not in the API reference (docs/api/*.md): {missing}"


@pytest.mark.parametrize(
    "module", [jax_lossy_comm, jax_lossy_comm.error_bound], ids=lambda m: m.__name__
)
def test_every_public_name_has_a_page_in_its_topic_table(html, module):
    # Functions and classes: a page each, linked from a topic page's autosummary table.
    topics = "".join(p.read_text() for p in sorted((html / "api").glob("*.html")))
    for name in module.__all__:
        obj = getattr(module, name)
        if callable(obj) and getattr(obj, "__module__", "").startswith(module.__name__):
            page = f"{module.__name__}.{name}.html"
            assert (html / "api" / "generated" / page).is_file(), page
            assert f'href="generated/{page}' in topics, page


def test_api_pages_print_jax_array_and_list_namedtuple_fields_once(html):
    pages = sorted((html / "api" / "generated").glob("*.html"))
    text = "".join(p.read_text() for p in pages)
    assert "jax.Array" in text
    assert "jaxlib._jax" not in text  # the class's own module, not the name users write
    assert "Alias for field number" not in text  # NamedTuple fields: the Attributes section
    assert "Bases:" not in text  # show-inheritance off


def test_every_guide_is_built(html):
    guides = ["install", "getting_started", "exchange", "error_bound", "training", "gpu"]
    guides += ["frame_format", "benchmarks", "layout", "api"]
    for guide in guides:
        assert (ROOT / "docs" / f"{guide}.md").is_file(), guide
        assert (html / f"{guide}.html").is_file(), guide
    index = (html / "index.html").read_text()
    assert all(f'href="{g}.html"' in index for g in guides)
