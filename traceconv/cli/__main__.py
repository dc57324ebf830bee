from traceconv.cli import main

main()
