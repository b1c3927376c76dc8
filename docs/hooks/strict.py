"""MkDocs hook: warnings fail the build even under ``--quiet``.

``mkdocs build --strict`` counts the warnings that are logged; ``--quiet`` raises the ``mkdocs``
logger's level to ERROR, so warnings are never logged and a strict, quiet build passes with
broken links or cross-references. This hook puts the level back to WARNING (INFO stays quiet).
"""

from __future__ import annotations

import logging

from mkdocs.config.defaults import MkDocsConfig


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    logger = logging.getLogger("mkdocs")
    if logger.level > logging.WARNING:
        logger.setLevel(logging.WARNING)
    return config
