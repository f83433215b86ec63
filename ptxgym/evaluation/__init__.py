"""The GPU side of the pipeline, split at the trust boundary.

- ``trusted/``: the evaluator process. It owns every parameter, inputs and references, checks outputs,
  keeps the clock, and writes the verdict (``base.Evaluator`` is the interface, ``local`` the local GPU
  backend).
- ``sandboxed/``: code that runs inside the disposable candidate process (``worker``, the profiler
  ``driver``, the host ``sandbox``, CUPTI spans, the library baselines). Nothing it reports is trusted
  without a check on the trusted side.
- ``protocol``: the typed messages between the two; ``compare``: the pure output comparison both use.
- ``choose.select_evaluator``: which backend an env attaches.

No module imported here pulls in torch.
"""
