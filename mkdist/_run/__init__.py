"""The run driver: mkdist.cluster / assign end to end, and the demo."""
