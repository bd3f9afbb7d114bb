"""The kit's pages seen in a real browser (Debian's headless Chromium, driven by Selenium): a run's summary, `compare`'s
report and a published site each load from `file://` with every image drawn and every table there, and no link leads
to another place on the machine; a screenshot of each is kept in the test's folder."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from benchlib.analysis.compare import compare_runs
from benchlib.paths import OUTPUTS_DIR
from benchlib.report.compare_report import write_report
from benchlib.report.publish import publish

REFERENCE = OUTPUTS_DIR / "reference"
INSTALL = "install the browser and its driver: apt-get install chromium chromium-driver (make test does, where it may)"
# What the page shows, read in the browser once it has loaded.
PAGE_STATE = """
return {
  images: Array.from(document.images).map(i => ({src: i.currentSrc.startsWith("data:") ? "data:" : i.currentSrc, drawn: i.complete && i.naturalWidth > 0})),
  tables: document.querySelectorAll("table").length,
  rows: document.querySelectorAll("table tbody tr").length,
  links: Array.from(document.querySelectorAll("a[href]")).map(a => a.href),
};
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.fail(f"no headless Chromium here: {INSTALL}")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        options.add_argument(argument)
    with webdriver.Chrome(options=options, service=Service(executable_path=driver)) as session:
        yield session


def seen(browser: object, page: Path, screenshot: Path) -> dict:
    """`page` loaded from file://, its state (PAGE_STATE) once loaded, and its screenshot saved as `screenshot`."""
    browser.get(page.resolve().as_uri())
    state = browser.execute_script(PAGE_STATE)
    assert browser.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 0
    return state


def outside(links: list[str], root: Path) -> list[str]:
    """The links that lead to a file of the machine outside `root` (links to the web, citations, are not counted)."""
    inside = root.resolve().as_uri()
    return [link for link in links if urlsplit(link).scheme == "file" and not link.startswith(inside)]


@pytest.mark.e2e
def test_the_summary_the_compare_report_and_a_published_site_render_in_chromium(browser: object, tmp_path: Path) -> None:
    run = shutil.copytree(REFERENCE, tmp_path / "reference", ignore=shutil.ignore_patterns("site", "compare-*"))
    summary = seen(browser, run / "summary.html", tmp_path / "summary.png")
    assert summary["images"] and all(image["drawn"] for image in summary["images"]), summary["images"]
    assert summary["tables"] >= 10 and summary["rows"] > 50 and outside(summary["links"], run) == []

    report = write_report(compare_runs(REFERENCE, run), tmp_path / "compare")
    compared = seen(browser, report, tmp_path / "compare.png")
    assert [image["src"].rsplit("/", 1)[-1] for image in compared["images"]] == ["compare.png"]
    assert all(image["drawn"] for image in compared["images"]) and compared["tables"] >= 2 and outside(compared["links"], report.parent) == []

    site = tmp_path / "site"
    index = seen(browser, publish([run], site, progress=False), tmp_path / "site-index.png")
    assert index["links"] and outside(index["links"], site) == []
    page = seen(browser, site / "reference" / "index.html", tmp_path / "site-run.png")
    assert page["tables"] == 3 and outside(page["links"], site) == []
    for link in page["links"]:  # every page and file of the run, opened in the browser
        target = Path(urlsplit(link).path)
        assert target.is_file(), link
        if target.suffix == ".html":
            opened = seen(browser, target, tmp_path / f"{target.parent.name}-{target.stem}.png")
            assert all(image["drawn"] for image in opened["images"]) and outside(opened["links"], site) == []
