"""The ground floor: records every other layer shares, and nothing that runs a tool.

``errors`` (one exception tree), ``settings`` (the one reader of ``PTXGYM_*``), ``schema``
(FlashInfer-Trace), ``arch`` (architecture specs), ``tasks`` (the catalog), ``feedback`` (the per-turn
record) and ``feedback_text`` (its rendering for a model), ``turns`` (trajectory JSONL records),
``version``. Modules here import only each other.
"""
