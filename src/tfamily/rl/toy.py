"""A two-step memory task: remember the first observation.

Step 0 shows one of ``n_symbols`` symbols (the action there earns nothing); step 1
shows a blank (symbol ``n_symbols``) and the action must name the first symbol:
+1 if it does, -1 if not, then the episode ends. A memoryless policy scores 0 in
expectation (1 in n right at best, -1 + 2/n), a policy with memory 1. Registered as
``tfamily/RememberFirst-v0`` for tests and quick checks of a torso's memory.
"""
from __future__ import annotations

import gymnasium as gym

ID = "tfamily/RememberFirst-v0"


class RememberFirst(gym.Env):
    def __init__(self, n_symbols: int = 4):
        self.n = n_symbols
        self.observation_space = gym.spaces.Discrete(n_symbols + 1)
        self.action_space = gym.spaces.Discrete(n_symbols)
        self.first, self.t = 0, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.first, self.t = int(self.np_random.integers(self.n)), 0
        return self.first, {}

    def step(self, action):
        self.t += 1
        if self.t == 1:
            return self.n, 0.0, False, False, {}
        return self.n, 1.0 if int(action) == self.first else -1.0, True, False, {}


def register() -> None:
    if ID not in gym.registry:
        gym.register(ID, entry_point=RememberFirst)
