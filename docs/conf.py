"""Sphinx configuration of the jax_lossy_comm documentation (Markdown pages through MyST,
the API reference from the docstrings through autodoc, autosummary and napoleon, as jax, flax
and optax).

Build (from the repository root, after ``pip install -e '.[docs]'``), as CI does::

    sphinx-build -W -n --keep-going -b html docs docs/_build/html

The API reference's pages of one public name each are generated at build time
(``docs/api/generated/``, git-ignored).
"""

import os
import tomllib

import jax

import jax_lossy_comm

project = "jax_lossy_comm"
author = "the jax_lossy_comm authors"
copyright = "2026, the jax_lossy_comm authors"
version = release = jax_lossy_comm.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
templates_path = ["_templates"]
root_doc = "index"

# ---------------------------------------------------------------------------- API reference
# The docstrings are Google style (Args / Returns / Raises).
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# "Attributes:" sections as fields of the class (autodoc lists the attributes themselves).
napoleon_use_ivar = True
# No "show-inheritance" key: Sphinx 9 reads any value given to it, False included, as on.
autodoc_default_options = {"members": True, "undoc-members": True}
autodoc_member_order = "bysource"
# Signatures with their annotations (jax.Array printed as such: setup() below).
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# One page per public name, written at build time under docs/api/generated/.
autosummary_generate = True
autosummary_imported_members = False

# Every cross-reference must resolve (-n in CI). These are the external types the signatures
# name: their documentation is on other sites, and the build fetches nothing (no intersphinx:
# it needs the network), so they print as text.
nitpick_ignore = [
    # jax's array type and the dtypes named in signatures: documented on jax.readthedocs.io.
    ("py:class", "jax.Array"),
    ("py:class", "jax.numpy.bfloat16"),
    ("py:class", "jax.numpy.float16"),
    # numpy's, documented on numpy.org.
    ("py:class", "numpy.ndarray"),
    ("py:class", "numpy.dtype"),
    ("py:class", "np.dtype"),
    # the standard library's, documented on docs.python.org.
    ("py:class", "collections.abc.Callable"),
    ("py:class", "collections.abc.Mapping"),
    ("py:class", "collections.abc.Sequence"),
    ("py:class", "os.PathLike"),
]


def _skip_namedtuple_fields(app, what, name, obj, skip, options):
    """NamedTuple fields are documented in the class's "Attributes:" section; autodoc would
    list each again as a property "Alias for field number N"."""
    doc = getattr(obj, "__doc__", None) or ""
    if doc.startswith("Alias for field number"):
        return True
    return None


def _jax_array_in_full(app, what, name, obj, options, signature, return_annotation):
    """Signatures name types by their last part (``ErrorBoundConfig``, not the module it is
    defined in); jax's array keeps its package, as users write it: ``jax.Array``."""

    def full(text):
        return text and text.replace("~jax.Array", "jax.Array")

    return full(signature), full(return_annotation)


def setup(app):
    # jax.Array's own name is ``jaxlib._jax.Array``: the signatures print it under the name
    # users write (set here, in the Sphinx process only: pytest imports this file too).
    jax.Array.__qualname__ = "Array"
    app.connect("autodoc-skip-member", _skip_namedtuple_fields)
    app.connect("autodoc-process-signature", _jax_array_in_full)
    app.add_css_file("custom.css")


# ------------------------------------------------------------------------------- Markdown
# Fenced blocks with a language stay code blocks; ``{directive}`` fences are directives.
# No dollarmath: the pages have shell lines with $VARIABLES. A formula (the {math} role or
# directive) is typeset by MathJax, which the page loads from its CDN: online only.
myst_enable_extensions = ["colon_fence"]
# Anchors for ## and ### headings, so pages can link to each other's sections.
myst_heading_anchors = 3
# bench/results/*.md are generated pages included whole: their headings start at ###.
suppress_warnings = ["myst.header"]

# ------------------------------------------------------------------------------------ HTML
html_theme = "furo"
html_title = f"jax_lossy_comm {version}"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": True,
}
# The repository link in the header (Furo's source buttons): JLC_DOCS_REPOSITORY, else the
# "Repository" (or "Source") URL of pyproject.toml's [project.urls], when there is one; e.g.
# JLC_DOCS_REPOSITORY=https://github.com/OWNER/jax_lossy_comm.
with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml"), "rb") as f:
    _urls = tomllib.load(f)["project"].get("urls", {})
_repository = (
    os.environ.get("JLC_DOCS_REPOSITORY") or _urls.get("Repository") or _urls.get("Source")
)
if _repository:
    html_theme_options.update(
        source_repository=_repository.rstrip("/") + "/",
        source_branch=os.environ.get("JLC_DOCS_BRANCH", "main"),
        source_directory="docs/",
        footer_icons=[{"name": "Repository", "url": _repository, "html": "Repository"}],
    )
