"""A progress bar over the cells of one environment, fed by the rows its kernel writes."""

from __future__ import annotations

from tqdm import tqdm

from benchlib.config.jobs import EnvironmentJob
from benchlib.launch.polling import Poller
from benchlib.store.results import rows_written


class ResultsProgress:
    """A progress bar over the cells of one environment, fed by the rows its kernel writes (read every `interval_s`)."""

    def __init__(self, job: EnvironmentJob, enabled: bool, interval_s: float = 1.0) -> None:
        self._job = job
        self._bar = tqdm(total=job.cell_count, desc=job.name, unit="cell", disable=not enabled, dynamic_ncols=True)
        self._poller = Poller(self._refresh, interval_s)

    def _refresh(self) -> None:
        rows = min(rows_written(self._job.output_dir, self._job.params.current_round), self._bar.total)
        if rows != self._bar.n:
            self._bar.update(rows - self._bar.n)

    def __enter__(self) -> ResultsProgress:
        self._refresh()
        self._poller.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._poller.__exit__(*exc)
        self._bar.close()
