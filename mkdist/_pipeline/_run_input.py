"""A run's input as its stages read it: what the store records of the input, when the
input is scanned, and the stored fill of missing cells (the imputation stage) applied to the views."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._core._cluster import compute
from .._core._missing import Imputer, count_missing, fill_views
from ..errors import MkdistError
from ._config import RunConfig
from ._context import IMPUTATION_STAGE, RunContext, read_imputer
from ._io import OpenedInput
from ._run_store import as_store, stage_plan


def _scan_in_embedding(config: RunConfig, missing: str) -> bool:
    """Whether a run's input scan rides on its embedding's pass (issue 34: the input read once
    for the embedding): a landmark-embedding plan whose rows are not imputed (the fill needs
    the scan's statistics before any row is embedded)."""
    return missing == "refuse" and {"landmarks", "embedding"} <= set(stage_plan(config))


def _scan_pending(store) -> bool:
    """The run's input scan is still to be done, by its embedding's pass."""
    return "input_stats" not in store.attrs and (store.attrs.get("missing") or {}).get("mode") != "impute"


def _write_imputation(run, imputer: Imputer) -> None:
    import xarray as xr

    ds = xr.Dataset(attrs={"view_names": imputer.view_names, "n_neighbors": imputer.n_neighbors})
    for name, values in imputer.arrays().items():
        view = name.split("__", 1)[1]
        ds[name] = (("donor", f"feature__{view}") if name.startswith("donors__") else (f"feature__{view}",), values)
    run.write_stage(IMPUTATION_STAGE, ds, overwrite=True, compute=compute)


def _missing_record(stats: Mapping[str, dict], imputer: Imputer, feature_names) -> dict[str, Any]:
    """Root attribute ``missing`` of an imputing run: the cells missing per column, the fill."""
    columns = {}
    for view, st in stats.items():
        names = (feature_names or {}).get(view) or [f"{view}[{j}]" for j in range(st["n_features"])]
        columns.update({str(n): int(c) for n, c in zip(names, st.get("missing") or []) if c})
    return {"mode": "impute", "cells": int(sum(columns.values())), "columns": columns,
            "fill": f"mean of the {imputer.n_neighbors} nearest of {imputer.n_donors} donor rows"
            if imputer.n_neighbors else "column mean"}


def run_imputer(store) -> Imputer | None:
    """How a run fills missing cells (its ``imputation`` stage), or None when it does not impute
    (read from the store each call; a run's stages share their context's: ``RunContext.imputer``).

    Raises
    ------
    StoreNotFoundError, DamagedStageError
        The run imputes but its ``imputation`` stage is gone or damaged (re-running the run
        scans its input again and rewrites it).
    """
    return read_imputer(as_store(store, mode="r"))


def _stage_views(ctx: RunContext):
    """The views a stage hands the estimator, and the missing cells per row.

    As read when the run does not impute (counts None); else every view filled with the
    run's stored fill, lazily: the fill runs in the tasks that consume the rows (no extra
    pass), and the counts (int32, shape (N,)) share the rows' reads.
    """
    views = ctx.views
    imputer = ctx.imputer()
    if imputer is None:
        return views, None
    return fill_views(views, imputer), count_missing(views, table_cells(ctx.store))


def table_cells(store) -> dict[str, np.ndarray] | None:
    """Per categorical view of the run's table, which of its features stand for one cell (the
    first indicator of each column), so that a missing category counts as one cell."""
    record = store.attrs.get("input") or {}
    categories = record.get("categories")
    if not categories:
        return None
    return {view: np.concatenate([np.arange(len(categories[c])) == 0 for c in cols])
            for view, cols in record["views"].items() if cols and all(c in categories for c in cols)}


def input_record(opened: OpenedInput) -> dict[str, Any]:
    """What a run store keeps of its input: location, kind, views (a table's columns per view),
    id and label columns."""
    record = {"location": opened.source.location, "kind": opened.kind, "n_rows": opened.n_rows,
              "id_column": opened.source.id_column, "label_column": opened.source.label_column}
    if opened.plan is not None:
        record["views"] = opened.plan.views
        if opened.plan.categories:
            # The vocabulary of every categorical column: a new batch is encoded with it.
            record["categories"] = opened.plan.categories
    return record


def like_model(source: Any, model) -> Any:
    """A new batch read as the model's input was: a table without declared views gets the
    model's columns per view, and the model's id column when it has that column."""
    from ._io import InputSource, as_input

    source = as_input(source)
    record = model.attrs.get("input") or {}
    if not isinstance(source, InputSource) or not record.get("views") or not source.is_table:
        return source
    changes = {}
    if source.views is None:
        changes["views"] = record["views"]
    if record.get("categories") and source.categories is None:
        changes["categories"] = record["categories"]
    if source.id_column is None and record.get("id_column"):
        from ._tables import ParquetTable

        if record["id_column"] in ParquetTable.open(source.location, source.storage_options).columns:
            changes["id_column"] = record["id_column"]
    return dataclasses.replace(source, **changes) if changes else source


def _described(store) -> dict[str, Any]:
    """What a refusal names a run's columns and rows by (a table's column names per view, its
    row ids), from the input the store records."""
    record = store.attrs.get("input") or {}
    out: dict[str, Any] = {"feature_names": record["views"]} if record.get("views") else {}
    if record.get("kind") == "table" and record.get("id_column"):
        def describe_row(row: int) -> str:  # on the error path only: opens the table again
            from ._io import as_input

            try:
                opened = as_input(record["location"], views=record["views"], id_column=record["id_column"]).open()
            except (MkdistError, OSError):
                return f"row {row}"
            return opened.describe_row(row)

        out["describe_row"] = describe_row
    return out
