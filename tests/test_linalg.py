"""Shared dense algebra (mkdist._core._linalg)."""

import numpy as np
import pytest

from mkdist._core._linalg import unit_rows


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unit_rows_keeps_the_dtype_and_a_zero_row(dtype):
    """Unit-length rows in the input's precision; a zero row stays zero, not NaN (the float64
    floor rounds to 0 in float32)."""
    Z = np.array([[0.0, 0.0], [3.0, 4.0], [1e-15, 0.0]], dtype=dtype)
    out = unit_rows(Z)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out[0], 0.0)
    np.testing.assert_allclose(out[1], [0.6, 0.8], rtol=1e-6)
    np.testing.assert_allclose(out[2], [1.0, 0.0], rtol=1e-6)
