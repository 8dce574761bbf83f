"""Drift of a new batch against the data a model was fitted on (scheduled assignment).

Three signals, each cheap to compute while the batch is labelled:

* ``share_beyond_fit_p99``: share of the batch's rows farther from their centre than 99% of
  the fitted rows were (about 0.01 for a batch drawn like the fit data);
* ``cluster_tv`` / ``cluster_psi``: total variation distance and population stability index
  between the batch's cluster proportions and the fitted ones (0 for the same proportions);
* per view, ``mean_shift_sd``: mean over features of |mean_batch - mean_fit| / sd_fit, and
  ``scale_ratio``: median over features of sd_batch / sd_fit (from the input scans).

A batch drifts when any signal crosses its threshold (``DEFAULT_THRESHOLDS``, overridable).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import InputValidationError

__all__ = ["DEFAULT_THRESHOLDS", "drift_statistics", "check_thresholds"]

#: Thresholds above which a batch counts as drifted.  share_beyond_fit_p99: 5x what a batch
#: like the fit data gives; PSI 0.2 is the usual "significant shift" of credit scoring; a
#: feature mean moved by a quarter of its fitted sd on average over a view, or a median
#: scale change beyond 25%.
DEFAULT_THRESHOLDS = {"share_beyond_fit_p99": 0.05, "cluster_tv": 0.1, "cluster_psi": 0.2,
                      "mean_shift_sd": 0.25, "scale_ratio_max": 1.25}


def check_thresholds(thresholds: Mapping[str, Any] | None) -> dict[str, float]:
    """``DEFAULT_THRESHOLDS`` updated with the given ones; unknown names and non-positive values refused."""
    out = dict(DEFAULT_THRESHOLDS)
    for name, value in (thresholds or {}).items():
        if name not in DEFAULT_THRESHOLDS:
            raise InputValidationError(
                f"unknown drift threshold {name!r}; the thresholds are {sorted(DEFAULT_THRESHOLDS)}.")
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise InputValidationError(f"drift threshold {name}={value!r} must be a number.") from None
        if not value > 0:
            raise InputValidationError(f"drift threshold {name}={value!r} must be > 0.")
        out[name] = value
    return out


def drift_statistics(*, fit_stats: Mapping[str, dict], batch_stats: Mapping[str, dict], fitted_sizes,
                     batch_sizes, share_beyond_fit_p99: float, thresholds: Mapping[str, float] | None = None
                     ) -> dict[str, Any]:
    """The drift signals of a batch and whether they cross the thresholds.

    Parameters
    ----------
    fit_stats, batch_stats : dict of view to {"mean": list, "std": list}
        Per-feature statistics of the fit data and of the batch (``mkdist._pipeline._scan.scan_views``).
    fitted_sizes, batch_sizes : array-like of shape (k,)
        Rows per cluster in the fit and in the batch.
    share_beyond_fit_p99 : float
        Share of the batch's rows beyond the fit's 99th percentile of distance to the centre.
    thresholds : dict, optional
        Overrides of ``DEFAULT_THRESHOLDS``.

    Returns
    -------
    dict
        The signals, ``thresholds``, ``drifted`` and the ``reasons`` (one sentence each).
    """
    limits = check_thresholds(thresholds)
    eps = 1e-6
    p = np.asarray(fitted_sizes, dtype=np.float64)
    q = np.asarray(batch_sizes, dtype=np.float64)
    k = max(p.size, q.size)
    p = np.pad(p, (0, k - p.size)) / max(p.sum(), 1.0)
    q = np.pad(q, (0, k - q.size)) / max(q.sum(), 1.0)
    tv = 0.5 * float(np.abs(p - q).sum())
    pe, qe = np.maximum(p, eps), np.maximum(q, eps)
    psi = float(((qe - pe) * np.log(qe / pe)).sum())
    views = {}
    for name, fit in fit_stats.items():
        if name not in batch_stats:
            continue
        mu_f, sd_f = np.asarray(fit["mean"]), np.asarray(fit["std"])
        mu_b, sd_b = np.asarray(batch_stats[name]["mean"]), np.asarray(batch_stats[name]["std"])
        live = sd_f > 0
        views[name] = {
            "mean_shift_sd": float(np.mean(np.abs(mu_b[live] - mu_f[live]) / sd_f[live])) if live.any() else 0.0,
            "scale_ratio": float(np.median(sd_b[live] / sd_f[live])) if live.any() else 1.0,
        }
    reasons = []
    if share_beyond_fit_p99 > limits["share_beyond_fit_p99"]:
        reasons.append(f"{share_beyond_fit_p99:.1%} of the rows lie beyond the fit's 99th percentile of distance "
                       f"to their centre (threshold {limits['share_beyond_fit_p99']:.1%})")
    if tv > limits["cluster_tv"]:
        reasons.append(f"cluster proportions moved by total variation {tv:.3f} (threshold {limits['cluster_tv']:g})")
    if psi > limits["cluster_psi"]:
        reasons.append(f"cluster population stability index {psi:.3f} (threshold {limits['cluster_psi']:g})")
    for name, v in views.items():
        if v["mean_shift_sd"] > limits["mean_shift_sd"]:
            reasons.append(f"view {name!r}: feature means moved by {v['mean_shift_sd']:.2f} fitted sd on average "
                           f"(threshold {limits['mean_shift_sd']:g})")
        ratio = max(v["scale_ratio"], 1.0 / max(v["scale_ratio"], eps))
        if ratio > limits["scale_ratio_max"]:
            reasons.append(f"view {name!r}: feature scales changed by a factor {v['scale_ratio']:.2f} (threshold "
                           f"{limits['scale_ratio_max']:g})")
    return {"share_beyond_fit_p99": float(share_beyond_fit_p99), "cluster_tv": tv, "cluster_psi": psi,
            "views": views, "thresholds": limits, "drifted": bool(reasons), "reasons": reasons}
