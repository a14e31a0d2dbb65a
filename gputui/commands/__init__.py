"""Subcommands: each module has ``add_parser(subparsers, common)`` and ``run(ctx) -> int``."""
