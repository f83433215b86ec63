"""Code that runs in the disposable candidate process; it imports only ``protocol`` and ``compare``."""
