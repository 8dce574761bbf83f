"""The embedded demo: synthetic 2-view data written to Zarr, then the whole cluster flow."""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_demo_input", "run_demo"]


def write_demo_input(path: str | Path, n_samples: int, *, chunk_rows: int = 25_000, random_state: int = 0) -> Path:
    """Write the demo input as an xarray-style Zarr dataset (views ``view0``, ``view1``; labels ``y``)."""
    import xarray as xr

    from .datasets import make_multiview_blobs

    views, y = make_multiview_blobs(n_samples, chunk_rows=chunk_rows, random_state=random_state,
                                    view_dims=(32, 32))
    ds = xr.Dataset({name: (("sample", f"feature_{name}"), v) for name, v in views.items()})
    ds["y"] = (("sample",), y)
    path = Path(path)
    ds.to_zarr(path, mode="w", consolidated=False, zarr_format=3)
    return path


def run_demo(workdir: str | Path, *, n_samples: int = 200_000, n_workers: int = 2, progress: bool = True) -> dict:
    """Generate the data (once), run ``cluster_flow`` from scratch, return its summary."""
    from mkdist.flows import cluster_flow

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    source = workdir / f"input-{n_samples}.zarr"
    if not (source / "zarr.json").exists():
        write_demo_input(source, n_samples)
    store = workdir / "store.zarr"
    if store.exists():
        # The demo's own store: start from scratch so every demo runs the whole job.
        import shutil

        shutil.rmtree(store)
    summary = cluster_flow(source=str(source), store=str(store), n_clusters=10, n_landmarks=1000,
                           random_state=0, n_workers=n_workers, overwrite=True, label_key="y",
                           progress=progress)
    summary["store"] = str(store)
    return summary
