"""Reinforcement learning with memory torsos: vectorised gymnasium/POPGym environments
(``envs.py``), observation encoders (``encoders.py``), an actor-critic over any family
stack with memory or an LSTM/GRU baseline (``torso.py``, ``policy.py``), rollouts with
per-row episode resets (``rollout.py``), GAE and PPO (``gae.py``, ``ppo.py``), and the
rollout ``Task`` that the shared training loop drives (``task.py``)."""
