"""Checks of rendered HTML pages shared by the tests: every local link and image of a site resolves inside it, no page
names a path of the machine that made it, and no page loads anything from the network."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _References(HTMLParser):
    """The href and src attributes of a page, with the tag that holds each."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value is not None:
                self.found.append((tag, name, value))


def references(page: Path) -> list[tuple[str, str, str]]:
    """(tag, attribute, value) of every href and src in `page`."""
    parser = _References()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.found


TEXT_FILES = ("*.html", "*.csv", "*.json", "*.md")


def site_problems(site: Path, machine_paths: list[str]) -> list[str]:
    """What is wrong with the static site in `site`: a file (a page, a CSV, a JSON or Markdown file) that holds one of
    `machine_paths`; in a page, a local link or image that does not resolve to a file inside the site, a reference with
    a scheme other than http(s) and data (file:, an absolute path), or anything loaded from the network (a script, an
    image or a style sheet with an http(s) address; a link to a page elsewhere is allowed)."""
    problems = []
    for file in sorted(path for pattern in TEXT_FILES for path in site.rglob(pattern)):
        text = file.read_text(encoding="utf-8")
        problems += [f"{file}: holds {path}" for path in machine_paths if path in text]
    for page in sorted(site.rglob("*.html")):
        for tag, attribute, value in references(page):
            parts = urlsplit(value)
            if parts.scheme == "data" or (not parts.scheme and not parts.path):  # embedded, or an anchor in the page
                continue
            if parts.scheme in ("http", "https"):
                if tag != "a":
                    problems.append(f"{page}: <{tag} {attribute}={value!r}> loads from the network")
                continue
            if parts.scheme or value.startswith("/"):
                problems.append(f"{page}: <{tag} {attribute}={value!r}> is not relative")
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            if site.resolve() not in target.parents or not target.exists():
                problems.append(f"{page}: <{tag} {attribute}={value!r}> does not resolve inside the site")
    return problems
