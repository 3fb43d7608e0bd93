"""Sphinx configuration for autotune's documentation site.

Build it from the repository root (``.ci/run`` does, with warnings as errors)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import sys
from pathlib import Path

# The repository's autotune, whether or not it is installed (a checkout's docs describe it).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import autotune

project = "autotune"
author = "the autotune authors"
copyright = "2026, the autotune authors"
release = autotune.__version__
version = release

extensions = [
    "myst_parser",  # the pages are Markdown, as the README is
    "sphinx.ext.autodoc",  # the API reference is generated from the docstrings
    "sphinx.ext.napoleon",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# `[text](page.md#a-heading)` links between pages, as GitHub renders them.
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "signature"

html_theme = "furo"
html_title = f"autotune {release}"
