//! RLlib's `default_resource_request` numbers, printing and the machine check.

use std::collections::BTreeMap;

use impala_config::{BundleRole, ConfigError, ImpalaConfig, WarningKind};

use crate::TestResult;

#[test]
fn default_request_is_a_driver_and_one_bundle_per_env_runner() {
    let request = ImpalaConfig::default().default_resource_request();
    let roles: Vec<BundleRole> = request.bundles.iter().map(|b| b.role).collect();
    assert_eq!(
        roles,
        [
            BundleRole::Driver { num_aggregation_workers: 0 },
            BundleRole::EnvRunner,
            BundleRole::EnvRunner
        ]
    );
    assert_eq!((request.total_cpus(), request.total_gpus()), (3.0, 0.0));
    assert_eq!(
        request.to_string(),
        "resource request (PACK): 3 CPU, 0 GPU in 3 bundle(s)\n  \
         driver + 0 aggregation worker(s): 1 CPU, 0 GPU\n  \
         2 x env runner: 1 CPU, 0 GPU each\n"
    );
}

#[test]
fn driver_bundle_holds_aggregation_cpus_and_learner_gpus() {
    let config = ImpalaConfig::default()
        .training(|t| t.num_aggregation_workers(2))
        .env_runners(|r| {
            r.num_env_runners(4).num_cpus_per_env_runner(0.5).num_gpus_per_env_runner(0.25)
        })
        .resources(|r| r.num_gpus(1.0).num_cpus_for_main_process(2.0));
    let request = config.default_resource_request();
    let driver = &request.bundles[0];
    assert_eq!((driver.cpus, driver.gpus), (4.0, 1.0));
    assert_eq!(request.bundles.len(), 5);
    assert!(request.bundles[1..].iter().all(|b| (b.cpus, b.gpus) == (0.5, 0.25)));
    assert_eq!((request.total_cpus(), request.total_gpus()), (6.0, 2.0));
    // Fake GPUs are CPU towers: the driver asks for no GPU.
    let fake = config.resources(|r| r.fake_gpus(true)).default_resource_request();
    assert_eq!(fake.bundles[0].gpus, 0.0);
}

#[test]
fn evaluation_bundles_only_while_evaluation_is_on() {
    let config = ImpalaConfig::default()
        .env_runners(|r| r.custom_resources_per_env_runner(BTreeMap::from([("tpu".into(), 1.0)])))
        .evaluation(|e| e.evaluation_num_env_runners(3));
    assert_eq!(config.default_resource_request().bundles.len(), 3);
    let off = config.clone().evaluation(|e| e.evaluation_interval(Some(0)));
    assert_eq!(off.default_resource_request().bundles.len(), 3);
    let on = config.evaluation(|e| e.evaluation_interval(Some(1))).default_resource_request();
    assert_eq!(on.bundles.len(), 6);
    assert!(on.bundles[3..]
        .iter()
        .all(|b| b.role == BundleRole::EvaluationEnvRunner && b.custom["tpu"] == 1.0));
    assert!(on.to_string().contains("3 x evaluation env runner: 1 CPU, 0 GPU, 1 tpu each"), "{on}");
}

#[test]
fn check_fails_without_the_gpus_and_warns_without_the_cpus() -> TestResult {
    let gpus = ImpalaConfig::default().resources(|r| r.num_gpus(2.0)).default_resource_request();
    match gpus.check(64.0, 1.0) {
        Err(ConfigError::InsufficientResources { resource, requested, available, fix }) => {
            assert_eq!((resource, requested, available), ("GPU", 2.0, 1.0));
            assert!(fix.contains("_fake_gpus"), "{fix}");
        }
        other => return Err(format!("expected InsufficientResources, got {other:?}").into()),
    }
    assert!(gpus.check(64.0, 2.0)?.is_empty());
    let none = gpus.check(64.0, 0.0).err().ok_or("expected an error")?.to_string();
    assert!(none.contains("num_gpus = 0"), "{none}");

    let cpus =
        ImpalaConfig::default().env_runners(|r| r.num_env_runners(8)).default_resource_request();
    let warnings = cpus.check(2.0, 0.0)?;
    assert_eq!(
        warnings.iter().map(|w| &w.kind).collect::<Vec<_>>(),
        [&WarningKind::CpusOversubscribed]
    );
    assert!(warnings[0].message.contains("9 CPUs"), "{}", warnings[0]);
    assert!(cpus.check(9.0, 0.0)?.is_empty());
    Ok(())
}
