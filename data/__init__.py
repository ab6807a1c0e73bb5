"""Bundled data (installed as the package `specsim_data`; see common/bundled.py)."""
