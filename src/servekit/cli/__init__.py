"""The `servekit` command line (shell): one thin module per command."""
