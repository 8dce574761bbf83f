"""Prefect deployment steps of mkdist (named in ``deploy/prefect.yaml``).

``enter_data_root`` is the deployments' pull step: every flow run of a deployment starts in
the data root, so the deployments' parameters are paths relative to it and the one place
that says where the data lives is the ``MKDIST_DATA_ROOT`` environment variable of the
process that runs the flow (the Prefect worker's environment, which a process worker passes
on to its flow runs; the ConfigMap in the Kubernetes example; the compose file).
"""

from __future__ import annotations

import os
import socket

from mkdist.errors import InputValidationError

__all__ = ["DATA_ROOT_VARIABLE", "DataRootError", "data_root", "enter_data_root"]

#: The environment variable naming the shared data directory of the deployments.
DATA_ROOT_VARIABLE = "MKDIST_DATA_ROOT"


class DataRootError(InputValidationError):
    """``MKDIST_DATA_ROOT`` is unset, or names no directory on the host of the flow run."""


def data_root() -> str:
    """The data root of this process: ``MKDIST_DATA_ROOT``, checked, as an absolute path.

    Returns
    -------
    str
        The absolute path of an existing directory.

    Raises
    ------
    DataRootError
        The variable is unset or empty, names no directory, or a directory this process
        cannot enter; the message says which, on which host, and what to set.
    """
    raw = os.environ.get(DATA_ROOT_VARIABLE, "").strip()
    host = socket.gethostname()
    if not raw:
        raise DataRootError(
            f"{DATA_ROOT_VARIABLE} is not set for this flow run (host {host}): set it in the environment "
            "of the Prefect worker to the shared data directory (the same path on every Dask worker), "
            f"e.g. {DATA_ROOT_VARIABLE}=/data prefect worker start --pool mkdist")
    root = os.path.abspath(os.path.expanduser(raw))
    if not os.path.isdir(root):
        what = "is not a directory" if os.path.exists(root) else "does not exist"
        raise DataRootError(
            f"{DATA_ROOT_VARIABLE}={raw} {what} on host {host}: mount the shared data directory there, "
            f"or set {DATA_ROOT_VARIABLE} in the Prefect worker's environment to where it is mounted")
    if not os.access(root, os.R_OK | os.W_OK | os.X_OK):
        raise DataRootError(f"{DATA_ROOT_VARIABLE}={raw} on host {host} is not readable and writable by "
                            f"this process (uid {os.getuid()}): fix its permissions")
    return root


def enter_data_root() -> dict[str, str]:
    """Pull step: change the flow run's working directory to the data root.

    Used in ``deploy/prefect.yaml`` as ``- mkdist.flows.steps.enter_data_root: {}``, instead
    of Prefect's ``set_working_directory`` with a fixed path: the path comes from the run's
    host at run time, and a missing one fails with one line that says what to set, not a
    bare ``FileNotFoundError`` from ``os.chdir``.  (Prefect's own ``{{ $VAR }}`` templating
    would not do: an unset variable renders as an empty string, silently.)

    Returns
    -------
    dict
        ``{"directory": <data root>}``, the output a later step may reference as
        ``{{ directory }}`` (the same key ``set_working_directory`` returns).

    Raises
    ------
    DataRootError
        See :func:`data_root`.
    """
    root = data_root()
    os.chdir(root)
    return {"directory": root}
