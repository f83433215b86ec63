"""Imports every built-in reward module so that each registers its names."""

from ptxgym.rewards import drkernel, fast_p, kevin, milestones, speedup, staged, target  # noqa: F401
