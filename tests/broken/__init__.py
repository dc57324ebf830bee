"""Broken inputs made from real traces (make_broken.py)."""
