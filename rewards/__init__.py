"""Reward shaping: small pure functions of the Feedback record (and the episode so far).

A reward function takes the turn's Feedback and the Feedbacks of earlier turns of the episode and returns
a ``RewardResult``: the total and every named component (logged even at weight 0). Envs look rewards up
by name with ``resolve_reward``.
"""

from ptxgym.rewards.base import RewardFn, RewardResult, register_reward, resolve_reward, reward_names

__all__ = ["RewardFn", "RewardResult", "register_reward", "resolve_reward", "reward_names"]
