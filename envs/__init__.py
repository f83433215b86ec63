"""Gymnasium environments of ptxgym and the task data they serve (``envs/data``).

Importing this package is cheap: the env class is loaded by Gymnasium from its entry point string
when an env is made.
"""

from ptxgym.envs.registration import register_envs

__all__ = ["register_envs"]
