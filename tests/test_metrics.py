import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from mkdist.metrics import ari, clustering_accuracy, clustering_scores, nmi, purity


def test_accuracy_is_invariant_to_relabelling():
    y = np.array([0, 0, 1, 1, 2, 2])
    assert clustering_accuracy(y, [2, 2, 0, 0, 1, 1]) == 1.0
    # Hand-worked: best matching 0->a, 1->b gets 4 of 6 right.
    assert clustering_accuracy(y, [5, 5, 7, 7, 7, 5]) == pytest.approx(4 / 6)


def test_accuracy_counts_unmatched_clusters_as_errors():
    assert clustering_accuracy([0, 0, 0, 0], [0, 1, 2, 3]) == 0.25


def test_purity_and_sklearn_parity():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 4, 200), rng.integers(0, 5, 200)
    assert purity([0, 0, 1, 1], [0, 0, 0, 0]) == 0.5
    assert nmi(a, b) == pytest.approx(normalized_mutual_info_score(a, b))
    assert ari(a, b) == pytest.approx(adjusted_rand_score(a, b))
    assert set(clustering_scores(a, b)) == {"acc", "nmi", "ari", "purity"}


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="same length"):
        clustering_accuracy([0, 1], [0, 1, 1])
