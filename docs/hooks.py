"""MkDocs hooks: each page's generated tables are made from the code as the site is built
(`benchlib.report.reference.fill`), and the reference run is published into the site (`benchlib publish`), where the
results page links it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchlib.cli import build_parser
from benchlib.report import reference
from benchlib.report.publish import publish


def on_page_markdown(markdown: str, **_: Any) -> str:
    return reference.fill(markdown, build_parser())


def on_post_build(config: Any, **_: Any) -> None:
    site = Path(config["site_dir"]) / Path(reference.REFERENCE_RUN_LINK).parent
    publish([reference.REFERENCE_RUN_DIR], site, progress=False)
