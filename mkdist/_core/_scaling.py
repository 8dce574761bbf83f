"""Per-feature scaling of the views (:class:`FeatureScaling`) and the scalings estimators offer.

The scaling is estimated on in-memory rows (landmarks or a sample) and applied to every later
block of rows, so all blocks are scaled alike.  :data:`SCALINGS` and :data:`SCALE_AUTO` are the
values of the estimators' ``scale`` parameter; this module needs only NumPy, so the parameter
tables (``mkdist._methods._params``) import them without scikit-learn or scipy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import InputValidationError
from ._kernel_specs import SPARSE_DENSITY, is_indicator_block, view_density

__all__ = ["FeatureScaling", "SCALINGS", "SCALE_AUTO", "SCALE_NONE", "SCALE_UNITS", "UNITS_SPREAD_RATIO",
           "scales_features", "units_differ", "SCALE_TABLE"]

#: Per-feature scalings every estimator with a ``scale`` parameter offers (see FeatureScaling).
SCALINGS = ("minmax", "standard")
#: ``scale="auto"`` (late fusion): "minmax" on the dense views, none on the sparse ones
#: (``view_density`` < ``SPARSE_DENSITY``, as the "auto" kernel set decides); see FeatureScaling.
SCALE_AUTO = "auto"
#: ``scale="none"``: the features as given, said explicitly.  ``None`` says the same to an
#: estimator, but a run's options (``mkdist.cluster``, ``--config``) read ``scale=None`` as "the
#: method's default", which is a scaling for some (late fusion's "auto"; mkc's "auto" with a
#: categorical view): "none" is how a run asks for no scaling.
SCALE_NONE = "none"


#: ``scale="units"`` (mkc's default for numeric inputs): "standard" on a dense view whose columns
#: come in different units (:func:`units_differ`), the features as given on every other view.
SCALE_UNITS = "units"
#: Columns "come in different units" when the largest column standard deviation is more than
#: this many times the median one (over the columns that vary).  Why: one RBF bandwidth (or one
#: linear kernel) per view measures every column in the same unit, so a column spread 10x wider
#: than the typical one decides the distances by itself -- its unit, not the data, picks the
#: clusters.  Measured on the landmarks of the 32 tables of bench/bench_baselines.py: wine 388,
#: breast_cancer 7829, mfeat's morphology view 4081 (standardising lifts wine 0.68 -> 0.97 ACC,
#: breast_cancer 0.83 -> 0.91); pixels and one-unit descriptors 1.1-8.9 (iris 2.2 in cm: 0.97 as
#: given, 0.80 standardised; digits 1.5: 0.77 as given, 0.69 standardised).
UNITS_SPREAD_RATIO = 10.0

#: ``scale="table"`` (mkc's default for a table with categorical columns): "standard" on the
#: numeric views, a categorical view's one-hot indicators as given.  Why as given: with the
#: linear kernel on them (:func:`mkdist._core._kernel_specs.auto_specs_for_table`) two rows'
#: distance is then twice the number of columns where they differ, each column counted once as
#: in k-modes' matching dissimilarity; standardised, a column weighs by its number of levels
#: and their rarity, and a 50-level noise column beside a 2-level plan took over the view (ACC
#: 0.68-0.84 against 0.89; docs/guide/quality.md).
SCALE_TABLE = "table"


def units_differ(X) -> bool:
    """Whether a dense view's columns come in different units (see :data:`UNITS_SPREAD_RATIO`).

    Sparse views (share of non-zero entries < ``SPARSE_DENSITY``: counts, tf-idf, adjacency)
    never do: their columns share one unit, and standardising would give a word seen once the
    weight of a frequent one.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.shape[1] < 2 or view_density(X) < SPARSE_DENSITY:
        return False
    spread = X.std(axis=0)
    varying = spread[spread > 0]
    if varying.size < 2:
        return False
    return bool(spread.max() > UNITS_SPREAD_RATIO * np.median(varying))


def scales_features(kind: str | None) -> bool:
    """Whether ``scale=kind`` scales anything (None and "none" both say no)."""
    return kind is not None and kind != SCALE_NONE


@dataclasses.dataclass
class FeatureScaling:
    """Per-feature affine scaling ``(x - offset) / scale`` of every view.

    Attributes
    ----------
    kind : {"minmax", "standard", "auto", "units"}
    offset, scale : dict of str to ndarray of shape (d_v,)
        Minimum and range ("minmax") or mean and standard deviation ("standard"); a
        constant feature keeps scale 1: it maps to 0 and carries no distance either way.
        "auto": "minmax" on a dense view, offset 0 and scale 1 (the identity) on a sparse one
        (share of non-zero entries < ``SPARSE_DENSITY``: bag of words, graph adjacency), whose
        counts or tf-idf weights are kept as they are -- min-max scaling would give a word
        seen once the weight of the most frequent one.
        "units": "standard" on a view whose columns come in different units
        (:func:`units_differ`), the identity on the others.
    """

    kind: str
    offset: dict[str, np.ndarray]
    scale: dict[str, np.ndarray]

    @classmethod
    def fit(cls, kind: str | None, views: Mapping[str, np.ndarray]) -> FeatureScaling | None:
        """Estimate the scaling on in-memory rows (landmarks or a sample); None for ``kind=None``."""
        if not scales_features(kind):
            return None
        if kind not in (*SCALINGS, SCALE_AUTO, SCALE_UNITS, SCALE_TABLE):
            raise InputValidationError(
                f"`scale`={kind!r} must be one of {(*SCALINGS, SCALE_AUTO, SCALE_UNITS, SCALE_TABLE, SCALE_NONE)}.")
        as_given = ({name: view_density(L) < SPARSE_DENSITY for name, L in views.items()} if kind == SCALE_AUTO
                    else {name: not units_differ(L) for name, L in views.items()} if kind == SCALE_UNITS
                    else {name: is_indicator_block(L) for name, L in views.items()} if kind == SCALE_TABLE
                    else dict.fromkeys(views, False))
        if kind in (SCALE_UNITS, SCALE_TABLE) and all(as_given.values()):
            return None  # every view as given: no scaling step in the embedding at all
        offset, scale = {}, {}
        for name, L in views.items():
            L = np.asarray(L, dtype=np.float64)
            if as_given[name]:
                lo, span = np.zeros(L.shape[1]), np.ones(L.shape[1])
            elif kind in ("minmax", SCALE_AUTO):  # "units" and "table" standardise the views they scale
                lo, span = L.min(axis=0), L.max(axis=0) - L.min(axis=0)
            else:
                lo, span = L.mean(axis=0), L.std(axis=0)
            offset[name] = lo
            scale[name] = np.where(span > 0, span, 1.0)
        return cls(kind, offset, scale)

    @property
    def factor(self) -> dict[str, np.ndarray]:
        """1 / scale per view (multiplying is what the row blocks do)."""
        return {k: 1.0 / v for k, v in self.scale.items()}

    def apply(self, views: Mapping[str, np.ndarray], dtype) -> dict[str, np.ndarray]:
        """Scaled copies of the views in ``dtype``."""
        factor = self.__dict__.setdefault("_factor", self.factor)
        return {name: ((np.asarray(v, dtype=dtype) - self.offset[name].astype(dtype))
                       * factor[name].astype(dtype)) for name, v in views.items()}

    def state_arrays(self) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
        """Named arrays for a model state (dims ``feature__<view>``)."""
        out = {}
        for name in self.offset:
            out[f"scale_offset__{name}"] = ((f"feature__{name}",), self.offset[name])
            out[f"scale_span__{name}"] = ((f"feature__{name}",), self.scale[name])
        return out

    @classmethod
    def from_state(cls, kind: str | None, view_names: Sequence[str], get) -> FeatureScaling | None:
        if not kind or not scales_features(kind):
            return None
        return cls(kind, {n: get(f"scale_offset__{n}") for n in view_names},
                   {n: get(f"scale_span__{n}") for n in view_names})
