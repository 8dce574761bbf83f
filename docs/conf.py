"""Sphinx configuration: the user guide (Markdown through myst-parser), the API reference
(autosummary over the numpydoc docstrings of the public names) and the gallery
(sphinx-gallery runs docs/examples/plot_*.py while it builds).  ``make docs`` builds it
offline with warnings as errors; tests/test_docs.py does the same into a temporary folder."""

from __future__ import annotations

import os
import re
from importlib.metadata import version as _version

# No telemetry from Prefect while autodoc imports mkdist.flows (no internet here).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
# The gallery's examples draw with matplotlib off screen.
os.environ.setdefault("MPLBACKEND", "Agg")

project = "mkdist"
author = "mkdist developers"
copyright = "2026, mkdist developers"
release = _version("mkdist")
version = release

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "examples/GALLERY_HEADER.rst"]
templates_path = ["_templates"]

# Markdown pages: headings get anchors (links such as tables.md#missing-cells), and $...$ math.
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "inherited-members": False}
autodoc_typehints = "none"
# numpydoc renders the sections; the members are listed by the autosummary templates, not
# numpydoc's own tables (which would document every inherited scikit-learn method).
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    # Each example runs in seconds on small data; a failing one fails the build.
    "abort_on_example_error": True,
    # Run every example on every build: an example is stale when the library changed too, which
    # its file's checksum (sphinx-gallery's default test) does not see.
    "run_stale_examples": True,
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    "show_memory": False,
}

html_theme = "pydata_sphinx_theme"
html_title = f"mkdist {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_static_path: list[str] = []
html_show_sourcelink = False


# The docstrings are written to be read as text first (``help()``, an editor): a fitted
# attribute named in running prose (n_components_, n_iter_) or a norm ||x - y|| would be a
# reStructuredText reference or substitution.  Outside literals (and table rows), escape them
# before numpydoc parses the docstring, so that the text renders as written.
_LITERAL = re.compile(r"(``.*?``|`[^`]*`)")
_TRAILING_UNDERSCORE = re.compile(r"\b([A-Za-z][A-Za-z0-9_]*[A-Za-z0-9])_(?=\W|$)")


def _escape_prose(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("|", "+")):
            continue
        parts = _LITERAL.split(line)
        for j in range(0, len(parts), 2):
            parts[j] = _TRAILING_UNDERSCORE.sub(r"\1\\_", parts[j]).replace("|", "\\|")
        lines[i] = "".join(parts)


def setup(app):
    app.connect("autodoc-process-docstring", _escape_prose, priority=400)
