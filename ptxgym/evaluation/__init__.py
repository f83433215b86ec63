"""The GPU side of the pipeline: run, check, time and profile built candidates.

``base`` holds the interface (``Evaluator``, ``EvalSettings``, ``BuiltCandidate``, ``GpuVerdict``);
``select.select_evaluator`` picks a backend; ``local.LocalGpuEvaluator`` is the trusted local one. No
module imported here pulls in torch.
"""
