"""The trusted side of the evaluator: everything that decides a verdict runs here, outside the candidate."""

__all__: list[str] = []  # a folder of modules: import them by name
