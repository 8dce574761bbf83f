"""What a command prints: notes on stderr beside the progress, where a run computes, and the
run's result (its summary or JSON, and one line saying what it did and where)."""

from __future__ import annotations

import json

import click

from mkdist._pipeline._dask_runtime import in_process_max_rows


def _note(text: str) -> None:
    """A line about the run (input, resume) on stderr, beside the progress."""
    click.echo(text, err=True)


def _where_line(scheduler, n_rows: int) -> str:
    """Where a run computes, and why when it is this process."""
    if scheduler.kind != "in-process":
        return scheduler.describe()
    return (f"{scheduler.describe()}: {n_rows:,} rows, at most {in_process_max_rows():,} "
            "(MKDIST_IN_PROCESS_MAX_ROWS), so no Dask cluster to start")


def _print_result(summary: dict, store: str, as_json: bool, quiet: bool, seconds: float,
                  nothing_to_do: bool = False) -> None:
    """The run's result: its summary (or JSON), and one line saying what it did and where."""
    if as_json:
        click.echo(json.dumps(summary, default=float, indent=2))
        return
    line = _result_line(summary, store, seconds, nothing_to_do)
    if not quiet:
        from mkdist.pipeline import summary_markdown

        click.echo(summary_markdown(summary, store))
    click.echo(line)


def _result_line(summary: dict, store: str, seconds: float, nothing_to_do: bool) -> str:
    resumed = summary.get("resumed_stages") or []
    if nothing_to_do:
        what = f"nothing to do: {store} already holds this run"
    elif resumed and not summary.get("computed_stages"):
        what = f"{store} already holds this run; wrote what was missing in {seconds:.1f} s"
    else:
        from mkdist._core._nclusters import k_verdict

        choice = summary.get("n_clusters_choice") or {}
        chosen = f"; {k_verdict(choice)}" if choice.get("chosen_by_fit") else ""
        what = (f"clustered {int(summary.get('N') or 0):,} rows into {summary.get('n_clusters')} clusters "
                f"({summary.get('method')}) in {seconds:.1f} s{chosen}; store {store}")
        if resumed:
            what += f" (resumed after {resumed[-1]})"
    missing = summary.get("missing") or {}
    if missing.get("rows") is not None:
        what += f"; {missing['rows']:,} rows with missing cells clustered ({missing['cells']:,} cells imputed)"
    scores = summary.get("scores") or {}
    if scores.get("acc") is not None:
        what += f"; ACC {scores['acc']:.4f}"
    return what + _outputs_said(summary)


def _outputs_said(summary: dict) -> str:
    """"; labels PATH; profiles PATH; report PATH" for the outputs a command wrote (a run's or
    an assignment's result line)."""
    return "".join(f"; {name} {summary[key]}" for key, name in
                   (("labels_out", "labels"), ("profiles_out", "profiles"), ("report", "report")) if summary.get(key))
