"""`python -m servekit` runs the command-line interface (shell)."""

from servekit.cli.main import main

main()
