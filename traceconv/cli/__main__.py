from traceconv.cli import entry

entry()
