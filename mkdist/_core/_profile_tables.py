"""What a profile says, read from its sums (:class:`mkdist._core._profiles.ProfileSums`): the
per-cluster tables, which columns separate the clusters, a label per cluster, the tidy long
table, and the profile as a stored dataset.

pandas and SciPy are imported where a table is built (``import mkdist`` stays light).
"""

from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np

from ._profiles import QUANTILES, ProfileLayout, ProfileSums

__all__ = ["ClusterProfiles", "profiles_to_dataset", "profiles_from_dataset", "TOP_CATEGORIES"]

#: Categories of a column shown per cluster (by overall count); the others are summed as "(other)".
TOP_CATEGORIES = 10
#: What a label or a card names of a cluster: its columns furthest from the rest.
TOP_TRAITS = 3
OTHER, UNSEEN = "(other)", "(unseen)"


def _q_name(q: float) -> str:
    return f"q{round(q * 100):02d}"


class ClusterProfiles:
    """Profiles of every cluster in the input's own columns, as pandas DataFrames.

    Built from the merged sums of the labels pass (``mkdist.cluster(...).profiles``,
    ``model.profiles_``, ``mkdist profile STORE``).

    Attributes
    ----------
    clusters : DataFrame, one row per cluster
        ``size``, ``share``, ``label`` (generated from the profile, e.g. "spend +1.8 sd,
        plan = pro (92%)") and ``traits`` (its columns furthest from the rest, strongest first).
    numeric : DataFrame indexed by (cluster, column)
        ``count``, ``missing``, ``mean``, ``std``, ``min``, the quantiles ``q01`` .. ``q99``
        (within ``RELATIVE_ERROR`` of exact), ``max`` and ``smd``: the cluster's mean minus the
        overall mean in overall standard deviations.  Cluster -1 holds every row.
    categories : DataFrame indexed by (cluster, column, category)
        ``count``, ``share`` (of the cluster's rows with a value), ``overall_share`` and
        ``lift`` (share / overall share); the ``TOP_CATEGORIES`` most frequent categories of
        each column, the rest summed as "(other)", values outside the vocabulary "(unseen)".
    missing : DataFrame indexed by (cluster, column)
        Missing cells per column (imputed cells when the run imputes: counted apart from the values).
    separation : DataFrame, one row per column, strongest first
        ``kind``, ``score`` (eta squared for a numeric column, Cramer's V for a categorical
        one, both in [0, 1]) and ``statistic`` (the ANOVA F; chi squared for categories).
    """

    def __init__(self, sums: ProfileSums, layout: ProfileLayout, quantiles=QUANTILES):
        self.sums, self.layout, self.quantile_levels = sums, layout, tuple(quantiles)
        self.all = sums.overall()
        self.n_clusters = sums.n_clusters
        self.n_rows = int(sums.rows.sum())
        self.relative_error = sums.relative_error

    # The tables (cached properties below) are built when first read: a run reads its profiles
    # back at its end (the estimator's ``profiles_``), and building every table there cost W1
    # 1.3 s of a 10 s run.

    @functools.cached_property
    def _smd(self) -> np.ndarray:
        """The standardised mean difference of every cluster and numeric column, shape (k, m)."""
        overall_mean, overall_std = self.all.mean[0], self.all.std()[0]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(overall_std > 0, (self.sums.mean - overall_mean) / overall_std, 0.0)

    def __repr__(self) -> str:
        return (f"ClusterProfiles({self.n_clusters} clusters, {self.n_rows:,} rows, "
                f"{len(self.layout.columns)} columns)\n{self.clusters[['size', 'share', 'label']].to_string()}")

    # ------------------------------------------------------------------ tables
    @functools.cached_property
    def numeric(self):
        import pandas as pd

        names = [c.name for c in self.layout.numeric]
        cols = ["count", "missing", "mean", "std", "min", *map(_q_name, self.quantile_levels), "max", "smd"]
        if not names:
            return pd.DataFrame(columns=cols, index=pd.MultiIndex.from_arrays([[], []], names=["cluster", "column"]))
        frames = []
        q_all, q_clusters = self.all.quantiles(self.quantile_levels), self.sums.quantiles(self.quantile_levels)
        for label, s in ((-1, self.all), *((c, self.sums) for c in range(self.n_clusters))):
            c = 0 if label == -1 else label
            q = (q_all if label == -1 else q_clusters)[c]
            smd = np.zeros(len(names)) if label == -1 else self._smd[c]  # all rows against themselves: 0
            data = {"count": s.count[c], "missing": s.missing[c], "mean": s.mean[c], "std": s.std()[c],
                    "min": s.vmin[c], **{_q_name(v): q[:, i] for i, v in enumerate(self.quantile_levels)},
                    "max": s.vmax[c], "smd": smd}
            frames.append(pd.DataFrame(data, index=pd.MultiIndex.from_product([[label], names],
                                                                               names=["cluster", "column"])))
        return pd.concat(frames)

    @functools.cached_property
    def _category_counts(self) -> list[tuple[Any, list, np.ndarray, np.ndarray, int]]:
        """Per categorical column: (column, shown categories, counts (k, shown) incl. '(other)'
        and '(unseen)' when present, overall counts, column index)."""
        out = []
        at = 0
        for i, col in enumerate(self.layout.categorical):
            c = len(col.categories)
            block = self.sums.categories[:, at:at + c + 1]
            at += c + 1
            total = block.sum(axis=0)
            order = [j for j in np.argsort(-total[:c], kind="stable") if total[j] > 0]
            keep, rest = order[:TOP_CATEGORIES], order[TOP_CATEGORIES:]
            names = [col.categories[j] for j in keep]
            parts = [block[:, keep]]
            if rest:
                names.append(OTHER)
                parts.append(block[:, rest].sum(axis=1, keepdims=True))
            if total[c] > 0:
                names.append(UNSEEN)
                parts.append(block[:, c:c + 1])
            counts = np.concatenate(parts, axis=1) if parts else np.zeros((self.n_clusters, 0), np.int64)
            out.append((col.name, names, counts, counts.sum(axis=0), i))
        return out

    @functools.cached_property
    def categories(self):
        import pandas as pd

        rows = []
        for name, cats, counts, total, _ in self._category_counts:
            overall = total / max(total.sum(), 1)
            for label, cnt in ((-1, total), *((c, counts[c]) for c in range(self.n_clusters))):
                n = max(cnt.sum(), 1)
                for j, cat in enumerate(cats):
                    share = cnt[j] / n
                    rows.append((label, name, cat, int(cnt[j]), share, overall[j],
                                 share / overall[j] if overall[j] > 0 else np.nan))
        frame = pd.DataFrame(rows, columns=["cluster", "column", "category", "count", "share", "overall_share",
                                           "lift"])
        return frame.set_index(["cluster", "column", "category"])

    @functools.cached_property
    def missing(self):
        import pandas as pd

        names = [c.name for c in self.layout.numeric] + [c.name for c in self.layout.categorical]
        per = np.concatenate([self.sums.missing, self.sums.cat_missing], axis=1)
        per = np.concatenate([per.sum(axis=0, keepdims=True), per])
        labels = [-1, *range(self.n_clusters)]
        return pd.DataFrame({"missing": per.ravel()},
                            index=pd.MultiIndex.from_product([labels, names], names=["cluster", "column"]))

    @functools.cached_property
    def separation(self):
        import pandas as pd

        rows = []
        s = self.sums
        for j, col in enumerate(self.layout.numeric):
            n = s.count[:, j]
            live = n > 0
            total_n = n.sum()
            grand = self.all.mean[0, j]
            between = float(np.sum(n[live] * (s.mean[live, j] - grand) ** 2))
            within = float(np.nansum(s.m2[live, j]))
            groups = int(live.sum())
            eta2 = between / (between + within) if between + within > 0 else 0.0
            f = (between / (groups - 1)) / (within / (total_n - groups)) \
                if groups > 1 and total_n > groups and within > 0 else np.nan
            rows.append((col.name, "numeric", eta2, f))
        for name, _, counts, _, _ in self._category_counts:
            v, chi2 = _cramers_v(counts)
            rows.append((name, "categorical", v, chi2))
        frame = pd.DataFrame(rows, columns=["column", "kind", "score", "statistic"])
        return frame.sort_values("score", ascending=False, kind="stable").reset_index(drop=True)

    def traits(self, cluster: int) -> list[dict[str, Any]]:
        """The columns where ``cluster`` stands furthest from all rows, strongest first: numbers
        by their standardised mean difference, categories by their most over-represented
        category's standardised share difference."""
        out = []
        for j, col in enumerate(self.layout.numeric):
            smd = float(self._smd[cluster, j])
            if np.isfinite(smd):
                out.append({"column": col.name, "kind": "numeric", "strength": abs(smd), "smd": smd,
                            "mean": float(self.sums.mean[cluster, j]),
                            "text": f"{col.name} {smd:+.1f} sd"})
        for name, cats, counts, total, _ in self._category_counts:
            n = counts[cluster].sum()
            if n == 0 or total.sum() == 0:
                continue
            share, overall = counts[cluster] / n, total / total.sum()
            with np.errstate(invalid="ignore", divide="ignore"):
                d = np.where((overall > 0) & (overall < 1), (share - overall) / np.sqrt(overall * (1 - overall)), 0.0)
            j = int(np.argmax(d))
            out.append({"column": name, "kind": "categorical", "strength": float(max(d[j], 0.0)),
                        "category": cats[j], "share": float(share[j]), "overall_share": float(overall[j]),
                        "text": f"{name} = {cats[j]} ({share[j]:.0%})"})
        return sorted(out, key=lambda t: -t["strength"])

    @functools.cached_property
    def clusters(self):
        import pandas as pd

        rows = []
        for c in range(self.n_clusters):
            traits = self.traits(c) if self.sums.rows[c] else []
            shown = [t for t in traits if t["strength"] >= 0.2][:TOP_TRAITS] or traits[:1]
            rows.append({"cluster": c, "size": int(self.sums.rows[c]),
                         "share": float(self.sums.rows[c] / max(self.n_rows, 1)),
                         "label": ", ".join(t["text"] for t in shown) if shown else "(empty)",
                         "traits": [t["column"] for t in traits]})
        return pd.DataFrame(rows).set_index("cluster")

    # ------------------------------------------------------------------ out
    def long_table(self):
        """The tidy long table (``cluster``, ``column``, ``statistic``, ``category``, ``value``)
        a BI tool reads: every statistic of every cluster (cluster null: all rows)."""
        import pandas as pd

        parts = []
        num = self.numeric.reset_index().melt(id_vars=["cluster", "column"], var_name="statistic",
                                              value_name="value")
        num["category"] = None
        parts.append(num)
        cat = self.categories.reset_index().melt(id_vars=["cluster", "column", "category"],
                                                 var_name="statistic", value_name="value")
        cat["category"] = cat["category"].map(lambda v: None if v is None else str(v))
        parts.append(cat)
        miss = self.missing.reset_index()
        miss = miss[miss["column"].isin([c.name for c in self.layout.categorical])]
        parts.append(miss.assign(statistic="missing", category=None).rename(columns={"missing": "value"}))
        size = pd.DataFrame({"cluster": [-1, *range(self.n_clusters)], "column": None, "statistic": "size",
                             "category": None, "value": [self.n_rows, *self.sums.rows.tolist()]})
        share = size.assign(statistic="share", value=size["value"] / max(self.n_rows, 1))
        sep = self.separation.assign(cluster=-1, statistic=lambda f: np.where(
            f["kind"] == "numeric", "eta_squared", "cramers_v"), category=None).rename(columns={"score": "value"})
        parts += [size, share, sep[["cluster", "column", "statistic", "category", "value"]]]
        out = pd.concat([p[["cluster", "column", "statistic", "category", "value"]] for p in parts],
                        ignore_index=True)
        out["cluster"] = out["cluster"].astype("Int64").mask(out["cluster"] == -1)
        out["value"] = out["value"].astype(np.float64)
        out["column"] = out["column"].astype("string")
        out["category"] = out["category"].astype("string")
        return out

    def to_json(self) -> dict[str, Any]:
        """What ``mkdist profile --json`` prints: clusters, separation, per-cluster statistics."""
        def clean(frame):
            return json.loads(frame.to_json(orient="records", default_handler=str))

        return {"n_rows": self.n_rows, "n_clusters": self.n_clusters,
                "quantile_relative_error": self.relative_error,
                "clusters": clean(self.clusters.reset_index()), "separation": clean(self.separation),
                "numeric": clean(self.numeric.reset_index()), "categories": clean(self.categories.reset_index()),
                "missing": clean(self.missing.reset_index())}


def _cramers_v(counts: np.ndarray) -> tuple[float, float]:
    """Cramer's V and chi squared of a clusters x categories table (empty rows and columns left out)."""
    from scipy.stats import chi2_contingency

    table = counts[counts.sum(axis=1) > 0][:, counts.sum(axis=0) > 0]
    if min(table.shape) < 2:
        return 0.0, 0.0
    chi2 = float(chi2_contingency(table, correction=False)[0])
    n = table.sum()
    return float(np.sqrt(chi2 / (n * (min(table.shape) - 1)))), chi2


_FIELDS = {"rows": ("cluster",), "count": ("cluster", "numeric_column"), "missing": ("cluster", "numeric_column"),
           "mean": ("cluster", "numeric_column"), "m2": ("cluster", "numeric_column"),
           "vmin": ("cluster", "numeric_column"), "vmax": ("cluster", "numeric_column"),
           "codes": ("histogram_bin",), "counts": ("histogram_bin",),
           "categories": ("cluster", "category_slot"), "cat_missing": ("cluster", "categorical_column")}


def profiles_to_dataset(sums: ProfileSums, layout: ProfileLayout):
    """The profile's sums as a dataset with named dims (the ``profiles`` stage); the layout
    (column names, views, vocabularies) in its attrs.  Empty variables are left out."""
    import xarray as xr

    variables = {name: (dims, getattr(sums, name)) for name, dims in _FIELDS.items() if getattr(sums, name).size}
    return xr.Dataset(variables, attrs={"layout": json.dumps(layout.to_json()), "quantiles": list(QUANTILES),
                                        "quantile_relative_error": sums.relative_error,
                                        "histogram_mantissa_bits": int(sums.mantissa_bits),
                                        "n_clusters": int(sums.n_clusters)})


def profiles_from_dataset(ds) -> ClusterProfiles:
    """The profiles of a stored ``profiles`` stage."""
    layout = ProfileLayout.from_json(json.loads(ds.attrs["layout"]))
    k = int(ds.attrs["n_clusters"])
    m, q = len(layout.numeric), len(layout.categorical)
    width = sum(len(c.categories) + 1 for c in layout.categorical)
    shapes = {"rows": (k,), "codes": (0,), "counts": (0,), "categories": (k, width), "cat_missing": (k, q)}
    values = {}
    for name in _FIELDS:
        if name in ds:
            values[name] = np.asarray(ds[name].values)
        else:
            shape = shapes.get(name, (k, m))
            values[name] = np.full(shape, np.nan) if name in ("mean", "m2", "vmin", "vmax") \
                else np.zeros(shape, np.int64)
    # Stores written before the attribute hold bins of 7 mantissa bits.
    bits = int(ds.attrs.get("histogram_mantissa_bits", 7))
    return ClusterProfiles(ProfileSums(**values, mantissa_bits=bits), layout,
                           tuple(ds.attrs.get("quantiles", QUANTILES)))
