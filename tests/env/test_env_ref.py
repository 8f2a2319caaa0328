"""redco's classic-control environments (src/env/classic_control.c) against Gymnasium 0.29.1:
episodes traced by `test_env --trace` are replayed in Gymnasium from the same initial state
(env.unwrapped.state) with the same actions, and every step's observation (float32, within
1e-6 relative to the larger of |value| and 1), reward (1e-9) and end flags must agree.
CartPole: random episodes (they end when the pole falls) and balancing ones (they run to
the 500-step time limit); Pendulum: 200 steps of random torques, half of them past the
bound of 2 (clipped).
"""
import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np

from refkit import check, finish, options


def episodes(build, name, seed, n):
    r = subprocess.run([os.path.join(build, "test_env"), "--trace", name, str(seed), str(n)],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"test_env --trace {name}: exit {r.returncode}: {r.stderr[-500:]}")
    eps = []
    for line in r.stdout.splitlines():
        rec = json.loads(line)
        if "episode" in rec:
            eps.append((rec["state"], []))
        else:
            eps[-1][1].append(rec)
    return eps


def replay(name, eps):
    env = gym.make(name)
    state_dim = 4 if name.startswith("CartPole") else 2
    worst_obs, worst_reward, steps, lengths = 0.0, 0.0, 0, []
    for k, (state, trace) in enumerate(eps):
        env.reset(seed=k)
        env.unwrapped.state = np.array(state[:state_dim], dtype=np.float64)
        if name.startswith("CartPole"):
            env.unwrapped.steps_beyond_terminated = None
        for i, rec in enumerate(trace):
            action = int(rec["action"]) if name.startswith("CartPole") else np.array([rec["action"]], np.float32)
            obs, reward, term, trunc, _ = env.step(action)
            ours = np.array(rec["obs"], np.float64)
            err = float(np.max(np.abs(ours - obs.astype(np.float64)) / np.maximum(np.abs(obs), 1.0)))
            worst_obs = max(worst_obs, err)
            worst_reward = max(worst_reward, abs(rec["reward"] - float(reward)) / max(abs(float(reward)), 1.0))
            same_end = bool(rec["terminated"]) == bool(term) and bool(rec["truncated"]) == bool(trunc)
            check(same_end, f"{name} episode {k} step {i}: ends (terminated, truncated) "
                            f"({rec['terminated']}, {rec['truncated']}) vs Gymnasium ({term}, {trunc})")
            if not same_end:
                break
            steps += 1
        lengths.append(len(trace))
    print(f"{name}: {len(eps)} episodes, {steps} steps (lengths {lengths}); worst observation "
          f"difference {worst_obs:.2e}, reward {worst_reward:.2e}")
    check(worst_obs < 1e-6, f"{name}: observations differ from Gymnasium's by {worst_obs}")
    check(worst_reward < 1e-9, f"{name}: rewards differ from Gymnasium's by {worst_reward}")
    return lengths


def main():
    args = options()
    lengths = replay("CartPole-v1", episodes(args.build, "CartPole-v1", 7, 6))
    check(max(lengths) == 500 and min(lengths) < 100,
          f"CartPole-v1: the traces should include falls and the 500-step limit: {lengths}")
    lengths = replay("Pendulum-v1", episodes(args.build, "Pendulum-v1", 7, 3))
    check(lengths == [200] * 3, f"Pendulum-v1: episode lengths {lengths}, want 200 each")
    return finish("test_env_ref")


if __name__ == "__main__":
    sys.exit(main())
