"""The adversarial corpus the evaluator is played against (``corpus``): hostile candidates and controls."""

__all__: list[str] = []  # a folder of modules: import them by name
