"""The `hutch` command: run the server, and manage sandboxes and templates from a terminal.

Client commands read HUTCH_API_KEY and HUTCH_BASE_URL, or, on the server's own machine, the
client.env that `hutch serve` writes into its data dir. One module per command group registers its
subcommands and holds their handlers; `program` puts them together; `shared` is what they all use.
"""

from hutch.cli.program import main

__all__ = ["main"]
