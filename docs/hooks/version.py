"""MkDocs hook: show the project's version (from pyproject.toml) in the header and footer."""

from __future__ import annotations

import tomllib
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def project_version() -> str:
    """The ``[project] version`` of the checked-out source, not of an installed copy."""
    with PYPROJECT.open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    version = project_version()
    config.site_name = f"{config.site_name} {version}"
    config.copyright = f"kuber-exec {version} · Apache-2.0"
    return config
