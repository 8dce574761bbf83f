"""The command line's private modules: what :mod:`mkdist.cli` (the commands themselves) uses to
read its options, say its errors and print its results."""
