"""The adversarial corpus the evaluator is played against (``corpus``): hostile candidates and controls."""
