"""Progress of a run on stderr: one line per stage, labelled, with rows and rows/s.

A run's passes over the rows are Dask computations of one task per row chunk, so the share of
finished tasks is the share of rows done.  The lines are drawn by Dask's own progress
machinery (``distributed``'s ``TextProgressBar`` on a cluster, ``dask.diagnostics``'
``ProgressBar`` on the local schedulers), re-labelled: ``embedding: 45% · 450,000 of
1,000,000 rows · 210,000 rows/s · 2.1 s``.  On a terminal the line is redrawn in place; in a
log (stderr not a terminal) only the stage's last line is written.
"""

from __future__ import annotations

import sys
import time

__all__ = ["rows_line", "track", "stage_line"]


def rows_line(stage: str, frac: float, n_rows: int, elapsed: float) -> str:
    """``stage: 45% · 450,000 of 1,000,000 rows · 210,000 rows/s · 2.1 s``."""
    done = int(round(frac * n_rows))
    rate = f" · {done / elapsed:,.0f} rows/s" if elapsed > 0 and done else ""
    return f"{stage}: {int(100 * frac)}% · {done:,} of {n_rows:,} rows{rate} · {elapsed:.1f} s"


def stage_line(text: str, *, final: bool) -> None:
    """Write a progress line: redrawn in place on a terminal, only the final one in a log."""
    tty = sys.stderr.isatty()
    if not final and not tty:
        return
    sys.stderr.write(("\r\33[2K" if tty else "") + text + ("\n" if final else ""))
    sys.stderr.flush()


def track(collection, stage: str, n_rows: int) -> None:
    """Block until ``collection`` (persisted futures on a cluster) is done, drawing its progress."""
    from distributed import futures_of
    from distributed.diagnostics.progressbar import TextProgressBar

    class RowsBar(TextProgressBar):
        def _draw_bar(self, remaining, all, **kwargs):
            stage_line(rows_line(stage, (1 - remaining / all) if all else 1.0, n_rows, self.elapsed), final=False)

        def _draw_stop(self, remaining=0, all=0, status="finished", **kwargs):
            frac = (1 - remaining / all) if all else 1.0
            if status == "finished":
                frac = 1.0
            stage_line(rows_line(stage, frac, n_rows, time.perf_counter() - t0) + (
                "" if status == "finished" else f" ({status})"), final=True)

    t0 = time.perf_counter()
    RowsBar(futures_of(collection), interval="250ms")


class LocalRowsBar:
    """The same line for computations on Dask's local schedulers (no cluster)."""

    def __init__(self, stage: str, n_rows: int):
        from dask.diagnostics import ProgressBar

        outer = self

        class Bar(ProgressBar):
            def _draw_bar(self, frac, elapsed):
                outer.frac = frac
                stage_line(rows_line(stage, frac, n_rows, elapsed), final=False)

        import io

        # Our _draw_bar writes the lines; the base class's own newline goes nowhere.
        self.frac, self._bar, self._t0 = 0.0, Bar(dt=0.25, out=io.StringIO()), 0.0
        self.stage, self.n_rows = stage, n_rows

    def __enter__(self):
        self._t0 = time.perf_counter()
        self._bar.__enter__()
        return self

    def __exit__(self, *exc):
        self._bar.__exit__(*exc)
        stage_line(rows_line(self.stage, 1.0 if exc[0] is None else self.frac, self.n_rows,
                             time.perf_counter() - self._t0), final=True)
