"""External clustering metrics: accuracy (Hungarian matching), NMI, ARI, purity.

All take ``labels_true`` and ``labels_pred`` of shape (n_samples,) with
arbitrary integer (or hashable) labels; none depends on how clusters are numbered.
"""

from __future__ import annotations

import numpy as np

__all__ = ["clustering_accuracy", "nmi", "ari", "purity", "clustering_scores"]

# sklearn.metrics is imported inside the functions: it costs ~0.25 s of import that every
# `mkdist` command (and every refusal of bad arguments) would otherwise pay.


def _contingency(labels_true, labels_pred) -> np.ndarray:
    labels_true = np.asarray(labels_true).ravel()
    labels_pred = np.asarray(labels_pred).ravel()
    if labels_true.shape != labels_pred.shape:
        raise ValueError(
            f"labels_true and labels_pred must have the same length, got {labels_true.shape[0]} "
            f"and {labels_pred.shape[0]}."
        )
    if labels_true.size == 0:
        raise ValueError("labels are empty.")
    from sklearn.metrics.cluster import contingency_matrix

    return contingency_matrix(labels_true, labels_pred)


def clustering_accuracy(labels_true, labels_pred) -> float:
    """Accuracy under the best one-to-one matching of clusters to classes.

    The matching maximises the number of agreeing samples (Hungarian algorithm on
    the contingency table); clusters left unmatched count as errors.

    Parameters
    ----------
    labels_true : array-like of shape (n_samples,)
    labels_pred : array-like of shape (n_samples,)

    Returns
    -------
    acc : float in [0, 1]

    Examples
    --------
    >>> clustering_accuracy([0, 0, 1, 1], [1, 1, 0, 0])
    1.0
    """
    c = _contingency(labels_true, labels_pred)
    # Imported here: scipy.optimize costs ~0.6 s of import, paid by every CLI command that
    # imports the pipeline (which reports accuracy) but never scores anything.
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(-c)
    return float(c[rows, cols].sum() / c.sum())


def purity(labels_true, labels_pred) -> float:
    """Share of samples that belong to the majority class of their cluster.

    >>> purity([0, 0, 1, 1], [0, 0, 0, 0])
    0.5
    """
    c = _contingency(labels_true, labels_pred)
    return float(c.max(axis=0).sum() / c.sum())


def nmi(labels_true, labels_pred) -> float:
    """Normalised mutual information (arithmetic normalisation, as scikit-learn)."""
    from sklearn.metrics import normalized_mutual_info_score

    _contingency(labels_true, labels_pred)
    return float(normalized_mutual_info_score(np.ravel(labels_true), np.ravel(labels_pred)))


def ari(labels_true, labels_pred) -> float:
    """Adjusted Rand index."""
    from sklearn.metrics import adjusted_rand_score

    _contingency(labels_true, labels_pred)
    return float(adjusted_rand_score(np.ravel(labels_true), np.ravel(labels_pred)))


def clustering_scores(labels_true, labels_pred) -> dict[str, float]:
    """All four metrics as a dict ``{"acc", "nmi", "ari", "purity"}``."""
    return {
        "acc": clustering_accuracy(labels_true, labels_pred),
        "nmi": nmi(labels_true, labels_pred),
        "ari": ari(labels_true, labels_pred),
        "purity": purity(labels_true, labels_pred),
    }
