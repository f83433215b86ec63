"""The trusted side of the evaluator: everything that decides a verdict runs here, outside the candidate."""
