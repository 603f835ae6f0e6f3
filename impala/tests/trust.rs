//! Runs a user can trust: verified checkpoints, evaluation without the algorithm, resumed
//! runs that never sample with stale or initial weights, a last good checkpoint after the
//! learner dies, and random streams that move on with every restore and runner restart.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use impala::checkpoint::{CONFIG_FILE, LEARNER_DIR, MANIFEST_FILE, STATE_FILE};
use impala::config::ImpalaConfig;
use impala::core::{CoreError, Env, EnvSpec, Space, StepOutcome};
use impala::learner::MODEL_FILE;
use impala::sampler::{EnvContext, EnvFactory};
use impala::{evaluate_checkpoint, Impala, ImpalaError, PolicyFragment, DEFAULT_POLICY_ID};

use crate::common::TestResult;

fn quick() -> ImpalaConfig {
    let mut config = ImpalaConfig {
        min_time_s_per_iteration: 0.3,
        num_env_runners: 1,
        num_envs_per_env_runner: 4,
        rollout_fragment_length: 10,
        train_batch_size: 80,
        seed: Some(11),
        ..ImpalaConfig::default()
    };
    config.model.fcnet_hiddens = vec![32, 32];
    config
}

/// What a test returns besides `()`.
type Boxed<T> = Result<T, Box<dyn std::error::Error>>;

/// The first fragments the algorithm's env runners deliver (at least `n`; none is counted or
/// trained on).
fn first_fragments(algo: &mut Impala, n: usize) -> Boxed<Vec<PolicyFragment>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut fragments = Vec::new();
    while fragments.len() < n {
        if Instant::now() > deadline {
            return Err(format!("only {} fragments in 60 s", fragments.len()).into());
        }
        fragments.extend(algo.env_runner_group()?.sample()?);
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(fragments)
}

fn message<T: std::fmt::Debug>(result: Result<T, ImpalaError>) -> Result<String, String> {
    match result {
        Ok(v) => Err(format!("expected an error, got {v:?}")),
        Err(e) => Ok(impala::error_chain(&e)),
    }
}

/// Sets the first element of tensor `name` of a safetensors file to NaN.
fn poison(file: &Path) -> Boxed<String> {
    let mut tensors = tch::Tensor::read_safetensors(file)?;
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let (name, t) = tensors.first_mut().ok_or("no tensors")?;
    let mut data = Vec::<f32>::try_from(&t.f_flatten(0, -1)?)?;
    data[0] = f32::NAN;
    *t = tch::Tensor::f_from_slice(&data)?.f_view(t.size().as_slice())?;
    let name = name.clone();
    tch::Tensor::write_safetensors(&tensors, file)?;
    Ok(name)
}

/// The learner's weights version saved in a checkpoint (it may be ahead of the result's
/// `num_grad_updates_lifetime`: the learner trains on while the driver saves).
fn saved_version(ckpt: &Path) -> Boxed<u64> {
    let file = ckpt.join(LEARNER_DIR).join(impala::learner::LEARNER_STATE_FILE);
    let tensors = tch::Tensor::read_safetensors(file)?;
    let (_, t) = tensors.iter().find(|(n, _)| n == "meta.version").ok_or("no meta.version")?;
    Ok(u64::try_from(i64::try_from(t)?)?)
}

/// A trained-for-an-iteration CartPole checkpoint.
fn checkpoint(dir: &Path) -> Boxed<PathBuf> {
    let mut algo = Impala::new(quick().validate()?)?;
    algo.train()?;
    let path = algo.save(dir)?;
    algo.stop()?;
    Ok(path)
}

#[test]
fn damaged_files_and_non_finite_weights_are_refused_by_restore_and_evaluation() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ckpt = checkpoint(dir.path())?;
    assert!(ckpt.join(MANIFEST_FILE).is_file());
    let eval = evaluate_checkpoint(&ckpt, 2, false)?;
    assert_eq!(eval.num_episodes, 2);
    let check = |needles: &[&str]| -> TestResult {
        let mut algo = Impala::new(quick().validate()?)?;
        let restored = message(algo.restore(&ckpt))?;
        let evaluated = message(evaluate_checkpoint(&ckpt, 2, false))?;
        for err in [restored, evaluated] {
            for needle in needles {
                assert!(err.contains(needle), "`{needle}` not in `{err}`");
            }
            assert!(!err.contains("--resume"), "{err}");
        }
        algo.stop()?;
        Ok(())
    };

    // One flipped bit in the weights (their data, not the header) is refused, naming the file.
    let model = ckpt.join(LEARNER_DIR).join(MODEL_FILE);
    let original = std::fs::read(&model)?;
    let mut flipped = original.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x10;
    std::fs::write(&model, &flipped)?;
    check(&["corrupt checkpoint", "learner/model.safetensors", "SHA-256"])?;
    std::fs::write(&model, &original)?;

    // A truncated config.json is corrupt (it used to be an "incompatible version").
    let config = ckpt.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&config)?;
    std::fs::write(&config, &text[..text.len() / 2])?;
    check(&["corrupt checkpoint", "config.json", "truncated"])?;
    std::fs::write(&config, &text)?;

    // NaN weights in a checkpoint that passes its checksums (a format-1 checkpoint, which has
    // none) are refused by the learner, naming the tensor.
    std::fs::remove_file(ckpt.join(MANIFEST_FILE))?;
    let state = ckpt.join(STATE_FILE);
    let mut value: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state)?)?;
    value["format_version"] = 1.into();
    std::fs::write(&state, value.to_string())?;
    assert_eq!(evaluate_checkpoint(&ckpt, 1, false)?.num_episodes, 1, "format 1 still reads");
    let tensor = poison(&model)?;
    check(&["corrupt checkpoint", "non-finite", &format!("`{tensor}`")])?;
    Ok(())
}

#[test]
fn evaluate_checkpoint_needs_only_the_checkpoint() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ckpt = checkpoint(dir.path())?;
    // A run folder means its newest checkpoint; seeded and greedy, the result repeats.
    let greedy = evaluate_checkpoint(dir.path(), 3, false)?;
    assert_eq!((greedy.num_episodes, greedy.num_env_steps_sampled > 0), (3, true));
    assert_eq!(evaluate_checkpoint(&ckpt, 3, false)?, greedy);
    let explore = evaluate_checkpoint(&ckpt, 2, true)?;
    assert_eq!(explore.num_episodes, 2);
    let err = message(evaluate_checkpoint(&dir.path().join("nowhere"), 1, false))?;
    assert!(err.contains("no checkpoint found"), "{err}");
    Ok(())
}

/// 50 steps whatever the action, observation always 0, reward 1 for action 1 and 0 for
/// action 0: an episode's return counts the policy's ones, so episodes tell policies apart. A
/// policy that picks 1 with probability 0.99 or more returns 45 or more with probability
/// 1 - 2e-5; the initial (about 50:50) policy returns 40 or more with probability 1e-5.
struct PickOne {
    spec: EnvSpec,
    t: usize,
}

impl Env for PickOne {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }
    fn reset(&mut self, _: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
        self.t = 0;
        obs[0] = 0.0;
        Ok(())
    }
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome, CoreError> {
        self.t += 1;
        obs[0] = 0.0;
        let reward = if action[0] == 1.0 { 1.0 } else { 0.0 };
        Ok(StepOutcome { reward, terminated: self.t == 50, truncated: false })
    }
}

/// A factory of [`PickOne`] envs, counting the envs it builds in `built`.
fn pick_one(built: Arc<AtomicUsize>) -> Result<EnvFactory, CoreError> {
    let spec = EnvSpec {
        id: "PickOne".into(),
        observation_space: Space::continuous(vec![0.0], vec![1.0])?,
        action_space: Space::Discrete(2),
        max_episode_steps: None,
    };
    Ok(Arc::new(move |_: &EnvContext| {
        built.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(PickOne { spec: spec.clone(), t: 0 }) as Box<dyn Env>)
    }))
}

#[test]
fn a_restored_algorithm_never_samples_with_its_initial_weights() -> TestResult {
    let mut config = quick();
    config.env = "PickOne".into();
    config.entropy_coeff = 0.0;
    config.lr = 0.01;
    let build = |config: &ImpalaConfig| {
        let factory = pick_one(Arc::default())?;
        Impala::builder(config.clone().validate()?).env_factory(factory).build()
    };
    // Train until every episode of the window picks (almost) only ones.
    let dir = tempfile::tempdir()?;
    let mut algo = build(&config)?;
    let started = Instant::now();
    let trained = loop {
        let result = algo.train()?;
        if result.episode_return_min >= 48.0 {
            break result;
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err(format!("PickOne did not train: {}", result.progress_line()).into());
        }
    };
    let ckpt = algo.save(dir.path())?;
    algo.stop()?;
    let version = saved_version(&ckpt)?;
    assert!(version > 0);

    // Built (its runners sample with the initial weights at once) and restored: the runners
    // act with the restored weights from their first step.
    let mut restored = build(&config)?;
    std::thread::sleep(Duration::from_millis(200));
    restored.restore(&ckpt)?;
    let fragments = first_fragments(&mut restored, 4)?;
    for f in &fragments {
        assert!(
            f.batches[0].weights_version.iter().all(|&v| v == version),
            "{:?}",
            f.batches[0].weights_version
        );
    }
    restored.stop()?;

    // Resumed (the policy held fixed, `_skip_learners`, so episodes are the restored policy's
    // and no later one's): no episode of the initial policy enters the first iterations'
    // window, which the restore carried over (its minimum was 48).
    config.skip_learners = true;
    let mut restored = build(&config)?;
    std::thread::sleep(Duration::from_millis(200));
    restored.restore(&ckpt)?;
    let mut episodes = 0;
    while episodes < 100 {
        let result = restored.train()?;
        episodes += result.num_episodes;
        assert!(
            result.episode_return_min >= 40.0,
            "after {} resumed iteration(s) an episode returned {}",
            result.training_iteration - trained.training_iteration,
            result.episode_return_min
        );
        assert!(result.training_iteration < trained.training_iteration + 100, "no episodes");
    }
    restored.stop()?;
    Ok(())
}

#[test]
fn built_restored_the_env_runners_start_once_with_the_restored_weights() -> TestResult {
    let config = quick();
    let built = Arc::new(AtomicUsize::new(0));
    let build = |restore: Option<&Path>| {
        let factory = pick_one(Arc::clone(&built))?;
        let mut builder = Impala::builder(config.clone().validate()?).env_factory(factory);
        if let Some(path) = restore {
            builder = builder.restore_from(path);
        }
        builder.build()
    };
    let dir = tempfile::tempdir()?;
    let mut algo = build(None)?;
    algo.train()?;
    // Envs built by a fresh run: the runners' (and any probe's).
    let fresh = built.swap(0, Ordering::SeqCst);
    let ckpt = algo.save(dir.path())?;
    algo.stop()?;
    let version = saved_version(&ckpt)?;

    let mut restored = build(Some(&ckpt))?;
    let fragments = first_fragments(&mut restored, 4)?;
    assert_eq!(built.load(Ordering::SeqCst), fresh, "envs built again for the restore");
    assert!(fragments.iter().all(|f| f.batches[0].weights_version.iter().all(|&v| v == version)));
    let result = restored.train()?;
    assert_eq!(result.training_iteration, 2);
    restored.stop()?;

    // A checkpoint that does not load fails the build.
    let bad = build(Some(dir.path().join("missing").as_path()));
    assert!(message(bad)?.contains("missing"));
    Ok(())
}

#[test]
fn the_observation_filter_is_checkpointed_and_restored() -> TestResult {
    let mut config = quick();
    config.normalize_observations = true;
    let dir = tempfile::tempdir()?;
    let mut algo = Impala::new(config.clone().validate()?)?;
    algo.train()?;
    algo.train()?;
    let ckpt = algo.save(dir.path())?;
    algo.stop()?;
    let state: impala::checkpoint::AlgorithmState =
        serde_json::from_str(&std::fs::read_to_string(ckpt.join(STATE_FILE))?)?;
    let saved = state.observation_filter.ok_or("the checkpoint keeps no observation filter")?;
    // Two iterations of 4 CartPole envs: thousands of observations.
    assert!(saved.running_stats().num_pushes() > 1000, "{}", saved.running_stats().num_pushes());

    // A restored run normalises with everything the saved one saw (and what it sees since).
    let mut restored = Impala::new(config.validate()?)?;
    restored.restore(&ckpt)?;
    let now = restored.observation_filter()?.ok_or("no filter")?;
    assert!(now.running_stats().num_pushes() >= saved.running_stats().num_pushes());
    for (a, b) in now.running_stats().mean().iter().zip(saved.running_stats().mean()) {
        assert!((a - b).abs() < 0.05, "{a} vs {b}");
    }
    restored.stop()?;
    Ok(())
}

#[test]
fn after_the_learner_dies_save_keeps_its_last_good_weights() -> TestResult {
    let mut config = quick();
    config.lr = 1e30;
    config.grad_clip = None;
    let mut algo = Impala::new(config.clone().validate()?)?;
    // As a run with --checkpoint-every 1 does: a healthy checkpoint of every iteration.
    let periodic = tempfile::tempdir()?;
    algo.save(periodic.path())?;
    let mut died = None;
    for _ in 0..30 {
        match algo.train() {
            Ok(_) => {
                algo.save(periodic.path())?;
            }
            Err(e) => {
                died = Some(e);
                break;
            }
        }
    }
    let died = died.ok_or("the learner did not die")?;
    assert!(matches!(died, ImpalaError::LearnerDied { .. }), "{died}");
    assert!(died.to_string().contains("non-finite"), "{died}");
    // What run() does next: save the last good checkpoint.
    let dir = tempfile::tempdir()?;
    let ckpt = algo.save(dir.path())?;
    let weights = impala::learner::read_model_weights(&ckpt.join(LEARNER_DIR), 0)?;
    assert!(weights.tensors.iter().all(|t| t.data.iter().all(|x| x.is_finite())));
    // A healthy checkpoint of the same iteration is kept, not replaced by the dying learner's.
    let healthy = periodic.path().join(format!("checkpoint_{:06}", algo.iteration()));
    let manifest = std::fs::read(healthy.join(MANIFEST_FILE))?;
    assert_eq!(algo.save(periodic.path())?, healthy);
    assert_eq!(std::fs::read(healthy.join(MANIFEST_FILE))?, manifest);
    // The dead learner's weights still evaluate; training again says why it cannot.
    assert!(algo.evaluate()?.num_episodes > 0);
    let again = message(algo.train())?;
    assert!(again.contains("died earlier") && again.contains("non-finite"), "{again}");
    algo.stop()?;
    // The checkpoint restores (its weights and optimizer state load: they are finite).
    let mut restored = Impala::new(config.validate()?)?;
    restored.restore(&ckpt)?;
    assert_eq!(restored.iteration(), algo.iteration());
    restored.stop()?;
    Ok(())
}

/// What the [`Recorder`] envs saw: the contexts they were built with, in order, and the seeds of
/// their resets, each with its env's place in `contexts`.
#[derive(Default)]
struct Seen {
    contexts: Vec<EnvContext>,
    reset_seeds: Vec<(usize, Option<u64>)>,
}

/// How the first env of the first incarnation of runner 1 misbehaves at its 3rd step.
#[derive(Debug, Clone, Copy, PartialEq)]
enum FirstRunner {
    Behaves,
    Raises,
    ReturnsNan,
}

/// 10 steps of reward 1 whatever the action, observation always 0 (so actions differ only by
/// the policy's sampling stream); records what it sees; misbehaves as [`FirstRunner`] says.
struct Recorder {
    /// This env's place in [`Seen::contexts`].
    id: usize,
    spec: EnvSpec,
    t: usize,
    fail: FirstRunner,
    seen: Arc<Mutex<Seen>>,
}

impl Env for Recorder {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }
    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
        self.seen
            .lock()
            .map_err(|_| CoreError::Policy { reason: "poisoned".into() })?
            .reset_seeds
            .push((self.id, seed));
        self.t = 0;
        obs[0] = 0.0;
        Ok(())
    }
    fn step(&mut self, _: &[f32], obs: &mut [f32]) -> Result<StepOutcome, CoreError> {
        self.t += 1;
        obs[0] = 0.0;
        if self.t == 3 {
            match self.fail {
                FirstRunner::Behaves => {}
                FirstRunner::Raises => {
                    return Err(CoreError::Env {
                        env: "Recorder".into(),
                        reason: "injected".into(),
                    })
                }
                FirstRunner::ReturnsNan => obs[0] = f32::NAN,
            }
        }
        Ok(StepOutcome { reward: 1.0, terminated: self.t == 10, truncated: false })
    }
}

fn recorder(seen: &Arc<Mutex<Seen>>, first_runner: FirstRunner) -> EnvFactory {
    let seen = Arc::clone(seen);
    Arc::new(move |ctx: &EnvContext| {
        let id = {
            let mut seen =
                seen.lock().map_err(|_| CoreError::Policy { reason: "poisoned".into() })?;
            seen.contexts.push(ctx.clone());
            seen.contexts.len() - 1
        };
        let spec = EnvSpec {
            id: "Recorder".into(),
            observation_space: Space::continuous(vec![0.0], vec![1.0])?,
            action_space: Space::Discrete(2),
            max_episode_steps: None,
        };
        let first = ctx.runner_index == 1 && ctx.incarnation == 0 && ctx.env_index == 0;
        let fail = if first { first_runner } else { FirstRunner::Behaves };
        Ok(Box::new(Recorder { id, spec, t: 0, fail, seen: Arc::clone(&seen) }) as Box<dyn Env>)
    })
}

fn recorder_config() -> ImpalaConfig {
    let mut config = quick();
    config.env = "Recorder".into();
    config.num_envs_per_env_runner = 2;
    config.rollout_fragment_length = 20;
    config.model.fcnet_hiddens = vec![8];
    config.seed = Some(5);
    config
}

/// The first fragment's actions and the first reset seeds of the runner's envs built last: a
/// restore replaces the runners, whose envs (built and reset from build to restore, in their
/// own threads, while the new ones may already be resetting) are not the run's.
fn first_streams(
    algo: &mut Impala,
    seen: &Arc<Mutex<Seen>>,
) -> Boxed<(Vec<f32>, Vec<Option<u64>>)> {
    let fragments = first_fragments(algo, 1)?;
    let seen = seen.lock().map_err(|_| "poisoned")?;
    let runner_envs = seen.contexts.iter().enumerate().filter(|(_, c)| c.runner_index == 1);
    let mut newest: Vec<(usize, usize)> =
        runner_envs.rev().take(2).map(|(id, c)| (c.env_index, id)).collect();
    newest.sort_unstable();
    let first_seed =
        |id| seen.reset_seeds.iter().find(|(env, _)| *env == id).and_then(|(_, seed)| *seed);
    let seeds = newest.into_iter().map(|(_, id)| first_seed(id)).collect();
    Ok((fragments[0].batches[0].actions.clone(), seeds))
}

#[test]
fn a_resumed_run_draws_new_env_and_action_streams() -> TestResult {
    let dir = tempfile::tempdir()?;
    let config = recorder_config();
    let build = |seen: &Arc<Mutex<Seen>>| {
        Impala::builder(config.clone().validate()?)
            .env_factory(recorder(seen, FirstRunner::Behaves))
            .build()
    };
    let seen_a = Arc::default();
    let mut a = build(&seen_a)?;
    let (actions_a, seeds_a) = first_streams(&mut a, &seen_a)?;
    assert_eq!(seeds_a, vec![Some(5 + 1000), Some(5 + 1001)], "RLlib's seed + 1000 * runner + env");
    let ckpt = a.save(dir.path())?;
    a.stop()?;
    // The same seed replays the same streams...
    let seen_c = Arc::default();
    let mut c = build(&seen_c)?;
    assert_eq!(first_streams(&mut c, &seen_c)?, (actions_a.clone(), seeds_a.clone()));
    c.stop()?;
    // ...but a run resumed from a checkpoint (with the same weights) draws new ones.
    let seen_b = Arc::default();
    let mut b = build(&seen_b)?;
    b.restore(&ckpt)?;
    let (actions_b, seeds_b) = first_streams(&mut b, &seen_b)?;
    assert!(seeds_b.iter().zip(&seeds_a).all(|(b, a)| b.is_some() && b != a), "{seeds_b:?}");
    assert_ne!(actions_b, actions_a, "the policy replayed the original run's actions");
    // And resuming that run again draws yet other streams (restores are counted).
    let ckpt_b = b.save(&dir.path().join("b"))?;
    b.stop()?;
    let seen_d = Arc::default();
    let mut d = build(&seen_d)?;
    d.restore(&ckpt_b)?;
    let (actions_d, seeds_d) = first_streams(&mut d, &seen_d)?;
    assert!(seeds_d != seeds_b && seeds_d != seeds_a, "{seeds_d:?}");
    assert!(actions_d != actions_b && actions_d != actions_a);
    d.stop()?;
    Ok(())
}

#[test]
fn a_restarted_runner_draws_new_env_streams() -> TestResult {
    let mut config = recorder_config();
    config.restart_failed_env_runners = true;
    let seen = Arc::default();
    let mut algo = Impala::builder(config.validate()?)
        .env_factory(recorder(&seen, FirstRunner::Raises))
        .build()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while algo.train()?.env_runners["num_env_runner_restarts"] < 1.0 {
        assert!(Instant::now() < deadline, "the runner did not restart");
    }
    algo.stop()?;
    let seen = seen.lock().map_err(|_| "poisoned")?;
    let env0 = |incarnation| {
        seen.contexts
            .iter()
            .find(|c| (c.runner_index, c.env_index, c.incarnation) == (1, 0, incarnation))
            .cloned()
    };
    let (first, second) = (env0(0).ok_or("no first")?, env0(1).ok_or("no restart")?);
    assert_eq!(first.seed, Some(5 + 1000));
    assert!(second.seed.is_some() && second.seed != first.seed, "{second:?}");
    let reset_with = |seed| seen.reset_seeds.iter().any(|(_, s)| *s == seed);
    assert!(reset_with(second.seed), "the restarted env was reset with its seed");
    Ok(())
}

/// A NaN from an env is that env's failure, caught where it enters: its runner restarts and
/// training goes on; without restarts the run ends naming the env, the field and the step,
/// never blaming V-trace.
#[test]
fn a_nan_observation_fails_its_runner_not_the_learner() -> TestResult {
    let mut config = recorder_config();
    config.restart_failed_env_runners = true;
    let seen = Arc::default();
    let build = |config: ImpalaConfig| {
        Impala::builder(config.validate()?)
            .env_factory(recorder(&seen, FirstRunner::ReturnsNan))
            .build()
    };
    let mut algo = build(config.clone())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut result = algo.train()?;
    while result.env_runners["num_env_runner_restarts"] < 1.0 || result.num_env_steps_trained == 0 {
        assert!(Instant::now() < deadline, "the runner did not restart, or nothing trained");
        result = algo.train()?;
    }
    algo.stop()?;
    config.restart_failed_env_runners = false;
    let mut algo = build(config)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let error = loop {
        match algo.train() {
            Ok(_) => assert!(Instant::now() < deadline, "the NaN went unnoticed"),
            Err(e) => break e.to_string(),
        }
    };
    assert!(
        error.contains("`Recorder`")
            && error.contains("non-finite observation (NaN at value 0)")
            && error.contains("step 3 of its episode"),
        "{error}"
    );
    assert!(!error.contains("V-trace") && !error.contains("learner"), "{error}");
    Ok(())
}

#[test]
fn restoring_an_older_checkpoint_reaches_the_runners() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut algo = Impala::new(quick().validate()?)?;
    let older = algo.train()?;
    let ckpt = algo.save(dir.path())?;
    let old_version = saved_version(&ckpt)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while algo.counters().num_grad_updates <= old_version + 10 {
        assert!(Instant::now() < deadline, "no SGD steps after the checkpoint");
        algo.train()?;
    }
    algo.restore(&ckpt)?;
    assert_eq!(algo.iteration(), older.training_iteration);
    // Every fragment from now on was sampled with the restored (older) weights.
    for f in first_fragments(&mut algo, 4)? {
        assert!(
            f.batches[0].weights_version.iter().all(|&v| v == old_version),
            "{:?}",
            f.batches[0].weights_version
        );
    }
    // And training goes on from them.
    let next = algo.train()?;
    assert_eq!(next.training_iteration, older.training_iteration + 1);
    assert!(next.info.learner[DEFAULT_POLICY_ID].num_grad_updates_lifetime >= old_version);
    algo.stop()?;
    Ok(())
}
