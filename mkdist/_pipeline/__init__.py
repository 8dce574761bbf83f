"""The pipeline: run configuration, input readers, stages, drift, the Dask runtime."""
