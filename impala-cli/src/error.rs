//! How every error is printed: the library's message and its causes on one line, with the
//! flag that sets the option it names where that helps.

use impala::remote::RemoteError;
use impala::run::RunError;
use impala::ImpalaError;
use impala_tune::TuneError;

/// `err` and its causes on one line (the library's [`impala::one_line`]), followed by the
/// flags of this command that set the options the message names.
pub(crate) fn describe(err: &anyhow::Error) -> String {
    let hint = err.chain().find_map(flag_hint).unwrap_or_default();
    format!("{}{hint}", impala::one_line(err.as_ref()))
}

/// Where a library error names an option, the flag that sets it.
fn flag_hint(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    if let Some(err) = err.downcast_ref::<RunError>() {
        return match err {
            RunError::Impala(err) => impala_hint(err),
            RunError::Locked { .. } => Some(" (--run-dir)".into()),
            RunError::ConfigWithResume { .. } => Some(" (--resume, --set)".into()),
            RunError::TruncateElsewhere { .. } => Some(" (--truncate, --run-dir)".into()),
            _ => None,
        };
    }
    if let Some(err) = err.downcast_ref::<ImpalaError>() {
        return impala_hint(err);
    }
    if let Some(err) = err.downcast_ref::<TuneError>() {
        return match err {
            TuneError::BadMetric { .. } => Some(" (--metric)".into()),
            TuneError::BadName { .. } | TuneError::ExperimentExists { .. } => {
                Some(" (--name, --output-dir)".into())
            }
            TuneError::TooManyTrials { .. } => Some(" (--num-samples)".into()),
            TuneError::RunsDirTaken { .. } => Some(" (--runs-dir)".into()),
            _ => None,
        };
    }
    err.downcast_ref::<RemoteError>().and_then(remote_hint)
}

fn impala_hint(err: &ImpalaError) -> Option<String> {
    match err {
        ImpalaError::RunDirNotWritable { .. } => {
            Some("; pass a writable folder with --run-dir".into())
        }
        ImpalaError::RunDirInUse { path } => {
            Some(format!(" (--resume {}, or a new --run-dir)", path.display()))
        }
        ImpalaError::EnvOption { key, .. } => match *key {
            "compress_observations" => Some(" with `impala train --listen`".into()),
            "normalize_observations" => Some(" (without --listen)".into()),
            "num_env_runners" => Some(" (`impala env-runner` processes)".into()),
            "env_backend" => Some(" (`impala envs` lists them)".into()),
            _ => None,
        },
        ImpalaError::Remote(err) => remote_hint(err),
        // Transparent: the transport's own error is not a separate link of the chain.
        ImpalaError::RunnerTransport(err) => {
            err.downcast_ref::<RemoteError>().and_then(remote_hint)
        }
        _ => None,
    }
}

fn remote_hint(err: &RemoteError) -> Option<String> {
    match err {
        RemoteError::DriverLost { .. } => {
            Some("; --reconnect-timeout-s sets how long to keep trying".into())
        }
        RemoteError::NoRunners { addr, .. } => {
            Some(format!(" (`impala env-runner --connect {addr} --token-file FILE`)"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_errors_get_the_flags_of_their_options() {
        let in_use = ImpalaError::RunDirInUse { path: "runs/a".into() };
        let err = anyhow::Error::new(RunError::Impala(in_use));
        assert_eq!(
            describe(&err),
            "run folder `runs/a` already holds a run's results; resume it, or choose another \
             run_dir (--resume runs/a, or a new --run-dir)"
        );
    }
}
