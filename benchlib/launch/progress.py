"""A progress bar over the cells of one environment, fed by the rows its kernel writes."""

from __future__ import annotations

from collections.abc import Callable

from tqdm import tqdm

from benchlib.config.jobs import EnvironmentJob
from benchlib.launch.polling import Poller
from benchlib.store.results import round_rows

Postfix = Callable[[list[dict[str, str]]], str]  # words after the bar, from the round's rows so far (trials included)


class ResultsProgress:
    """A progress bar over the cells of one environment, fed by the rows its kernel writes (read every `interval_s`);
    `postfix` (e.g. what is left of the run) is shown after it and updated as rows, a server's trials included, end."""

    def __init__(self, job: EnvironmentJob, enabled: bool, interval_s: float = 1.0, postfix: Postfix | None = None) -> None:
        self._job, self._postfix, self._rows = job, postfix, -1
        self._bar = tqdm(total=job.cell_count, desc=job.name, unit="cell", disable=not enabled, dynamic_ncols=True)
        self._poller = Poller(self._refresh, interval_s)

    def _refresh(self) -> None:
        rows = round_rows(self._job.output_dir, self._job.params.current_round)
        if len(rows) == self._rows:
            return
        self._rows = len(rows)
        cells = min(sum(1 for row in rows if not row["trial"]), self._bar.total)
        if self._postfix is not None:
            self._bar.set_postfix_str(self._postfix(rows), refresh=False)
        self._bar.update(cells - self._bar.n)
        self._bar.refresh()

    def __enter__(self) -> ResultsProgress:
        self._refresh()
        self._poller.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._poller.__exit__(*exc)
        self._bar.close()
