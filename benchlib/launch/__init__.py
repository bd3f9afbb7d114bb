"""Running notebooks: every papermill execution, local runs, kernels watched from outside, progress, signals, the Dask cluster. Imports the layers below analysis."""
