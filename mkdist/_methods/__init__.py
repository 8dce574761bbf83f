"""The methods: registry, parameter tables, base estimators, one module per method."""
