"""The ``ptxgym`` command: one small module per subcommand."""
