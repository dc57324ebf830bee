"""Results as text: terminal tables, Markdown, CSV and JSON (``table``), one module per command.

Imports flow one way: ``analyses`` produce typed results, ``render`` turns them into strings,
the CLI prints them.
"""
