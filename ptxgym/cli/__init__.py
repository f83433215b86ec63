"""The ``ptxgym`` command: one small module per subcommand."""

__all__: list[str] = []  # a folder of modules: import them by name
