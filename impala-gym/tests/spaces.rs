//! Spaces come from the env: Dict observations flattened, image observations scaled, every
//! action space, Box actions clipped.

use impala_core::{Env, Space};
use impala_gym::GymEnvPool;

use crate::{config, settings, TestResult};

fn spaces_env(action: &str) -> Result<impala_gym::GymEnv, impala_gym::GymError> {
    let mut s = settings("impala_test_envs:Spaces");
    s.env_config = config(&[("action", action.into())]);
    GymEnvPool::new(s).make(0, 0, 0)
}

#[test]
fn dict_observations_are_flattened_in_gymnasium_order() -> TestResult {
    let mut env = spaces_env("box")?;
    // gymnasium sorts Dict keys: bits (MultiBinary 2), mode (Discrete 3, one-hot), pos (Box 2).
    let Space::Box { shape, .. } = &env.spec().observation_space else {
        return Err("not a Box".into());
    };
    assert_eq!(shape, &[7]);
    let mut obs = [0.0f32; 7];
    env.reset(Some(0), &mut obs)?;
    assert_eq!(obs, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]);
    // Box actions are clipped to [-1, 1] before the env sees them.
    env.step(&[0.5, 7.0], &mut obs)?;
    assert_eq!(&obs[5..], &[0.5, 1.0]);
    Ok(())
}

#[test]
fn discrete_action_spaces() -> TestResult {
    let mut env = spaces_env("multi_discrete")?;
    assert_eq!(env.spec().action_space, Space::MultiDiscrete(vec![3, 4]));
    let mut obs = [0.0f32; 7];
    env.reset(Some(0), &mut obs)?;
    env.step(&[2.0, 3.0], &mut obs)?;
    assert_eq!(&obs[5..], &[2.0, 3.0]);
    assert!(env.step(&[3.0, 0.0], &mut obs).is_err(), "index out of range is refused");
    let env = spaces_env("multi_binary")?;
    assert_eq!(env.spec().action_space, Space::MultiDiscrete(vec![2, 2]));
    Ok(())
}

#[test]
fn uint8_images_arrive_as_bytes_in_hwc_order() -> TestResult {
    let mut s = settings("impala_test_envs:Image");
    s.env_config = config(&[("height", 6.into()), ("width", 4.into()), ("channels", 3.into())]);
    let mut env = GymEnvPool::new(s).make(0, 0, 0)?;
    assert_eq!(env.spec().observation_space, Space::Bytes { shape: vec![6, 4, 3] });
    let mut obs = vec![0.0f32; 72];
    env.reset(Some(0), &mut obs)?;
    // One half of the columns is 255, the other 20, in every row and channel (HWC).
    let column = |i: usize| (i / 3) % 4;
    let bright: Vec<usize> = (0..4).filter(|&w| obs[w * 3] == 255.0).collect();
    assert!(bright == [0, 1] || bright == [2, 3], "{obs:?}");
    for (i, &v) in obs.iter().enumerate() {
        assert_eq!(v, if bright.contains(&column(i)) { 255.0 } else { 20.0 }, "value {i}");
    }
    Ok(())
}

#[test]
fn discrete_observations_are_indices() -> TestResult {
    let mut env = GymEnvPool::new(settings("FrozenLake-v1")).make(0, 0, 0)?;
    assert_eq!(env.spec().observation_space, Space::Discrete(16));
    assert_eq!(env.spec().max_episode_steps, Some(100));
    let mut obs = [9.0f32];
    env.reset(Some(0), &mut obs)?;
    assert_eq!(obs, [0.0]);
    Ok(())
}
