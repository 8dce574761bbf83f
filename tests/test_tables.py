"""Tables as input: every column type a data engineer's Parquet holds, views declared from
columns, ids kept for the labels, and each mistake refused in one line that names it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mkdist
from mkdist._pipeline._io import InputSource, open_input, scan_views
from mkdist._pipeline._tables import ParquetTable, parse_view_option, plan_views
from mkdist.errors import InputValidationError

from .conftest import make_blobs_views


def _customers(n_per_cluster: int = 40, seed: int = 0) -> tuple[pa.Table, np.ndarray]:
    """A customer table: string id (shuffled), two views a0..a4 / b0..b4, a label column."""
    views, y = make_blobs_views(n_per_cluster=n_per_cluster, n_clusters=3, seed=seed)
    n = y.size
    rng = np.random.default_rng(seed)
    ids = np.array([f"C{i:05d}" for i in rng.permutation(n)])
    cols = {"customer_id": pa.array(ids)}
    for p, X in zip("ab", views):
        cols.update({f"{p}{j}": pa.array(X[:, j]) for j in range(X.shape[1])})
    cols["true_segment"] = pa.array(y)
    return pa.table(cols), y


def _write(table: pa.Table, path, **kwargs) -> str:
    pq.write_table(table, str(path), **kwargs)
    return str(path)


def _plan(path, views=None, **kwargs):
    return plan_views(ParquetTable.open(str(path)), views, **kwargs)


# ----------------------------------------------------------------------------- column types
def test_pandas_string_id_is_never_a_feature_and_is_named(tmp_path):
    table, _ = _customers()
    df = table.to_pandas()
    df["customer_id"] = df["customer_id"].astype("string")  # pandas 3 StringDtype
    df["segment"] = pd.array(["x", "y", None] * (len(df) // 3), dtype="string")
    path = tmp_path / "c.parquet"
    df.to_parquet(path, index=False)
    plan = _plan(path, id_column="customer_id", label_column="true_segment")
    assert plan.views == {"features": [f"{p}{j}" for p in "ab" for j in range(5)]}
    msg = plan.message()
    assert "customer_id (id)" in msg and "segment (string)" in msg and "true_segment (labels)" in msg
    assert "declare views with --view" in msg
    # Without --id-column the string id is still never a feature: it is named as a string column.
    assert "customer_id" in dict(_plan(path, label_column="true_segment").ignored)


@pytest.mark.parametrize("kind, array, word", [
    ("large string", pa.array(["u", "v", "w"] * 40, pa.large_string()), "string"),
    ("dictionary", pa.array(["u", "v", "w"] * 40).dictionary_encode(), "categorical"),
    ("timestamp", pa.array(np.arange(120).astype("datetime64[s]")), "timestamp["),
    ("boolean", pa.array([True, False, True] * 40), "boolean"),
])
def test_undeclared_non_numeric_columns_are_ignored_and_named(tmp_path, kind, array, word):
    table, _ = _customers()
    path = _write(table.append_column("extra", array), tmp_path / "c.parquet")
    plan = _plan(path, id_column="customer_id", label_column="true_segment")
    assert "extra" not in plan.views["features"]
    assert [why for c, why in plan.ignored if c == "extra" and why.startswith(word)]


@pytest.mark.parametrize("array", [
    pa.array(["u", "v", "w"] * 40).dictionary_encode(),
    pa.array(["u", "v", "w"] * 40, pa.large_string()),
])
def test_a_view_mixing_numbers_and_categories_is_refused_with_what_to_do(tmp_path, array):
    table, _ = _customers()
    path = _write(table.append_column("extra", array), tmp_path / "c.parquet")
    with pytest.raises(InputValidationError, match=r"view 'odd' mixes numbers \(b0\) and categories \(extra\).*"
                                                   r"--view odd=b0 --view odd_cat=extra"):
        _plan(path, {"a": "a*", "odd": ["extra", "b0"]}, id_column="customer_id")


def test_declared_timestamp_is_refused_with_what_to_do(tmp_path):
    table, _ = _customers()
    path = _write(table.append_column("extra", pa.array(np.arange(120).astype("datetime64[s]"))),
                  tmp_path / "c.parquet")
    with pytest.raises(InputValidationError, match="column 'extra' is timestamp.*days since"):
        _plan(path, {"a": "a*", "odd": ["extra", "b0"]}, id_column="customer_id")
    with pytest.raises(InputValidationError, match="column 'extra' is timestamp.*not a category"):
        _plan(path, {"a": "a*", "odd:categorical": ["extra"]}, id_column="customer_id")


def test_declared_boolean_is_a_zero_one_feature(tmp_path):
    table, _ = _customers()
    flags = np.arange(120) % 2 == 0
    path = _write(table.append_column("flag", pa.array(flags)), tmp_path / "c.parquet")
    views = InputSource(path, views={"a": "a*", "b": ["b0", "flag"]}, id_column="customer_id").open().load()
    np.testing.assert_array_equal(views["b"][:, 1].compute(), flags.astype(float))


def test_nullable_integers(tmp_path):
    table, _ = _customers()
    full = pa.array(np.arange(120) % 7, pa.int64())
    holes = pa.array([None if i in (17, 40, 90) else i % 7 for i in range(120)], pa.int64())
    path = _write(table.append_column("visits", full), tmp_path / "full.parquet")
    assert "visits" in _plan(path, id_column="customer_id", label_column="true_segment").views["features"]
    path = _write(table.append_column("visits", holes), tmp_path / "holes.parquet")
    first_id = table.column("customer_id")[17].as_py()
    with pytest.raises(InputValidationError,
                       match=rf"column 'visits' has 3 missing values \(first at row 17, customer_id '{first_id}'\)"):
        _plan(path, id_column="customer_id", label_column="true_segment")


def test_pandas_nullable_Int64_with_missing_values_is_refused_before_any_work(tmp_path):
    df = _customers()[0].to_pandas()
    df["n"] = pd.array([None] + list(range(1, len(df))), dtype="Int64") % 5
    df.to_parquet(tmp_path / "c.parquet", index=False)
    with pytest.raises(InputValidationError, match="column 'n' has 1 missing value .first at row 0"):
        open_input(InputSource(str(tmp_path / "c.parquet"), id_column="customer_id", label_column="true_segment"))


def test_null_ids_are_refused(tmp_path):
    table, _ = _customers()
    ids = table.column("customer_id").to_pylist()
    ids[5] = None
    path = _write(table.set_column(0, "customer_id", pa.array(ids)), tmp_path / "c.parquet")
    with pytest.raises(InputValidationError, match=r"id column 'customer_id' has 1 null \(first at row 5\)"):
        _plan(path, id_column="customer_id")


# ----------------------------------------------------------------------------- row ids
def test_an_undeclared_row_id_is_refused_naming_it(tmp_path):
    table, _ = _customers()
    path = _write(table.append_column("customer_no", pa.array(np.arange(1000, 1120))), tmp_path / "c.parquet",
                  row_group_size=50)
    with pytest.raises(InputValidationError, match=r"column 'customer_no' looks like a row id \(unique, monotone "
                                                   r"integers 1000 \.\. 1119\).*--id-column customer_no"):
        _plan(path, label_column="true_segment")
    assert "customer_no" not in _plan(path, id_column="customer_no", label_column="true_segment").views["features"]
    plan = _plan(path, {"a": ["a0", "customer_no"]}, label_column="true_segment")  # named: clustered as asked
    assert plan.views["a"] == ["a0", "customer_no"]
    with pytest.raises(InputValidationError, match="looks like a row id"):
        _plan(path, {"a": "*_no"}, label_column="true_segment")  # a pattern is not a name


def test_a_shuffled_unique_integer_named_like_an_id_is_refused(tmp_path):
    table, _ = _customers()
    path = _write(table.append_column("user_id", pa.array(np.random.default_rng(1).permutation(120))),
                  tmp_path / "c.parquet")
    with pytest.raises(InputValidationError, match="column 'user_id' looks like a row id .unique integers."):
        _plan(path, label_column="true_segment")


def test_integer_features_that_repeat_are_kept(tmp_path):
    table, _ = _customers()
    path = _write(table.append_column("household", pa.array(np.arange(120) // 2)), tmp_path / "c.parquet")
    assert "household" in _plan(path, id_column="customer_id", label_column="true_segment").views["features"]


def test_pandas_index_is_never_a_feature(tmp_path):
    df = _customers()[0].to_pandas().set_index("customer_id")
    df.to_parquet(tmp_path / "c.parquet")
    plan = _plan(tmp_path / "c.parquet", label_column="true_segment")
    assert ("customer_id", "pandas index") in plan.ignored


# ----------------------------------------------------------------------------- views
def test_views_from_patterns_and_lists_read_the_right_columns(tmp_path):
    table, _ = _customers()
    path = _write(table, tmp_path / "c.parquet", row_group_size=35)
    source = InputSource(path, views=parse_view_option(["a=a*", "b='b0, b2,b4'"]), id_column="customer_id")
    views = source.open().load()
    assert {k: v.shape for k, v in views.items()} == {"a": (120, 5), "b": (120, 3)}
    np.testing.assert_array_equal(views["b"].compute(),
                                  np.column_stack([table.column(c).to_numpy() for c in ("b0", "b2", "b4")])
                                  .astype(np.float32))
    assert views["a"].dtype == np.float32  # the row engine's working precision, whatever the column type
    # The same through the public function, and chunks are uniform (Zarr needs them so).
    views = mkdist.load_views(path, views={"a": "a*", "b": ["b0", "b2", "b4"]}, id_column="customer_id",
                              chunk_rows=50)
    assert views["a"].chunks[0] == (50, 50, 20)
    np.testing.assert_array_equal(views["a"].compute(), np.column_stack([table.column(f"a{j}").to_numpy()
                                                                         for j in range(5)]).astype(np.float32))


@pytest.mark.parametrize("views, message", [
    ({"a": ["a0", "nope"]}, r"view 'a': column 'nope' is not in .*; its columns are: customer_id \(string\), a0"),
    ({"a": "z*"}, "pattern 'z\\*' matches no column"),
    ({"a": ["a0", "customer_id"]}, "column 'customer_id' is the id column, which is never a feature"),
    ({"a": ["a0", "a0"]}, r"view 'a' names \['a0'\] more than once"),
    ({"a": []}, "view 'a' names no column"),
    (["a0"], "declare views as a mapping"),
])
def test_view_mistakes_are_refused_in_one_line(tmp_path, views, message):
    path = _write(_customers()[0], tmp_path / "c.parquet")
    with pytest.raises(InputValidationError, match=message):
        _plan(path, views, id_column="customer_id")


@pytest.mark.parametrize("item", ["a", "=a*", "a="])
def test_view_option_syntax(item):
    with pytest.raises(InputValidationError, match="write NAME=COLUMNS"):
        parse_view_option([item])


def test_unknown_id_column_lists_the_columns(tmp_path):
    path = _write(_customers()[0], tmp_path / "c.parquet")
    with pytest.raises(InputValidationError, match="id_column 'cust_id' is not a column .*customer_id \\(string\\)"):
        _plan(path, id_column="cust_id")


# ----------------------------------------------------------------------------- files
def test_directories_globs_and_schema_mismatch(tmp_path):
    table, _ = _customers()
    (tmp_path / "d").mkdir()
    for i, (a, b) in enumerate([(0, 50), (50, 120)]):
        _write(table.slice(a, b - a), tmp_path / "d" / f"part-{i}.parquet")
    (tmp_path / "d" / "_SUCCESS").write_text("")
    for location in (tmp_path / "d", tmp_path / "d" / "*.parquet"):
        opened = open_input(InputSource(str(location), id_column="customer_id", label_column="true_segment"))
        assert opened.n_rows == 120
        np.testing.assert_array_equal(opened.load()["features"][:, 0].compute(),
                                          table.column("a0").to_numpy().astype(np.float32))
    _write(table.slice(0, 10).drop_columns(["b4"]), tmp_path / "d" / "part-9.parquet")
    with pytest.raises(InputValidationError, match=r"part-9.parquet has other columns .*missing \['b4'\]"):
        open_input(InputSource(str(tmp_path / "d")))


def test_missing_empty_and_corrupt_inputs(tmp_path):
    _write(_customers()[0], tmp_path / "customers.parquet")
    with pytest.raises(InputValidationError,
                       match=r"not found: .*customer.parquet \(did you mean .*customers.parquet\?\)"):
        open_input(InputSource(str(tmp_path / "customer.parquet")))
    with pytest.raises(InputValidationError, match="not found: no file matches"):
        open_input(InputSource(str(tmp_path / "*.pq")))
    (tmp_path / "empty.parquet").write_bytes(b"")
    with pytest.raises(InputValidationError, match=r"empty.parquet is empty \(0 bytes\)"):
        open_input(InputSource(str(tmp_path / "empty.parquet")))
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 this is not parquet at all")
    with pytest.raises(InputValidationError, match="bad.parquet is not a readable Parquet file"):
        open_input(InputSource(str(tmp_path / "bad.parquet")))
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InputValidationError, match="convert the CSV file to Parquet"):
        open_input(InputSource(str(tmp_path / "t.csv")))
    _write(_customers()[0].slice(0, 0), tmp_path / "none.parquet")
    with pytest.raises(InputValidationError, match="holds no rows"):
        open_input(InputSource(str(tmp_path / "none.parquet")))


# ----------------------------------------------------------------------------- NaN and inf
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_inf_name_the_column_the_first_row_id_and_the_count(tmp_path, bad):
    table, _ = _customers()
    values = table.column("b3").to_numpy().copy()
    values[[30, 77]] = bad
    a1 = table.column("a1").to_numpy().copy()
    a1[100] = bad
    # Stored as NaN/inf values, not nulls: the statistics do not see them, the scan does.
    table = table.set_column(table.schema.get_field_index("b3"), "b3", pa.array(values, from_pandas=False))
    table = table.set_column(table.schema.get_field_index("a1"), "a1", pa.array(a1, from_pandas=False))
    path = _write(table, tmp_path / "c.parquet", row_group_size=40)
    opened = open_input(InputSource(path, views={"a": "a*", "b": "b*"}, id_column="customer_id"))
    first = table.column("customer_id")[100].as_py()
    with pytest.raises(InputValidationError,
                       match=rf"column 'a1' holds NaN or infinity in 1 row, first at row 100 \(customer_id "
                             rf"'{first}'\); also 'b3' \(2\)"):
        scan_views(opened.load(), feature_names=opened.feature_names, describe_row=opened.describe_row)


def test_more_clusters_than_rows_is_refused_before_any_work(tmp_path):
    path = _write(_customers(n_per_cluster=2)[0], tmp_path / "c.parquet")
    with pytest.raises(InputValidationError, match="n_clusters"):
        mkdist.pipeline.plan_run(InputSource(path, id_column="customer_id", label_column="true_segment"),
                                 str(tmp_path / "run.zarr"), mkdist.RunConfig(n_clusters=10))
    assert not (tmp_path / "run.zarr").exists()


def test_row_groups_larger_than_a_chunk_are_named_in_the_input_line(tmp_path):
    """Each slice of a row group decodes the whole group: the input line says so, with the fix."""
    table, _ = _customers(n_per_cluster=20_000)  # 60k rows
    one_group = _write(table, tmp_path / "one.parquet", row_group_size=60_000)
    source = InputSource(one_group, id_column="customer_id", label_column="true_segment", chunk_rows=10_000)
    line = source.open().message()
    assert "row groups of up to 60,000 rows are read in slices of 10,000 rows" in line
    assert "row_group_size=10000" in line and "instead of 6 times" in line
    small_groups = _write(table, tmp_path / "small.parquet", row_group_size=10_000)
    line = InputSource(small_groups, id_column="customer_id", label_column="true_segment",
                       chunk_rows=10_000).open().message()
    assert "row groups" not in line
