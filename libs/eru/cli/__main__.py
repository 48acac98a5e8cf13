"""`python -m eru.cli`: the same as the `eru` command."""

from eru.cli.app import main

main()
