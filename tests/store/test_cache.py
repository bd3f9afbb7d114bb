"""The build cache: keyed entries made once, never trusted half-made, safe for two makers, listed and cleared."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from benchlib.store import cache
from benchlib.store.cache import ENTRY_FILE, artefact, clear, digest, entries, recording


def write(text: str) -> object:
    def make(folder: Path) -> None:
        (folder / "artefact.txt").write_text(text)

    return make


def test_a_miss_makes_the_entry_and_a_hit_reuses_it(tmp_path: Path) -> None:
    key = {"model": "gpt2", "seed": 0, "torch": "2.13.0"}
    made = artefact("weights", "gpt2-tiny", key, write("first"), root=tmp_path)
    assert not made.cached and made.made_s >= 0 and (made.path / "artefact.txt").read_text() == "first"
    assert made.path == tmp_path / "weights" / f"gpt2-tiny-{digest(key)}"
    found = artefact("weights", "gpt2-tiny", dict(reversed(key.items())), write("second"), root=tmp_path)  # same key, other order
    assert found.cached and found.path == made.path and found.made_s == made.made_s
    assert (found.path / "artefact.txt").read_text() == "first"


@pytest.mark.parametrize("changed", [{"seed": 1}, {"torch": "2.14.0"}, {"precision": "int8"}])
def test_keys_differ_when_a_version_a_precision_or_a_seed_differs(tmp_path: Path, changed: dict) -> None:
    key = {"model": "gpt2", "seed": 0, "torch": "2.13.0", "precision": "float32"}
    first = artefact("onnx", "gpt2-tiny", key, write("a"), root=tmp_path)
    other = artefact("onnx", "gpt2-tiny", {**key, **changed}, write("b"), root=tmp_path)
    assert not other.cached and other.path != first.path and (other.path / "artefact.txt").read_text() == "b"


def test_recording_collects_what_a_build_asked_for(tmp_path: Path) -> None:
    artefact("weights", "bert", {"n": 1}, write("w"), root=tmp_path)
    with recording() as asked:
        artefact("weights", "bert", {"n": 1}, write("w"), root=tmp_path)
        artefact("onnx", "bert", {"n": 1}, write("o"), root=tmp_path)
    assert [(a.path.parent.name, a.cached) for a in asked] == [("weights", True), ("onnx", False)]
    artefact("int8", "bert", {"n": 1}, write("i"), root=tmp_path)  # outside: not recorded
    assert len(asked) == 2


def die_while_making(root: str, started: str) -> None:
    def make(folder: Path) -> None:
        (folder / "model.onnx").write_text("half")
        Path(started).write_text("making")
        time.sleep(60)

    artefact("onnx", "gpt2-tiny", {"n": 1}, make, root=Path(root))


def test_an_entry_half_written_by_a_killed_process_is_never_used(tmp_path: Path) -> None:
    started = tmp_path / "started"
    maker = multiprocessing.get_context("spawn").Process(target=die_while_making, args=(str(tmp_path / "cache"), str(started)))
    maker.start()
    deadline = time.monotonic() + 60
    while not started.exists():
        assert time.monotonic() < deadline and maker.is_alive()
        time.sleep(0.02)
    os.kill(maker.pid, signal.SIGKILL)
    maker.join()
    [half] = [e for e in entries(tmp_path / "cache")]
    assert half.partial and (half.path / "model.onnx").read_text() == "half"

    made = artefact("onnx", "gpt2-tiny", {"n": 1}, write("whole"), root=tmp_path / "cache")  # the lock died with its holder
    assert not made.cached and (made.path / "artefact.txt").read_text() == "whole" and not (made.path / "model.onnx").exists()
    assert [e.path for e in clear(older_than_days=30, root=tmp_path / "cache")] == [half.path]  # half-made: removed at once
    assert [e.path for e in entries(tmp_path / "cache")] == [made.path]


def test_a_folder_without_its_entry_file_is_made_again(tmp_path: Path) -> None:
    made = artefact("onnx", "gpt2-tiny", {"n": 1}, write("whole"), root=tmp_path)
    (made.path / ENTRY_FILE).unlink()  # e.g. copied in by hand
    again = artefact("onnx", "gpt2-tiny", {"n": 1}, write("again"), root=tmp_path)
    assert not again.cached and (again.path / "artefact.txt").read_text() == "again"


def make_slowly(root: str, log: str, text: str) -> None:
    def make(folder: Path) -> None:
        with open(log, "a") as file:
            file.write(f"{text}\n")
        time.sleep(1.0)
        (folder / "artefact.txt").write_text(text)

    found = artefact("onnx", "gpt2-tiny", {"n": 1}, make, root=Path(root))
    with open(log, "a") as file:
        file.write(f"{text} got {(found.path / 'artefact.txt').read_text()} cached={found.cached}\n")


@pytest.mark.e2e
def test_two_processes_asking_for_one_entry_make_it_once(tmp_path: Path) -> None:
    log = tmp_path / "log"
    context = multiprocessing.get_context("spawn")
    makers = [context.Process(target=make_slowly, args=(str(tmp_path / "cache"), str(log), name)) for name in ("a", "b")]
    for maker in makers:
        maker.start()
    for maker in makers:
        maker.join(timeout=120)
    assert [maker.exitcode for maker in makers] == [0, 0]
    lines = log.read_text().splitlines()
    made = [line for line in lines if " got " not in line]
    assert len(made) == 1  # one maker made it; the other waited for the lock and found it
    assert sorted(line.split(" got ")[1] for line in lines if " got " in line) == [f"{made[0]} cached=False", f"{made[0]} cached=True"]


def test_cache_lists_and_clears_by_age(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli_in_process) -> None:
    monkeypatch.setenv(cache.CACHE_VARIABLE, str(tmp_path / "cache"))
    old = artefact("weights", "ctrl-full", {"n": 1}, write("x" * 5000), root=None)
    new = artefact("onnx", "gpt2-tiny", {"n": 1}, write("y"), root=None)
    inductor = cache.compiler_cache("inductor")
    (inductor / "fxgraph").mkdir(parents=True)
    (inductor / "fxgraph" / "graph").write_text("z" * 100)
    week_ago = time.time() - 7 * 86400
    os.utime(old.path / ENTRY_FILE, (week_ago, week_ago))

    code, out, _ = run_cli_in_process(["cache"])
    assert code == 0
    assert str(tmp_path / "cache") in out and "weights" in out and "ctrl-full" in out and "gpt2-tiny" in out and "inductor" in out
    assert "3 entries" in out

    code, out, _ = run_cli_in_process(["cache", "clear", "--older-than", "3"])
    assert code == 0 and "removed 1 entry" in out
    assert not old.path.exists() and new.path.exists() and inductor.exists()
    code, out, _ = run_cli_in_process(["cache", "clear"])
    assert code == 0 and "removed 2 entries" in out and entries() == []


def test_cache_clear_refuses_a_bad_age(run_cli_in_process) -> None:
    code, _, err = run_cli_in_process(["cache", "clear", "--older-than", "-1"])
    assert code == 2 and "--older-than" in err and err.count("\n") == 1
