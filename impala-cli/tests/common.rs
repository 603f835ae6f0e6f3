//! Running the `impala` binary.

use std::path::Path;
use std::process::Command;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// What a finished `impala` run printed.
pub struct Run {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The `error: ...` lines of stderr (warnings are allowed besides them).
    pub fn error_lines(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| l.starts_with("error: ")).collect()
    }

    /// Asserts the run failed with exactly one error line, nothing else but warnings on
    /// stderr, and that the line mentions every `needle` (case-insensitive).
    pub fn assert_one_line_error(&self, needles: &[&str]) {
        assert!(!self.success, "expected failure, got success; stdout: {}", self.stdout);
        let errors = self.error_lines();
        assert_eq!(errors.len(), 1, "stderr: {}", self.stderr);
        for line in self.stderr.lines() {
            assert!(
                line.starts_with("error: ") || line.starts_with("warning: "),
                "unexpected stderr line `{line}`"
            );
        }
        let line = errors[0].to_lowercase();
        for needle in needles {
            assert!(line.contains(&needle.to_lowercase()), "`{needle}` not in `{}`", errors[0]);
        }
    }
}

/// Runs `impala args...` in `cwd`.
pub fn impala(cwd: &Path, args: &[&str]) -> Result<Run, std::io::Error> {
    let out = Command::new(env!("CARGO_BIN_EXE_impala")).current_dir(cwd).args(args).output()?;
    Ok(Run {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// A counter of the `env_runners` group of a result line.
pub fn runner_count(result: &serde_json::Value, key: &str) -> Result<f64, String> {
    result["env_runners"][key].as_f64().ok_or(format!("no env_runners.{key} in {result}"))
}

/// `episode_return_mean`, under `env_runners` (RLlib's new stack) or at the top (old stack).
pub fn return_mean(result: &serde_json::Value) -> Option<f64> {
    result["env_runners"]["episode_return_mean"].as_f64().or(result["episode_return_mean"].as_f64())
}

/// Names in `dir` (empty if it does not exist).
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// A copy in `dir` of `NAME.pt`, a TorchScript module that impala-learner's
/// `tests/fixtures/scripted_models.py` writes (`residual_mlp` and `memory_gru` fit CartPole; the
/// script runs once per test process, with the interpreter `./dev setup` made, which has torch,
/// unless IMPALA_PYTHON names one).
pub fn scripted_module(dir: &Path, name: &str) -> Result<std::path::PathBuf, String> {
    use std::path::PathBuf;
    use std::sync::OnceLock;
    static MODULES: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let modules = MODULES.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = std::env::temp_dir().join(format!("impala-cli-modules-{}", std::process::id()));
        let python = std::env::var_os("IMPALA_PYTHON")
            .map_or_else(|| root.join(".venv/bin/python"), PathBuf::from);
        let script = root.join("impala-learner/tests/fixtures/scripted_models.py");
        let run = Command::new(&python)
            .arg(script)
            .arg(&out)
            .output()
            .map_err(|e| format!("{}: {e}", python.display()))?;
        if !run.status.success() {
            return Err(String::from_utf8_lossy(&run.stderr).into_owned());
        }
        Ok(out)
    });
    let file = format!("{name}.pt");
    let copy = dir.join(&file);
    std::fs::copy(modules.as_ref()?.join(&file), &copy).map_err(|e| e.to_string())?;
    Ok(copy)
}
