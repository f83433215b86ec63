"""Code that runs in the disposable candidate process; it imports only ``protocol`` and ``compare``."""

__all__: list[str] = []  # a folder of modules: import them by name
