"""`privrl.envs.eval_env_factory`: a dataset's evaluation environment, with its recipe's
environment arguments."""

from __future__ import annotations

from privrl.envs import eval_env_factory


def test_eval_env_factory_uses_the_recipes_env_kwargs() -> None:
    from gymnasium import spaces

    from privrl.data.dataset import DatasetMetadata
    from privrl.envs.hiv import observation_space

    meta = DatasetMetadata(
        observation_space=observation_space(),
        action_space=spaces.Discrete(4),
        env_id="privrl/HIV-v0",
        horizon=50,
        extra={"env_kwargs": {"interval": 20.0, "horizon": 50, "reward_scale": 1e-6}},
    )
    env = eval_env_factory(meta, 50)()
    sim = env.unwrapped.sim
    assert sim.interval == 20.0 and sim.horizon == 50
    assert sim.reward_weights.scale == 1e-6 and sim.reward_weights.r1 == 20000.0
    env.reset(seed=0)
    _, r, *_ = env.step(0)
    assert abs(r) < 100  # scaled: the unscaled reward is of order 1e4–1e6
    env.close()
    cart = DatasetMetadata(
        observation_space=spaces.Box(-1, 1, (4,)),
        action_space=spaces.Discrete(2),
        env_id="CartPole-v1",
    )
    env = eval_env_factory(cart, 1000)()
    assert env.spec.max_episode_steps == 1000
    env.close()
