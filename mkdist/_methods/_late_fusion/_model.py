"""The fitted GMLKM model: arrays + JSON, and the out-of-sample rows of new points.

A new point's base embeddings h_p(x) (MKC-AE), its adaptive-neighbour weights to the
landmarks in every H_i space and the same filter polynomial give its row of H~
(:meth:`LateFusionModel.transform_rows`; derivation: ``docs/algorithms.md``, "Late fusion").
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse

from ..._core._blocks import cache_block_rows
from ..._core._distances import nearest_center
from ..._core._graph import Graph, NeighborSpaces, adaptive_neighbor_weights, filter_basis
from ..._core._kernel_specs import FittedKernel
from ..._core._kernels import KernelPreprocessing, ProjectedKernels, kernel_model_from_state, kernel_model_state
from ..._core._linalg import unit_rows
from ..._core._scaling import FeatureScaling
from ..._core._state import StateArrays
from ._fusion import apply_filters, partition_copies

__all__ = ["LateFusionModel", "embed_rows", "label_rows"]


def _fingerprint_constants(view_index: int, n_features: int) -> np.ndarray:
    """Fixed odd 64-bit multipliers for the row fingerprint of one view."""
    rng = np.random.default_rng([0x6D6B64, view_index, n_features])
    return rng.integers(0, 2**63, size=n_features, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def _fingerprints(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """A 64-bit fingerprint of every row of the (scaled, float64) view blocks, shape (b,).

    sum_j bits(x_j) * c_j modulo 2^64 over the IEEE bit patterns: integer arithmetic, so the
    value does not depend on the memory layout or summation order (a float dot product
    would).  ``+ 0.0`` maps -0.0 to 0.0, which are equal values with different bits.
    """
    b = blocks[0].shape[0]
    acc = np.zeros(b, dtype=np.uint64)
    for v, X in enumerate(blocks):
        bits = np.ascontiguousarray(np.asarray(X, dtype=np.float64) + 0.0).view(np.uint64)
        acc += (bits * _fingerprint_constants(v, X.shape[1])[None, :]).sum(axis=1, dtype=np.uint64)
    return acc



@dataclasses.dataclass
class _OutOfSample:
    """The out-of-sample structures of a LateFusionModel (``LateFusionModel.oos``)."""

    bases: dict[int, np.ndarray]    # filter i -> B_i (n, D), for the filters weighted > 0
    projected: ProjectedKernels     # kernel rows times H_p Lambda_p^-1
    filters: list[int]              # the filters a new point enters
    neighbors: NeighborSpaces       # the landmarks in those filters' H_i spaces
    filter_scale: np.ndarray        # (len(filters), n): mu_i / sqrt(deg_i)
    stacked_bases: np.ndarray       # (len(filters) n, D) in ``dtype``


@dataclasses.dataclass
class LateFusionModel:
    """Everything needed to place a new point: arrays + JSON, no pickle (see ``state``).

    Attributes
    ----------
    view_names : list of str
    n_features : dict of str to int
    landmarks : dict of str to ndarray of shape (n, d_v)
        Landmark rows, scaled, float64.
    landmark_indices : ndarray of shape (n,)
    scaling : FeatureScaling or None
    kernels : list of FittedKernel, length m
        All base kernels (dropped ones included).
    kept : ndarray of shape (m',)
        Indices (into ``kernels``) of the base kernels in the fusion.
    preprocessing : KernelPreprocessing
        Centring / normalisation statistics of all m kernels.
    partitions : ndarray of shape (n, D)
        [H_1, ..., H_m'], the kept base partitions side by side (D = sum_p d_p columns).
    column_kernel : ndarray of shape (D,)
        Position in ``kept`` of the partition each column belongs to.
    eigenvalues : ndarray of shape (D,)
        Eigenvalue of every column's eigenvector (for h_p(x) = P_p H_p Lambda_p^-1).
    view_weights, filter_weights : ndarray of shape (m',)
        gamma and mu of the kept kernels.
    graph_filter_order : int
    neighbor_indices, neighbor_weights : ndarray of shape (m', n, k)
        Each landmark's k nearest landmarks in every H_i space and its adaptive weights.
    cluster_centers : ndarray of shape (n_clusters, D)
    landmark_labels : ndarray of shape (n,)
        Nearest centroid of every landmark's fitted row H~: Algorithm 1's labels, or the
        final k-means' labels of the landmarks.
    dtype : {"float64", "float32"}
        Precision of the out-of-sample path: the kernel blocks, the neighbour distances and
        the embedding rows it returns (the landmark fit and every weight are float64).
    kernel_group : ndarray of shape (m,), optional
        Position in ``kept`` of the partition each base kernel uses (kernels with the same
        partition share one, see ``_DUPLICATE_RTOL``), -1 for a dropped kernel.  None: each
        kept kernel its own.  A partition shared by c kernels enters H~ with weight
        sqrt(c) gamma (Algorithm 1 on the c copies); ``filter_weights`` is the copies' sum.
    normalize_embedding : bool, default=False
        The clusters live in the row-normalised H~ (``LateFusionClustering``'s
        ``normalize_embedding``): ``transform_rows`` returns unit-length rows and
        ``cluster_embedding`` is the landmarks' H~ scaled so.  False (models saved before the
        option): raw H~.
    """

    view_names: list[str]
    n_features: dict[str, int]
    landmarks: dict[str, np.ndarray]
    landmark_indices: np.ndarray
    scaling: FeatureScaling | None
    kernels: list[FittedKernel]
    kept: np.ndarray
    preprocessing: KernelPreprocessing
    partitions: np.ndarray
    column_kernel: np.ndarray
    eigenvalues: np.ndarray
    view_weights: np.ndarray
    filter_weights: np.ndarray
    graph_filter_order: int
    neighbor_indices: np.ndarray
    neighbor_weights: np.ndarray
    cluster_centers: np.ndarray
    landmark_labels: np.ndarray
    dtype: str = "float64"
    kernel_group: np.ndarray | None = None
    normalize_embedding: bool = False

    def __post_init__(self):
        # Derived arrays, rebuilt by the same code as in the fit, so a model restored from its
        # state predicts bit for bit like the fitted one.
        n_kept = self.kept.size
        if self.kernel_group is None:  # every kept kernel its own partition
            self.kernel_group = np.full(len(self.kernels), -1, dtype=np.int64)
            self.kernel_group[self.kept] = np.arange(n_kept)
        #: base kernels sharing each kept partition (itself included), shape (m',)
        self.copies = partition_copies(self.kernel_group, n_kept)
        self.graphs = [Graph.from_neighbors(self.neighbor_indices[i], self.neighbor_weights[i])
                       for i in range(n_kept)]
        self.gamma_cols = (np.sqrt(self.copies) * self.view_weights)[self.column_kernel]
        self.column_slices = [np.flatnonzero(self.column_kernel == i) for i in range(n_kept)]
        #: H~ of the landmarks (what the fit clustered)
        self.embedding = apply_filters(self.graphs, self.filter_weights, self.partitions,
                                   self.graph_filter_order) * self.gamma_cols[None, :]
        #: the landmarks' rows in the space the clusters live in (``transform``'s rows)
        self.cluster_embedding = unit_rows(self.embedding) if self.normalize_embedding else self.embedding
        fp = _fingerprints([self.landmarks[v] for v in self.view_names])
        self.fingerprint_order = np.argsort(fp, kind="stable")
        self.fingerprints_sorted = fp[self.fingerprint_order]

    @functools.cached_property
    def oos(self) -> _OutOfSample:
        """What placing a point that is not a landmark needs, built on first use: a fit whose
        rows are all landmarks (every shared multi-view set) never pays for it."""
        n_kept = self.kept.size
        order = self.graph_filter_order
        Hg = self.partitions * self.gamma_cols[None, :]
        bases = {i: filter_basis(self.graphs[i].S_hat, Hg, order)
                 for i in range(n_kept) if order > 0 and self.filter_weights[i] > 0}
        # h_p(x) = kn_p(x, :) H_p Lambda_p^-1 of every kept kernel, in ``kept`` order.
        projected = ProjectedKernels(
            self.landmarks, self.kernels, self.preprocessing,
            {int(p): self.partitions[:, cols] / self.eigenvalues[cols][None, :]
             for p, cols in zip(self.kept, self.column_slices)}, dtype=self.dtype)
        # The filters a new point enters, the landmarks' coordinates in their H_i spaces, and
        # per filter mu_i / sqrt(deg_i) and B_i, stacked for one sparse product per block.
        filters = list(bases)
        neighbors = NeighborSpaces([self.partitions[:, self.column_slices[i]] for i in filters], dtype=self.dtype)
        filter_scale = np.array([self.filter_weights[i] / np.sqrt(self.graphs[i].degree)
                                 for i in filters]).reshape(len(filters), self.n_landmarks)
        # In ``dtype``: a block gathers ~m k random rows of it per point, a memory-bound product
        # (float32: 4 vs 9 us per point on W1).
        stacked_bases = np.ascontiguousarray(
            np.vstack([bases[i] for i in filters]) if filters else np.zeros((0, self.n_components)),
            dtype=self.dtype)
        return _OutOfSample(bases, projected, filters, neighbors, filter_scale, stacked_bases)

    # ------------------------------------------------------------------ helpers
    @property
    def n_landmarks(self) -> int:
        return self.partitions.shape[0]

    @property
    def n_components(self) -> int:
        return self.partitions.shape[1]

    @property
    def kept_kernels(self) -> list[FittedKernel]:
        return [self.kernels[p] for p in self.kept]

    # ------------------------------------------------------------------ out-of-sample rows
    def _scaled(self, blocks: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        views = dict(zip(self.view_names, blocks))
        if self.scaling is not None:
            return self.scaling.apply(views, np.float64)
        return {k: np.asarray(v, dtype=np.float64) for k, v in views.items()}

    def _match_landmarks(self, views: Mapping[str, np.ndarray]) -> np.ndarray:
        """Index of the landmark each row equals exactly (all views), or -1."""
        fp = _fingerprints([views[v] for v in self.view_names])
        pos = np.searchsorted(self.fingerprints_sorted, fp)
        pos_c = np.minimum(pos, self.fingerprints_sorted.size - 1)
        hit = self.fingerprints_sorted[pos_c] == fp
        match = np.full(fp.size, -1, dtype=np.int64)
        rows = np.flatnonzero(hit)
        if rows.size:
            cand = self.fingerprint_order[pos_c[rows]]
            same = np.ones(rows.size, dtype=bool)
            for v in self.view_names:  # a fingerprint collision is not a match
                same &= np.all(views[v][rows] == self.landmarks[v][cand], axis=1)
            match[rows[same]] = cand[same]
        return match

    def _base_rows(self, views: Mapping[str, np.ndarray]) -> np.ndarray:
        """[h_1(x), ..., h_m'(x)], h_p(x) = P_p(x) H_p Lambda_p^-1 (MKC-AE), shape (b, D).

        P_p(x) is the kernel row of x preprocessed like K_p (``ProjectedKernels``).
        """
        out = np.empty((next(iter(views.values())).shape[0], self.n_components))
        for i, G in self.oos.projected.rows(views):
            out[:, self.column_slices[i]] = G
        return out

    def _filtered_rows(self, Hx: np.ndarray) -> np.ndarray:
        """H~(x) = (1 - 2^-o) h_g(x) + sum_i mu_i sum_j a_i(x)_j B_i[j] for new points x.

        a_i(x)_j = s_xj / sqrt(deg_i[j]) over x's k nearest landmarks j in the H_i space,
        s_xj its adaptive-neighbour weights (derivation: ``docs/algorithms.md``, "Late fusion").  The
        neighbours of every filter come from one search (``NeighborSpaces.query``).
        """
        Hg = Hx * self.gamma_cols[None, :]
        order = self.graph_filter_order
        if order == 0:
            return Hg
        k = self.neighbor_indices.shape[2]
        out = (1.0 - 2.0**-order) * Hg
        oos = self.oos
        if not oos.filters:
            return out
        idx, sqd = oos.neighbors.query([Hx[:, self.column_slices[i]] for i in oos.filters], k + 1)
        m, b = idx.shape[:2]
        idx = idx[:, :, :k]
        # coef[f, x, j] = mu_i s^i_xj / sqrt(deg^i_j); then sum_f,j coef B_i[j] is one sparse
        # (b, m n) x (m n, D) product over the stacked bases.
        coef = adaptive_neighbor_weights(sqd.reshape(m * b, k + 1), k).reshape(m, b, k)
        coef *= oos.filter_scale[np.arange(m)[:, None, None], idx]
        columns = idx + (np.arange(m) * self.n_landmarks)[:, None, None]
        S = scipy.sparse.csr_matrix((coef.transpose(1, 0, 2).ravel().astype(self.dtype, copy=False),
                                     columns.transpose(1, 0, 2).ravel(), np.arange(0, b * m * k + 1, m * k)),
                                    shape=(b, m * self.n_landmarks))
        out += S @ oos.stacked_bases
        return out

    def transform_rows(self, blocks: Sequence[np.ndarray]) -> np.ndarray:
        """H~ of one row block of every view (``view_names`` order), shape (b, D), in ``dtype``.

        A row equal to a landmark (bitwise, all views, after scaling) gets the landmark's
        fitted row: through the formula it would be its own nearest neighbour.
        """
        views = self._scaled(blocks)
        match = self._match_landmarks(views)
        out = np.empty((match.size, self.n_components), dtype=self.dtype)
        hit = match >= 0
        out[hit] = self.cluster_embedding[match[hit]]
        new = np.flatnonzero(~hit)
        if new.size:
            sub = {k: v[new] for k, v in views.items()} if new.size < match.size else views
            rows = self._filtered_rows(self._base_rows(sub))
            out[new] = unit_rows(rows) if self.normalize_embedding else rows
        return out

    @property
    def block_rows(self) -> int:
        """Rows per sub-block of the out-of-sample row functions: a (rows, n) kernel block
        stays cache-sized (``mkdist._core._blocks.cache_block_rows``)."""
        return cache_block_rows(self.n_landmarks, np.dtype(self.dtype).itemsize)

    # ------------------------------------------------------------------ state (no pickle)
    def state(self) -> tuple[dict, dict]:
        """(attrs, arrays) of the model, named arrays with dims (see ``model_state``).

        Dims are among "landmark", "component", "kernel", "kept_kernel", "neighbor",
        "cluster" and "feature__<view>".
        """
        attrs, arrays = kernel_model_state(self.view_names, self.landmarks, self.kernels, self.preprocessing,
                                           self.scaling)
        arrays.update({
            "landmark_indices": (("landmark",), np.asarray(self.landmark_indices, dtype=np.int64)),
            "kept": (("kept_kernel",), np.asarray(self.kept, dtype=np.int64)),
            "partitions": (("landmark", "component"), self.partitions),
            "column_kernel": (("component",), np.asarray(self.column_kernel, dtype=np.int64)),
            "eigenvalues": (("component",), self.eigenvalues),
            "view_weights": (("kept_kernel",), self.view_weights),
            "filter_weights": (("kept_kernel",), self.filter_weights),
            "neighbor_indices": (("kept_kernel", "landmark", "neighbor"), self.neighbor_indices),
            "neighbor_weights": (("kept_kernel", "landmark", "neighbor"), self.neighbor_weights),
            "cluster_centers": (("cluster", "component"), self.cluster_centers),
            "landmark_labels": (("landmark",), np.asarray(self.landmark_labels, dtype=np.int64)),
            "kernel_group": (("kernel",), np.asarray(self.kernel_group, dtype=np.int64)),
        })
        attrs.update({"n_features": {k: int(v) for k, v in self.n_features.items()},
                      "graph_filter_order": int(self.graph_filter_order), "dtype": str(self.dtype),
                      "normalize_embedding": bool(self.normalize_embedding)})
        return attrs, arrays

    @classmethod
    def from_state(cls, attrs: Mapping[str, Any], get: StateArrays) -> LateFusionModel:
        return cls(
            **kernel_model_from_state(attrs, get), n_features={k: int(v) for k, v in attrs["n_features"].items()},
            landmark_indices=get("landmark_indices", np.int64), kept=get("kept", np.int64),
            partitions=get("partitions"), column_kernel=get("column_kernel", np.int64),
            eigenvalues=get("eigenvalues"), view_weights=get("view_weights"), filter_weights=get("filter_weights"),
            graph_filter_order=int(attrs["graph_filter_order"]),
            neighbor_indices=get("neighbor_indices", np.int64), neighbor_weights=get("neighbor_weights"),
            cluster_centers=get("cluster_centers"), landmark_labels=get("landmark_labels", np.int64),
            dtype=attrs["dtype"], kernel_group=get("kernel_group", np.int64),
            normalize_embedding=bool(attrs["normalize_embedding"]))


def embed_rows(blocks: list, model: LateFusionModel) -> np.ndarray:
    """H~ of one row block (RowBlocks row function), shape (b, D)."""
    return model.transform_rows(blocks)


def label_rows(blocks: list, model: LateFusionModel) -> np.ndarray:
    """Nearest centroid of H~ of one row block (RowBlocks row function), shape (b,), int64."""
    return nearest_center(model.transform_rows(blocks), model.cluster_centers)

