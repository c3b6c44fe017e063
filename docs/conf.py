"""Sphinx configuration of the jax_lossy_comm documentation (Markdown pages through MyST,
the API reference from the docstrings through autodoc and napoleon, as jax, flax and optax).

Build (from the repository root, after ``pip install -e '.[docs]'``)::

    sphinx-build -W --keep-going -b html docs docs/_build/html
"""

project = "jax_lossy_comm"
author = "the jax_lossy_comm authors"
copyright = "2026, the jax_lossy_comm authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
root_doc = "index"

# The docstrings are Google style (Args / Returns / Raises).
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# "Attributes:" sections as fields of the class (autodoc lists the attributes themselves).
napoleon_use_ivar = True
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": False}
autodoc_member_order = "bysource"
# Signatures keep the annotations as written (jax.Array, not its expanded alias).
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

# Fenced blocks with a language stay code blocks; ``{directive}`` fences are directives.
myst_enable_extensions = ["colon_fence"]
# Anchors for ## and ### headings, so pages can link to each other's sections.
myst_heading_anchors = 3
# bench/results/*.md are generated pages included whole: their headings start at ###.
suppress_warnings = ["myst.header"]

html_theme = "furo"
html_title = "jax_lossy_comm"
