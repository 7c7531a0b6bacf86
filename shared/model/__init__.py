"""The model layer: one streaming interface, providers behind it."""
