"""The XL torso's PPO replay: one segment over the stored memory (``StackTorso.replay``)
against the T x b one-step segments over traced layer inputs of an earlier commit,
alternated in one process on the same rollout: ms per PPO minibatch (forward, backward,
AdamW step), one thread, default torso (d 64, 2 layers, 4 heads, memory 64), 32 rows x 64
steps of popgym-RepeatPreviousEasy-v0, 16-row minibatches, best and median of 5 rounds of 8.

    git show ee4b038:src/tfamily/rl/torso.py > /tmp/old_torso.py
    python experiments/rl/rl_replay_ab.py gtrxl,trxl_i,transformer_xl [/tmp/old_torso.py]
"""
import importlib.util
import statistics
import sys
import time
import types

import tfamily.rl  # noqa: F401  (the package the old module is loaded into)

import torch

from tfamily.rl.envs import VecEnv
from tfamily.rl.rollout import collect, minibatch
from tfamily.rl.train import make_policy, rl_config

spec = importlib.util.spec_from_file_location("tfamily.rl.old_torso",
                                              sys.argv[2] if len(sys.argv) > 2 else "/tmp/old_torso.py")
old = importlib.util.module_from_spec(spec)  # a module of the package, so its relative imports resolve
spec.loader.exec_module(old)
torch.set_num_threads(1)
ENV = "popgym-RepeatPreviousEasy-v0"
for member in sys.argv[1].split(","):
    torch.manual_seed(0)
    policy, _ = make_policy(rl_config(ENV, member, 4096, progress=False, tensorboard=False))
    torso, new_replay = policy.torso, policy.torso.replay
    envs = VecEnv(ENV, 32, 0)
    state, starts = policy.new_state(), torch.zeros(32, dtype=torch.bool)
    torso.trace = types.MethodType(old.StackTorso.trace, torso)  # the old replay needs full traces
    policy.eval()
    for _ in range(2):  # a second rollout starts from a carried memory
        rollout, start, starts, _ = collect(policy, envs, state, starts, 64)
    policy.train()
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-9)
    routes = {"old": types.MethodType(old.StackTorso.replay, torso), "new": new_replay}
    times = {r: [] for r in routes}
    for rnd in range(5):
        for name, replay in (routes.items() if rnd % 2 == 0 else reversed(routes.items())):
            torso.replay = replay
            t0 = time.perf_counter()
            for k in range(8):
                rows = torch.randperm(32, generator=torch.Generator().manual_seed(k))[:16]
                loss, _ = policy.loss(minibatch(rollout, start, rows, policy))
                opt.zero_grad()
                loss.backward()
                opt.step()
            times[name].append((time.perf_counter() - t0) / 8 * 1e3)
    o, n = times["old"], times["new"]
    print(f"{member:15s} old {min(o):6.1f} / {statistics.median(o):6.1f} ms   new {min(n):6.1f} / "
          f"{statistics.median(n):6.1f} ms   speed-up {statistics.median(o) / statistics.median(n):.2f}x", flush=True)
    envs.close()
