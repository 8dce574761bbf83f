"""The numerical core: row engine, validation, kernels, graphs, k-means, SimpleMKKM, the K rule."""
