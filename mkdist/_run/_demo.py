"""The embedded demo: synthetic 2-view data written to Zarr, then the whole run on a local cluster."""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_demo_input", "run_demo"]


def write_demo_input(path: str | Path, n_samples: int, *, chunk_rows: int = 25_000, random_state: int = 0) -> Path:
    """Write the demo input as an xarray-style Zarr dataset (views ``view0``, ``view1``; labels ``y``)."""
    import xarray as xr

    from ..datasets import make_multiview_blobs

    views, y = make_multiview_blobs(n_samples, chunk_rows=chunk_rows, random_state=random_state,
                                    view_dims=(32, 32))
    ds = xr.Dataset({name: (("sample", f"feature_{name}"), v) for name, v in views.items()})
    ds["y"] = (("sample",), y)
    path = Path(path)
    ds.to_zarr(path, mode="w", consolidated=False, zarr_format=3)
    return path


def run_demo(workdir: str | Path, *, n_samples: int = 200_000, n_workers: int = 2, progress: bool = True,
             echo=None) -> dict:
    """Generate the data (once), run the whole pipeline from scratch on a LocalCluster (the
    run driver of ``mkdist run``), return its summary."""
    import shutil

    from .._pipeline._config import RunConfig
    from .._pipeline._dask_runtime import run_scheduler
    from .._pipeline._io import InputSource
    from ._driver import drive_run, plan_run

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    source = workdir / f"input-{n_samples}.zarr"
    if not (source / "zarr.json").exists():
        write_demo_input(source, n_samples)
    store = workdir / "store.zarr"
    # The demo's own store: start from scratch so every demo runs the whole job.
    shutil.rmtree(store, ignore_errors=True)
    config = RunConfig.from_options(n_clusters=10, n_landmarks=1000, random_state=0)
    plan = plan_run(InputSource(str(source), label_column="y"), str(store), config, report=True)
    with run_scheduler(None, n_workers, n_rows=n_samples, echo=echo):
        result = drive_run(plan, progress=progress, label_key="y", owner="mkdist demo", echo=echo)
    summary = dict(result.metrics)
    summary["store"] = str(store)
    return summary
