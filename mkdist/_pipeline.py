"""The staged MKC-AE pipeline over a Zarr run store: landmarks -> model -> embedding -> k-means.

Each stage reads what earlier stages stored, writes its own output atomically and is
skipped when the store already holds it complete, so a crashed or interrupted run resumes
where it stopped.  The Prefect flows (``mkdist.flows``) call these stage functions one
task each; :func:`cluster` calls them in order.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._dask import embed_dask
from ._fit import fit_landmark_model
from ._io import load_views, views_fingerprint
from ._kernels import KernelSpec, kernel_blocks, preprocess_block, self_kernel
from ._kmeans import kmeans
from ._model import MKCModel, assign_chunk
from ._sampling import LANDMARK_METHODS, gather_rows, sample_landmark_indices
from ._validation import check_int, check_real, common_float_dtype
from .errors import InputValidationError

__all__ = [
    "RunConfig", "ClusterResult", "cluster", "open_run", "stage_landmarks", "stage_model",
    "stage_embedding", "stage_kmeans", "stage_metrics", "load_model", "assign", "STAGES",
]

logger = logging.getLogger("mkdist")

#: Stages of a run, in order.
STAGES = ("landmarks", "model", "embedding", "labels", "metrics")

#: Estimators reachable through ``method=``: "mkc" runs the staged MKC-AE pipeline (landmarks,
#: model, embedding, labels); the others fit with their own distributed ``fit`` in the model
#: stage and label every point with ``predict`` in the labels stage.
METHODS = {
    "mkc": "mkdist._estimator:MultipleKernelClustering",
    "nystrom": "mkdist._nystrom:NystromSpectralClustering",
    "rff-power": "mkdist._power_kmeans:RFFKernelPowerKMeans",
    "mv-rff-power": "mkdist._power_kmeans:MultiViewRFFPowerKMeans",
    "late-fusion": "mkdist._late_fusion:LateFusionClustering",
}


def estimator_class(method: str):
    """The estimator class behind a ``method=`` name."""
    import importlib

    if method not in METHODS:
        raise InputValidationError(f"unknown method {method!r}; choose one of {sorted(METHODS)}.")
    module, name = METHODS[method].split(":")
    return getattr(importlib.import_module(module), name)


@dataclasses.dataclass
class RunConfig:
    """Every parameter of a run (JSON-able; stored in the run store's root attributes).

    See :class:`mkdist.MultipleKernelClustering` for the model parameters.  ``n_init``,
    ``kmeans_max_iter`` and ``kmeans_tol`` drive the distributed k-means;
    ``write_kernel_blocks`` also stores every partial kernel block P_p (N x n x m values:
    24 GB in float32 for N = 1M, n = 1000, m = 6 -- off by default).
    """

    n_clusters: int
    kernels: Any = None
    n_landmarks: int | None = None
    landmark_method: str = "uniform"
    weights: str = "simplemkkm"
    center: bool = True
    normalize: str | None = "diagonal"
    normalize_embedding: bool = True
    scale: str | None = None
    max_iter: int = 200
    tol: float = 1e-4
    n_init: int = 3
    kmeans_max_iter: int = 100
    kmeans_tol: float = 1e-4
    dtype: str | None = None
    random_state: int | None = None
    write_kernel_blocks: bool = False
    method: str = "mkc"
    method_params: dict | None = None

    @classmethod
    def from_options(cls, **options: Any) -> RunConfig:
        """Build from keyword options, refusing unknown names with the list of valid ones."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - fields)
        if unknown:
            raise InputValidationError(f"unknown run parameters {unknown}; valid ones are {sorted(fields)}.")
        return cls(**options)

    def __post_init__(self):
        if isinstance(self.kernels, KernelSpec):
            self.kernels = [self.kernels]
        if isinstance(self.kernels, (list, tuple)):
            self.kernels = [dataclasses.asdict(k) if isinstance(k, KernelSpec) else
                            (dict(k) if isinstance(k, Mapping) else {"view": k[0], "kind": k[1]})
                            for k in self.kernels]

    def validate(self, n_samples: int) -> int:
        """Check every parameter against the input size; returns the landmark count."""
        from ._estimator import MultipleKernelClustering

        if self.method != "mkc":
            self.make_estimator()  # a clear error for an unknown method or parameter, now
            check_int("random_state", self.random_state, low=0, allow_none=True)
            return 0

        est = MultipleKernelClustering(
            self.n_clusters, kernels=self.kernels, n_landmarks=self.n_landmarks, weights=self.weights,
            center=self.center, normalize=self.normalize, normalize_embedding=self.normalize_embedding,
            scale=self.scale, max_iter=self.max_iter, tol=self.tol, n_init=self.n_init,
            kmeans_max_iter=self.kmeans_max_iter, dtype=self.dtype)
        n = est._validate_params(n_samples)
        if self.landmark_method not in LANDMARK_METHODS:
            raise InputValidationError(f"`landmark_method`={self.landmark_method!r}; choose one of {LANDMARK_METHODS}.")
        check_real("kmeans_tol", self.kmeans_tol, low=0.0)
        check_int("random_state", self.random_state, low=0, allow_none=True)
        return n

    def to_json(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def make_estimator(self):
        """The estimator of a non-"mkc" method, with n_clusters, random_state and method_params."""
        cls = estimator_class(self.method)
        params = dict(self.method_params or {})
        accepted = cls().get_params()
        unknown = sorted(set(params) - set(accepted))
        if unknown:
            raise InputValidationError(
                f"method {self.method!r} does not take {unknown}; its parameters are {sorted(accepted)}."
            )
        # Run-level options that several methods share keep their meaning for every method;
        # one that the method has no use for is refused rather than silently dropped.
        shared = {"kernels": self.kernels, "n_landmarks": self.n_landmarks, "scale": self.scale}
        for name, value in shared.items():
            if value is None:
                continue
            if name not in accepted:
                raise InputValidationError(
                    f"method {self.method!r} does not use `{name}`; its parameters are {sorted(accepted)}.")
            if name in params:
                raise InputValidationError(
                    f"`{name}` is given both as a run option and in method_params; give it once.")
            if name == "kernels" and isinstance(value, list):
                value = [KernelSpec(**k) if isinstance(k, Mapping) else k for k in value]
            params[name] = value
        if "random_state" in accepted:
            params.setdefault("random_state", self.random_state)
        return cls(n_clusters=self.n_clusters, **params)


@dataclasses.dataclass
class ClusterResult:
    """What :func:`cluster` returns.

    Attributes
    ----------
    labels : dask.array.Array of shape (N,)
        Cluster of every point, read lazily from the store.
    model : MKCModel or estimator
        The fitted MKC-AE model, centroids included (``method="mkc"``), or the fitted
        estimator of another method.
    store : RunStore
    timings : dict of str to float
        Seconds per stage of this call (0.0 for a stage resumed from the store).
    skipped : list of str
        Stages found complete in the store and not recomputed.
    metrics : dict
    """

    labels: Any
    model: MKCModel
    store: Any
    timings: dict[str, float]
    skipped: list[str]
    metrics: dict[str, Any]


# ----------------------------------------------------------------------------- helpers
def _persist(x, progress: bool = False):
    """Persist on the active scheduler and wait (with a progress bar if asked)."""
    import dask

    try:
        from distributed import get_client, progress as dprogress, wait

        client = get_client()
    except (ImportError, ValueError):
        client = None
    if client is not None:
        from distributed import futures_of

        x = client.persist(x)
        futures = futures_of(x)
        try:
            if progress:
                dprogress(x)
            wait(futures)
            failed = [f for f in futures if f.status == "error"]
            if failed:
                failed[0].result()  # raises the task's own exception
        except BaseException:
            # Release the failed keys: the scheduler would otherwise hand the same error to a
            # re-run (same input, same deterministic keys) instead of recomputing.
            client.cancel(futures, force=True)
            raise
        return x
    if progress:
        from dask.diagnostics import ProgressBar

        with ProgressBar():
            return dask.persist(x)[0]
    return dask.persist(x)[0]


def _json_attr(ds, key: str) -> Any:
    return json.loads(ds.attrs[key])


def _model_from_dataset(ds) -> MKCModel:
    state = {"attrs": _json_attr(ds, "mkdist_model"),
             "arrays": {k: np.asarray(ds[k].values) for k in ds.data_vars}}
    return MKCModel.from_state(state)


def _model_dataset(model: MKCModel, info: dict):
    import xarray as xr

    state = model.to_state()
    bad = [k for k in state["arrays"] if "/" in k]
    if bad:  # Zarr reads "a/b" as array b of a sub-group, which the model stage would then lose
        raise ValueError(f"model state array names must not contain '/': {bad}")
    ds = xr.Dataset({k: (dims, np.asarray(a)) for k, (dims, a) in state["arrays"].items()})
    ds.attrs["mkdist_model"] = json.dumps(state["attrs"])
    ds.attrs["mkdist_fit"] = json.dumps(info, default=float)
    ds.attrs["kernel_names"] = [k.name for k in model.kernels]
    return ds


def open_run(store_url: Any, views: Any, config: RunConfig, *, overwrite: bool = False):
    """Validate input and parameters, then create or reopen the run store (no data is read).

    A store that holds the same input (fingerprint) and the same parameters is reopened for
    resuming; one that holds a different run is refused unless ``overwrite=True``.
    ``config.random_state=None`` draws a seed -- or adopts the stored one when resuming.
    """
    from mkdist.storage import RunStore

    views = load_views(views)
    N = next(iter(views.values())).shape[0]
    config.validate(N)
    if config.method != "mkc":
        _estimator_input(views, config.method)  # a single-view method refuses several views now
        config.make_estimator()  # and unknown method_params, before the store is touched
    fingerprint = views_fingerprint(views)
    if config.random_state is None:
        try:
            existing = RunStore.open(store_url, mode="r")
            stored = existing.params.get("random_state")
            if existing.fingerprint == fingerprint and stored is not None:
                config.random_state = int(stored)
        except Exception:  # no store yet (or unreadable): a fresh seed below
            pass
        if config.random_state is None:
            config.random_state = int(np.random.SeedSequence().entropy % (2**31 - 1))
    params = config.to_json()
    return RunStore.create(store_url, fingerprint=fingerprint, params=params, overwrite=overwrite)


def _config(store) -> RunConfig:
    return RunConfig(**store.params)


def _store(store, mode: str = "r+"):
    """A RunStore from a RunStore or a URL (stage functions accept both, so flows pass URLs)."""
    from mkdist.storage import RunStore

    return store if hasattr(store, "read_stage") else RunStore.open(store, mode=mode)


# ----------------------------------------------------------------------------- stages
def stage_landmarks(store, views: Any) -> float:
    """Sample the landmarks reproducibly and store their rows.  Returns seconds (0 if resumed).

    ``store`` is a RunStore or its URL; ``views`` anything :func:`mkdist.load_views` reads.
    """
    import xarray as xr

    store = _store(store)
    config = _config(store)
    if store.is_complete("landmarks") or config.method != "mkc":
        return 0.0
    t0 = time.perf_counter()
    views = load_views(views)
    N = next(iter(views.values())).shape[0]
    n = config.validate(N)
    idx = sample_landmark_indices(views, n, method=config.landmark_method, random_state=config.random_state)
    rows = gather_rows(views, idx)
    ds = xr.Dataset({"landmark_index": (("landmark",), idx)})
    for name, r in rows.items():
        ds[f"X__{name}"] = (("landmark", f"feature__{name}"), r)
    ds.attrs["view_names"] = list(rows)
    ds.attrs["elapsed_s"] = time.perf_counter() - t0  # provenance: what this stage cost when it ran
    store.write_stage("landmarks", ds)
    return time.perf_counter() - t0


def stage_model(store, views: Any = None) -> float:
    """Fit the model: MKC-AE on the stored landmarks (on this process), or for another
    ``method`` its estimator's own (distributed) fit on ``views``."""
    store = _store(store)
    if store.is_complete("model"):
        return 0.0
    t0 = time.perf_counter()
    config = _config(store)
    if config.method != "mkc":
        est = config.make_estimator().fit(_estimator_input(load_views(views), config.method))
        ds = _state_dataset(est._model_state(), config.method)
        ds.attrs["elapsed_s"] = time.perf_counter() - t0
        store.write_stage("model", ds)
        return time.perf_counter() - t0
    ds = store.read_stage("landmarks")
    names = list(ds.attrs["view_names"])
    rows = {n: np.asarray(ds[f"X__{n}"].values) for n in names}
    idx = np.asarray(ds["landmark_index"].values)
    model, info = fit_landmark_model(
        rows, idx, n_clusters=config.n_clusters, kernels=config.kernels, weights=config.weights,
        center=config.center, normalize=config.normalize, normalize_embedding=config.normalize_embedding,
        scale=config.scale, max_iter=config.max_iter, tol=config.tol,
        dtype=config.dtype or str(common_float_dtype(rows)), random_state=config.random_state)
    ds = _model_dataset(model, info)
    ds.attrs["elapsed_s"] = time.perf_counter() - t0
    store.write_stage("model", ds)
    return time.perf_counter() - t0


def _state_dataset(state: dict, method: str):
    """A ``_model_state()`` as an xarray Dataset: arrays with named dims, attrs as JSON."""
    import xarray as xr

    bad = [k for k in state["arrays"] if "/" in k]
    if bad:  # Zarr reads "a/b" as array b of a sub-group, which the model stage would then lose
        raise ValueError(f"model state array names must not contain '/': {bad}")
    ds = xr.Dataset({k: (dims, np.asarray(a)) for k, (dims, a) in state["arrays"].items()})
    ds.attrs["mkdist_model"] = json.dumps(state["attrs"])
    ds.attrs["method"] = method
    return ds


def _estimator_input(views: dict, method: str):
    """Single-view estimators take the one view as an array, multi-view ones the dict."""
    if method == "nystrom" or method == "rff-power":
        if len(views) != 1:
            raise InputValidationError(
                f"method {method!r} clusters one view; got {len(views)} views {list(views)}: pass one, or "
                "use a multi-view method (mkc, mv-rff-power, late-fusion)."
            )
        return next(iter(views.values()))
    return views


def da_int32(labels):
    """Labels as int32, the store's label dtype (works lazily on Dask arrays)."""
    return labels.astype(np.int32)


def load_estimator(store):
    """The fitted estimator of a run store, rebuilt from arrays + JSON (any ``method``)."""
    store = _store(store, mode="r")
    ds = store.read_stage("model")
    method = ds.attrs.get("method", "mkc")
    if method == "mkc":
        from ._estimator import MultipleKernelClustering

        model = _model_from_dataset(ds)
        est = MultipleKernelClustering(n_clusters=int(store.params["n_clusters"]))
        est._set_model_attributes(model, json.loads(ds.attrs["mkdist_fit"]))
        est.cluster_centers_ = model.cluster_centers
        return est
    state = {"attrs": json.loads(ds.attrs["mkdist_model"]),
             "arrays": {k: (ds[k].dims, np.asarray(ds[k].values)) for k in ds.data_vars}}
    return estimator_class(method)._from_model_state(state)


def load_model(store) -> MKCModel:
    """The fitted model of a run store (arrays + JSON; centroids once k-means has run)."""
    ds = _store(store, mode="r").read_stage("model")
    if ds.attrs.get("method", "mkc") != "mkc":
        raise InputValidationError(f"the store holds a {ds.attrs['method']!r} model: use load_estimator().")
    return _model_from_dataset(ds)


def _kernel_blocks_chunk(*args):
    *blocks, model = args
    dtype = np.dtype(model.dtype)
    views = dict(zip(model.view_names, blocks))
    if model.scaling is not None:
        views = model.scaling.apply(views, dtype)
    out = np.empty((len(model.kernels), blocks[0].shape[0], model.n_landmarks), dtype=dtype)
    for p, block in kernel_blocks(views, model.landmarks, model.kernels, dtype=dtype):
        out[p] = preprocess_block(block, self_kernel(views, model.kernels[p], dtype=dtype), p, model.preprocessing)
    return out


def stage_embedding(store, views: Any, *, progress: bool = False) -> dict[str, float]:
    """H_N for every point across the cluster, written to the store (and P_p if configured).

    Returns ``{"embed_s": compute seconds, "write_s": store seconds}`` (zeros if resumed).
    """
    import dask
    import dask.array as da
    import xarray as xr

    store = _store(store)
    config = _config(store)
    if store.is_complete("embedding") or config.method != "mkc":
        return {"embed_s": 0.0, "write_s": 0.0}
    views = load_views(views)
    model = load_model(store)
    model.check_views(views)
    arrays = [views[n] for n in model.view_names]
    t0 = time.perf_counter()
    H = _persist(embed_dask(arrays, model), progress)
    t_embed = time.perf_counter() - t0
    t0 = time.perf_counter()
    store.write_stage("embedding", xr.Dataset({"embedding": (("sample", "component"), H)},
                                              attrs={"elapsed_s": t_embed}))
    if config.write_kernel_blocks and not store.is_complete("kernel_blocks"):
        model_key = dask.delayed(model, pure=True, traverse=False)
        P = da.map_blocks(_kernel_blocks_chunk, *arrays, model_key, new_axis=0,
                          chunks=((len(model.kernels),), arrays[0].chunks[0], (model.n_landmarks,)),
                          dtype=np.dtype(model.dtype))
        ds = xr.Dataset({"P": (("kernel", "sample", "landmark"), P)})
        ds.attrs["kernel_names"] = [k.name for k in model.kernels]
        store.write_stage("kernel_blocks", ds)
    t_write = time.perf_counter() - t0
    del H
    return {"embed_s": t_embed, "write_s": t_write}


def stage_kmeans(store, views: Any = None, *, progress: bool = False) -> dict[str, float]:
    """Distributed k-means on the stored embedding; centroids join the model, labels are stored.
    For another ``method`` the stored estimator labels ``views`` with ``predict``.

    Returns ``{"kmeans_s", "write_s"}`` (zeros if resumed).
    """
    import xarray as xr

    store = _store(store)
    if store.is_complete("labels"):
        return {"kmeans_s": 0.0, "write_s": 0.0}
    config = _config(store)
    if config.method != "mkc":
        t0 = time.perf_counter()
        est = load_estimator(store)
        labels = _persist(da_int32(est.predict(_estimator_input(load_views(views), config.method))), progress)
        t_pred = time.perf_counter() - t0
        t0 = time.perf_counter()
        store.write_stage("labels", xr.Dataset({"labels": (("sample",), labels)}, attrs={"elapsed_s": t_pred}))
        return {"kmeans_s": t_pred, "write_s": time.perf_counter() - t0}
    model_ds = store.read_stage("model")
    model = _model_from_dataset(model_ds)
    H = store.read_stage("embedding")["embedding"].data
    t0 = time.perf_counter()
    H = _persist(H, progress)
    fit = json.loads(model_ds.attrs["mkdist_fit"])
    if model.cluster_centers is None:
        result = kmeans(H, config.n_clusters, n_init=config.n_init, max_iter=config.kmeans_max_iter,
                        tol=config.kmeans_tol, random_state=config.random_state)
        model.cluster_centers = result.centers
        fit["kmeans"] = {"inertia": result.inertia, "n_iter": result.n_iter}
        # The model stage is replaced atomically by one that also holds the centroids, so a
        # crash after this line resumes with labels only (no second k-means).
        store.write_stage("model", _model_dataset(model, fit), overwrite=True)
    labels = _persist(H.map_blocks(assign_chunk_rows, model.cluster_centers.astype(H.dtype),
                                   drop_axis=1, dtype=np.int32), progress)
    t_kmeans = time.perf_counter() - t0
    t0 = time.perf_counter()
    ds = xr.Dataset({"labels": (("sample",), labels)})
    ds.attrs["inertia"] = float(fit.get("kmeans", {}).get("inertia", float("nan")))
    ds.attrs["elapsed_s"] = t_kmeans
    store.write_stage("labels", ds)
    return {"kmeans_s": t_kmeans, "write_s": time.perf_counter() - t0}


def assign_chunk_rows(H: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Nearest centre of every row (block first, for ``map_blocks``), int32."""
    return assign_chunk(centers, H).astype(np.int32)


def stage_metrics(store, *, timings: Mapping[str, float] | None = None, y_true=None) -> dict[str, Any]:
    """Cluster sizes, fit diagnostics, timings (and scores when ``y_true`` is given), stored."""
    import xarray as xr

    from .metrics import clustering_scores

    store = _store(store)
    config = _config(store)
    import dask.array as da

    labels = store.read_stage("labels")["labels"].data
    # Sizes by a distributed bincount; labels reach the client only to score them.
    sizes = da.bincount(labels, minlength=config.n_clusters).compute()
    scores = clustering_scores(np.asarray(y_true), np.asarray(labels.compute())) if y_true is not None else None
    summary = {
        "method": config.method,
        "N": int(labels.shape[0]),
        "n_clusters": config.n_clusters,
        **model_summary(store, config.method),
        "cluster_sizes": [int(s) for s in sizes],
        "timings": dict(timings or {}),
        "scores": scores,
    }
    ds = xr.Dataset({"cluster_sizes": (("cluster",), np.asarray(sizes, dtype=np.int64))})
    ds.attrs["summary"] = json.dumps(summary, default=float)
    store.write_stage("metrics", ds, overwrite=True)
    store.update_attrs(summary=summary)
    return summary


def model_summary(store, method: str) -> dict[str, Any]:
    """What the metrics stage and ``mkdist inspect`` report about a stored model (JSON-able).

    The same keys for every method where they apply: ``estimator``, ``views``,
    ``n_landmarks`` (landmarks or anchors), ``kernel_names``, the learned weights
    (``kernel_weights`` for mkc, ``view_weights``/``filter_weights`` for the others),
    ``diagnostics``, ``n_iter`` and ``pep`` (see :func:`mkdist._report.pep_overview`).
    """
    from ._report import pep_overview

    store = _store(store, mode="r")
    model_ds = store.read_stage("model")
    if method == "mkc":
        fit = json.loads(model_ds.attrs["mkdist_fit"])
        attrs = json.loads(model_ds.attrs["mkdist_model"])
        return {
            "estimator": "MultipleKernelClustering",
            "views": attrs.get("view_names"),
            "n_landmarks": int(model_ds.sizes["landmark"]),
            "kernel_names": attrs["kernel_names"],
            "kernel_weights": [float(w) for w in model_ds["kernel_weights"].values],
            "diagnostics": fit["diagnostics"],
            "simplemkkm_n_iter": fit["n_iter"],
            "n_iter": fit["n_iter"],
            "kmeans": fit.get("kmeans"),
            "pep": pep_overview(fit["diagnostics"], attrs["kernel_names"]),
        }
    est = load_estimator(store)
    attrs = json.loads(model_ds.attrs["mkdist_model"])
    views = list(getattr(est, "view_names_", None) or attrs.get("view_names") or ["view0"])
    if hasattr(est, "model_"):  # late fusion: one name per base kernel
        kernel_names = [k.name for k in est.model_.kernels]
    elif hasattr(est, "rff_frequencies_"):
        kernel_names = [f"{v}:rff-gaussian(sigma={s:.4g})" for v, s in zip(views, est.bandwidths_)]
    else:
        kernel_names = [f"gaussian(sigma={est.sigma_:.4g})"] if hasattr(est, "sigma_") else None
    out: dict[str, Any] = {"estimator": type(est).__name__, "views": views, "kernel_names": kernel_names,
                           "n_landmarks": int(model_ds.sizes.get("landmark", model_ds.sizes.get("anchor", 0)))
                           or None,
                           "n_iter": int(est.n_iter_) if hasattr(est, "n_iter_") else None,
                           # embedding width: D frequencies (RFF), k (Nystrom), m x d (late fusion)
                           "n_components": int(getattr(est, "n_components_", 0)
                                               or model_ds.sizes.get("component", 0)) or None}
    for attr in ("view_weights_", "filter_weights_", "kernel_weights_"):
        if hasattr(est, attr):
            out[attr.rstrip("_")] = [float(w) for w in np.ravel(getattr(est, attr))]
    diag = getattr(est, "diagnostics_", None)
    if diag:
        out["diagnostics"] = json.loads(json.dumps({k: v for k, v in diag.items() if k != "timings"},
                                                   default=lambda o: np.asarray(o).tolist()))
    out["pep"] = pep_overview(out.get("diagnostics"), kernel_names, t=int(store.params.get("n_clusters", 0)) or None)
    return out


# ----------------------------------------------------------------------------- entry points
def cluster(views: Any, store: Any, n_clusters: int, kernels: Any = None, n_landmarks: int | None = None,
            random_state: int | None = None, *, overwrite: bool = False, progress: bool = False,
            y_true=None, chunk_rows: int | None = None, **params) -> ClusterResult:
    """Run the staged MKC-AE pipeline on the active Dask scheduler, persisting every stage.

    Parameters
    ----------
    views : array, list/dict of arrays, xarray.Dataset or path/URL
        Anything :func:`mkdist.load_views` reads (NumPy, Dask, xarray, Zarr, Parquet, .npy/.npz).
    store : str or Path
        Run store location (local directory or fsspec URL).  Reused for resuming when it
        holds this input and these parameters; otherwise refused unless ``overwrite``.
    n_clusters, kernels, n_landmarks, random_state
        As in :class:`mkdist.MultipleKernelClustering`.
    overwrite : bool, default=False
        Replace a store that holds a different run.
    progress : bool, default=False
        Show Dask progress bars for the embedding and k-means passes.
    y_true : array-like of shape (N,), optional
        Ground truth; adds ACC/NMI/ARI/purity to the stored metrics.
    chunk_rows : int, optional
        Row chunking for NumPy input (see :func:`mkdist.load_views`).
    **params
        Any other :class:`RunConfig` field (``landmark_method``, ``weights``, ``scale``,
        ``n_init``, ``write_kernel_blocks``, ...).

    Returns
    -------
    ClusterResult

    Examples
    --------
    >>> from distributed import Client, LocalCluster            # doctest: +SKIP
    >>> client = Client(LocalCluster(n_workers=2))               # doctest: +SKIP
    >>> result = mkdist.cluster([X1, X2], "runs/demo.zarr", 10)  # doctest: +SKIP
    >>> result.labels[:10].compute(), result.timings             # doctest: +SKIP
    """
    config = RunConfig.from_options(n_clusters=n_clusters, kernels=kernels, n_landmarks=n_landmarks,
                                    random_state=random_state, **params)
    vs = load_views(views, chunk_rows=chunk_rows)
    run = open_run(store, vs, config, overwrite=overwrite)
    run.clean_partials()
    before = run.stage_status()
    timings: dict[str, float] = {}
    t_all = time.perf_counter()
    timings["sample_s"] = stage_landmarks(run, vs)
    timings["fit_s"] = stage_model(run, vs)
    emb = stage_embedding(run, vs, progress=progress)
    km = stage_kmeans(run, vs, progress=progress)
    timings.update(embed_s=emb["embed_s"], kmeans_s=km["kmeans_s"], write_s=emb["write_s"] + km["write_s"])
    timings["total_s"] = time.perf_counter() - t_all
    metrics = stage_metrics(run, timings=timings, y_true=y_true)
    skipped = [s for s in ("landmarks", "model", "embedding", "labels") if before.get(s) == "complete"]
    model = load_model(run) if config.method == "mkc" else load_estimator(run)
    return ClusterResult(labels=run.read_stage("labels")["labels"].data, model=model, store=run,
                         timings=timings, skipped=skipped, metrics=metrics)


def assign(model_store: Any, source: Any, output: Any, *, overwrite: bool = False,
           progress: bool = False, chunk_rows: int | None = None) -> Any:
    """Label new points with a stored model, no refit; labels go to a new store.

    Parameters
    ----------
    model_store : str, Path or RunStore
        A run store whose ``model`` stage holds centroids (a finished run).
    source : array, list/dict of arrays, xarray.Dataset or path/URL
        The new points, with the same views and features as the training data.
    output : str or Path
        Store for the result: stage ``labels`` (sample,) and the embedding (sample, component).

    Returns
    -------
    RunStore
        The output store.
    """
    import xarray as xr

    from mkdist.storage import RunStore

    src = _store(model_store, mode="r")
    method = src.read_stage("model").attrs.get("method", "mkc")
    vs = load_views(source, chunk_rows=chunk_rows)
    if method == "mkc":
        model = load_model(src)
        if model.cluster_centers is None:
            raise InputValidationError(f"the model in {src.url} has no centroids yet: finish its run first.")
        model.check_views(vs)
    else:
        est = load_estimator(src)
    out = RunStore.create(output, fingerprint=views_fingerprint(vs),
                          params={"model_store": str(src.url), "model_fingerprint": src.fingerprint},
                          overwrite=overwrite)
    if out.is_complete("labels"):
        return out
    if method == "mkc":
        H = embed_dask([vs[n] for n in model.view_names], model)
        lazy = H.map_blocks(assign_chunk_rows, model.cluster_centers.astype(H.dtype), drop_axis=1, dtype=np.int32)
    else:
        lazy = da_int32(est.predict(_estimator_input(vs, method)))
    labels = _persist(lazy, progress)
    out.write_stage("labels", xr.Dataset({"labels": (("sample",), labels)}))
    return out


def fit_estimator_dask(est, views: dict):
    """``MultipleKernelClustering.fit`` for Dask views: the same stages, without a store."""
    N = next(iter(views.values())).shape[0]
    n = est._validate_params(N)
    arrays = load_views(views)
    from sklearn.utils import check_random_state

    # Same random stream as the NumPy path, so the same seed picks the same landmarks.
    rng = check_random_state(est.random_state)
    idx = sample_landmark_indices(arrays, n, random_state=rng)
    rows = gather_rows(arrays, idx)
    est._fit_landmarks(arrays, rows, idx, rng)
    H = _persist(embed_dask([arrays[k] for k in est.model_.view_names], est.model_))
    result = kmeans(H, est.n_clusters, n_init=est.n_init, max_iter=est.kmeans_max_iter,
                    random_state=rng.randint(2**31 - 1))
    est.model_.cluster_centers = result.centers
    est.cluster_centers_ = result.centers
    est.labels_ = result.labels
    est.inertia_ = result.inertia
    return est

