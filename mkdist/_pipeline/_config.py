"""What a run is: its configuration (stored in the run store) and what ``cluster`` returns."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from numbers import Integral
from typing import Any

from .._core._kernel_specs import KernelSpec
from .._core._validation import Interval, NClusters, n_clusters_range, validate_params
from .._methods._registry import (
    AUTO_METHOD,
    DEFAULT_METHOD,
    available_methods,
    choose_method,
    get_method,
    method_parameters,
)
from ..errors import InputValidationError

__all__ = ["RunConfig", "ClusterResult"]

#: Run options that mean the same for every method that has them: ``mkdist.cluster`` takes
#: them as keyword arguments, where None means "the method's default".
SHARED_OPTIONS = ("kernels", "n_landmarks", "scale")


def _method_options(method: str) -> set[str]:
    """The parameters a run may give a method: its estimator's, less the run's own
    ``n_clusters`` and ``random_state`` (from the table, without importing the class)."""
    return set(method_parameters(method)) - {"n_clusters", "random_state"}


def _unknown_parameters(method: str, unknown: list[str], accepted: set[str]) -> InputValidationError:
    return InputValidationError(f"method {method!r} does not take {unknown}; its parameters are {sorted(accepted)}.")


def _plain(value: Any) -> Any:
    """Kernel specs and tuples as JSON-able values (a run store holds JSON, never pickles)."""
    if isinstance(value, KernelSpec):
        return dataclasses.asdict(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Every parameter of a run (JSON-able; stored in the run store's root attributes).

    Immutable: what a run decides (the method of ``method="auto"``, a seed adopted from the
    store or drawn) is a new config, :meth:`resolve` / :meth:`with_seed`, held by the run's
    plan (:func:`mkdist.pipeline.plan_run`), so no call changes a config another one holds.
    A new run option is a field here (or an estimator parameter in ``params``): the JSON
    (:meth:`to_json` / :meth:`from_json`) carries it to the store, the flows and the plan.

    Parameters
    ----------
    n_clusters : int, "auto" or [k_min, k_max]
        K, or "auto" / a range for the methods that choose K from their landmarks
        (``mkdist._methods._params.AUTO_N_CLUSTERS_METHODS``; a tuple is stored as a list).
    method : str, default=DEFAULT_METHOD ("mkc")
        A registered method (``mkdist.available_methods()``), or "auto": the method is chosen
        from the input's shape when the run opens (:meth:`resolve`, ``mkdist.choose_method``).
    random_state : int or None, default=None
        One seed for every random step of the run; None draws one when the run is opened
        (and a resumed run adopts the stored one): the plan's config holds the seed.
    params : dict, default={}
        Parameters of the method's estimator given for this run; the others are the
        estimator's defaults, so a run and the estimator fitted with the same parameters and
        seed give the same labels (tests/test_pipeline.py, ``test_pipeline_labels_are_the_estimators``).
    write_kernel_blocks : bool, default=False
        Also store every partial kernel block P_p (N x n x m values: 24 GB in float32 for
        N = 1M, n = 1000, m = 6), for methods that offer it (``optional_stages``).
    auto : dict or None, default=None
        Set by :meth:`resolve` for ``method="auto"``: the chosen method, the parameters the
        rule set, the reason and the facts of the data it decided on (stored with the run).
    """

    n_clusters: int | str | list[int]
    method: str = DEFAULT_METHOD
    random_state: int | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    write_kernel_blocks: bool = False
    auto: dict[str, Any] | None = None

    @classmethod
    def from_options(cls, **options: Any) -> RunConfig:
        """Build from keyword options as ``mkdist.cluster`` and the CLI take them.

        ``method_params`` (a dict) and any other keyword that is a parameter of the method's
        estimator go to ``params``; ``kernels`` / ``n_landmarks`` / ``scale`` set to None mean
        "the method's default".  Unknown names are refused with the list of valid ones.
        """
        options = dict(options)
        fields = {f.name for f in dataclasses.fields(cls)}
        method = options.get("method") or DEFAULT_METHOD
        if method == AUTO_METHOD:
            # Any method's parameter may be given; the chosen method's constraints check them
            # when the run opens (``resolve``).
            accepted = set().union(*(_method_options(m) for m in available_methods()))
        else:
            accepted = _method_options(method)
        params = dict(options.pop("params", None) or {})
        method_params = dict(options.pop("method_params", None) or {})
        unknown = sorted(set(method_params) - accepted)
        if unknown:
            raise _unknown_parameters(method, unknown, accepted)
        for name in [k for k in options if k not in fields]:
            value = options.pop(name)
            if value is None and name in SHARED_OPTIONS:
                continue
            if name not in accepted:
                what = "use" if name in SHARED_OPTIONS else "take"
                raise InputValidationError(
                    f"method {method!r} does not {what} `{name}`; its parameters are {sorted(accepted)}, "
                    f"and the run's own are {sorted(fields - {'params'})}.")
            if name in method_params:
                raise InputValidationError(
                    f"`{name}` is given both as a run option and in method_params; give it once.")
            params[name] = value
        params.update(method_params)
        options["method"] = method
        return cls(params=params, **options)

    def __post_init__(self):
        # Normalised once here, the only writes to a frozen config.
        _set = object.__setattr__.__get__(self)
        _set("params", {k: _plain(v) for k, v in dict(self.params or {}).items()})
        # A run's seed is stored with it (to resume with the same random choices): an integer.
        # K against the method's own constraint (NClusters(2) for "auto", whose methods all
        # need two clusters): a K the method refuses gets the one message for it, whether it
        # also fails a looser bound (0) or not (1).
        k_rule = method_parameters(self.method)["n_clusters"] if self.method != AUTO_METHOD else [NClusters(2)]
        validate_params({"random_state": [Interval(Integral, 0, 2**32 - 1), None], "n_clusters": k_rule},
                        {"random_state": self.random_state, "n_clusters": self.n_clusters})
        _set("random_state", None if self.random_state is None else int(self.random_state))
        asked = n_clusters_range(self.n_clusters, 1)
        if asked is None:
            _set("n_clusters", int(self.n_clusters))
        elif not isinstance(self.n_clusters, str):
            _set("n_clusters", [int(k) for k in self.n_clusters])  # JSON: the stored form

    # A frozen dataclass would hash its fields, and ``params`` is a dict: a config is a value
    # compared by equality, never a key.
    __hash__ = None  # type: ignore[assignment]

    @property
    def estimator_class(self) -> type:
        if self.method == AUTO_METHOD:
            raise InputValidationError('method="auto" is resolved from the input first (RunConfig.resolve).')
        return get_method(self.method)

    def resolve(self, views: Mapping[str, Any]) -> RunConfig:
        """For ``method="auto"``: the config with the method chosen from the input (a new
        config; self when the method is given).

        The rule's parameters come first, the user's own override them; both must be
        parameters of the chosen method.  The choice, its reason and the facts behind it are
        kept in ``auto`` (stored with the run).  Deterministic for a given input (the facts
        are read from its first rows), so a resumed run resolves to the same method.
        """
        if self.method != AUTO_METHOD:
            return self
        choice = choose_method(views, self.n_clusters)
        accepted = _method_options(choice.method)
        refused = sorted(set(self.params) - accepted)
        if refused:
            raise InputValidationError(
                f'method="auto" chose {choice.method!r} ({choice.reason}), which does not take {refused}; '
                f"its parameters are {sorted(accepted)}.")
        return dataclasses.replace(self, method=choice.method, auto=choice.to_json(),
                                   params={**{k: _plain(v) for k, v in choice.params.items()}, **self.params})

    def with_seed(self, random_state: int) -> RunConfig:
        """The config with its seed set (a stored run's, or one drawn for a new run)."""
        return dataclasses.replace(self, random_state=random_state)

    def make_estimator(self):
        """The method's estimator with this run's parameters (its own defaults for the others)."""
        return self.estimator_class(n_clusters=self.n_clusters, random_state=self.random_state, **self.params)

    def check_params(self) -> None:
        """Check the run's parameters against the method's constraint table (no input needed;
        ``method="auto"`` is checked once :meth:`resolve` has chosen).

        Reads the table without importing a built-in estimator class (``mkdist._methods._params``), so
        the CLI refuses a bad argument before scikit-learn loads; the method's defaults are
        checked by its tests, the values given here are checked now.
        """
        if self.method == AUTO_METHOD:
            return
        table = method_parameters(self.method)
        accepted = _method_options(self.method)
        unknown = sorted(set(self.params) - accepted)
        if unknown:
            raise _unknown_parameters(self.method, unknown, accepted)
        given = {**self.params, "n_clusters": self.n_clusters, "random_state": self.random_state}
        validate_params({k: table[k] for k in given}, given)

    def validate(self, views: Mapping[str, Any]) -> dict[str, Any]:
        """Check every parameter against the input's metadata (no data read).

        Returns
        -------
        dict
            Values the estimator resolved from the input (e.g. ``n_landmarks``).
        """
        cls = self.estimator_class
        if self.write_kernel_blocks and "kernel_blocks" not in cls.optional_stages:
            raise InputValidationError(
                f"method {self.method!r} cannot write kernel blocks (write_kernel_blocks=True); the methods "
                f"that can: {_methods_with('kernel_blocks')}.")
        return self.make_estimator().validate_input(dict(views))

    def to_json(self) -> dict[str, Any]:
        """The config as JSON (what the store's ``params`` attribute and a plan's JSON hold)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunConfig:
        """The config of :meth:`to_json` (or of a store's ``params``); unknown keys are refused
        with the valid ones."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise InputValidationError(f"a run config has no {unknown}; its keys are {sorted(fields)} (estimator "
                                       "parameters go in `params`).")
        return cls(**dict(data))


def _methods_with(stage: str) -> list[str]:
    return [m for m in available_methods() if stage in get_method(m).optional_stages]


@dataclasses.dataclass
class ClusterResult:
    """What :func:`mkdist.cluster` returns.

    Attributes
    ----------
    labels : dask.array.Array of shape (N,)
        Cluster of every point, read lazily from the store.
    model : estimator
        The fitted estimator of the run's method, centroids included, rebuilt from the store.
    store : RunStore
    timings : dict of str to float
        Seconds per stage of this call (0.0 for a stage resumed from the store).
    skipped : list of str
        Stages found complete in the store and not recomputed.
    metrics : dict
        The run summary (also in the store's ``metrics`` stage).
    report : str or None
        Where the run report was written (``report=True``), else None.
    report_timings : dict of str to float
        With a report: ``tail_s``, the seconds from the last stage's end to the written report,
        ``foreground_s``, the seconds the stages waited for the report (handing it what to
        draw), ``background_cpu_s``, the CPU seconds of the drawing process, and ``timeline``
        (:attr:`mkdist._report._summary.ReportDraft.timeline`).
    """

    labels: Any
    model: Any
    store: Any
    timings: dict[str, float]
    skipped: list[str]
    metrics: dict[str, Any]
    report: str | None = None
    report_timings: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def profiles(self):
        """The profile of every cluster in the input's own columns (the run's ``profiles``
        stage, :class:`mkdist._core._profile_tables.ClusterProfiles`: ``.clusters``,
        ``.numeric``, ``.categories``, ``.separation``, ... as pandas DataFrames), or None for a
        store without one."""
        from ._profiles import read_profiles

        return read_profiles(self.store)
