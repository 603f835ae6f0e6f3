//! What a user sees for a file that is not text, an empty file, and a file with several
//! mistakes (all of them, in file order).

use impala_config::{ConfigError, ConfigFormat, ImpalaConfig};
use serde_json::json;

use crate::TestResult;

/// (what, key path, line) of each problem of a [`ConfigError::Several`], in order.
fn summary(err: &ConfigError) -> Result<Vec<(&'static str, String, u32)>, String> {
    let ConfigError::Several { errors, .. } = err else {
        return Err(format!("expected Several, got {err:?}"));
    };
    errors
        .iter()
        .map(|e| match e {
            ConfigError::UnknownKey { key, position, .. } => {
                Ok(("unknown", key.clone(), position.map_or(0, |p| p.line)))
            }
            ConfigError::WrongType { key, position, .. } => {
                Ok(("type", key.clone(), position.map_or(0, |p| p.line)))
            }
            ConfigError::DuplicateKey { key, .. } => Ok(("twice", key.clone(), 0)),
            other => Err(format!("unexpected problem {other:?}")),
        })
        .collect()
}

#[test]
fn a_binary_file_is_not_a_text_config_and_says_where() -> TestResult {
    let dir = tempfile::tempdir()?;
    // (bytes, offset, line, column, a phrase of the message)
    let cases: [(&[u8], usize, u32, u32, &str); 4] = [
        (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 0, 1, 1, "byte 0x89"),
        (b"lr = 0.1\ngamma = 0.9\nab\xffc = 1\n", 23, 3, 3, "byte 0xff"),
        (b"lr = 0.1\n\0\0\0\0", 9, 2, 1, "a NUL byte"),
        (b"\xff\xfel\0r\0 \0=\0 \x001\0", 0, 1, 1, "UTF-16"),
    ];
    for (i, (bytes, offset, line, column, phrase)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("c{i}.toml"));
        std::fs::write(&path, bytes)?;
        let err = ImpalaConfig::load(&path).err().ok_or("expected an error")?;
        let ConfigError::NotText { offset: o, position, .. } = &err else {
            return Err(format!("case {i}: expected NotText, got {err:?}").into());
        };
        assert_eq!((*o, position.line, position.column), (offset, line, column), "case {i}");
        let message = err.to_string();
        assert!(message.starts_with(&format!("{}:{line}:{column}: ", path.display())), "{message}");
        assert!(message.contains("not a text config file"), "{message}");
        assert!(message.contains(phrase), "{message}");
        assert!(!message.contains("permissions"), "{message}");
    }
    Ok(())
}

#[test]
fn an_empty_config_file_is_an_error_that_says_how_to_fix_it() -> TestResult {
    let dir = tempfile::tempdir()?;
    let cases = [
        ("a.toml", "", "`env = \"CartPole-v1\"`"),
        ("b.toml", "  \n\n", "`env = \"CartPole-v1\"`"),
        ("c.toml", "# tuned later\n", "`env = \"CartPole-v1\"`"),
        ("d.yaml", "# nothing yet\n", "`env: CartPole-v1`"),
        ("e.yml", "---\n", "`env: CartPole-v1`"),
        ("f.json", "{ }\n", "`{\"env\": \"CartPole-v1\"}`"),
    ];
    for (name, text, example) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text)?;
        let err = ImpalaConfig::load(&path).err().ok_or_else(|| format!("{name}: no error"))?;
        assert!(matches!(err, ConfigError::EmptyFile { .. }), "{name}: {err:?}");
        let message = err.to_string();
        assert!(message.starts_with(&path.display().to_string()), "{message}");
        assert!(message.contains("is empty"), "{message}");
        assert!(message.contains(example), "{name}: {message}");
        assert!(message.contains("omit the file to use the embedded example"), "{message}");
    }
    // Text handed over directly (not a file) still means the defaults.
    assert_eq!(ImpalaConfig::from_str_as("", ConfigFormat::Toml)?.config, ImpalaConfig::default());
    Ok(())
}

#[test]
fn every_unknown_key_and_wrong_type_is_reported_in_file_order() -> TestResult {
    // Alphabetical order would be entropy_coef, lr, model..., num_worker: the file's is not.
    let cases = [
        (
            ConfigFormat::Toml,
            "lr = \"fast\"\nnum_worker = 3\nentropy_coef = 0.1\ngamma = 0.9\n\n[model]\n\
             fcnet_hidens = [64]\nvf_share_layers = 3\n",
            [2, 3, 1, 7, 8],
        ),
        (
            ConfigFormat::Yaml,
            "lr: fast\nnum_worker: 3\nentropy_coef: 0.1\ngamma: 0.9\n\nmodel:\n  \
             fcnet_hidens: [64]\n  vf_share_layers: 3\n",
            [2, 3, 1, 7, 8],
        ),
        (
            ConfigFormat::Json,
            "{\n\"lr\": \"fast\",\n\"num_worker\": 3,\n\"entropy_coef\": 0.1,\n\"gamma\": 0.9,\n\
             \"model\": {\n  \"fcnet_hidens\": [64],\n  \"vf_share_layers\": 3}}\n",
            [3, 4, 2, 7, 8],
        ),
    ];
    for (format, text, [worker, entropy, lr, hidens, share]) in cases {
        let err = ImpalaConfig::from_str_as(text, format).err().ok_or("expected an error")?;
        let expected = vec![
            ("type", "lr".to_string(), lr),
            ("unknown", "num_worker".to_string(), worker),
            ("unknown", "entropy_coef".to_string(), entropy),
            ("unknown", "model.fcnet_hidens".to_string(), hidens),
            ("type", "model.vf_share_layers".to_string(), share),
        ];
        assert_eq!(summary(&err)?, expected, "{format}: {err}");
        let message = err.to_string();
        assert!(message.starts_with("<config text>: 5 problems:\n"), "{message}");
        // Each problem keeps its own line and column and, for unknown keys, the nearest key.
        for nearest in ["`num_env_runners`", "`entropy_coeff`", "`model.fcnet_hiddens`"] {
            assert!(message.contains(nearest), "{format}: {message}");
        }
        assert!(message.contains(&format!("<config text>:{worker}:")), "{message}");
        assert!(message.contains("`lr` expects a number"), "{message}");
        assert!(message.contains("`model.vf_share_layers` expects true or false"), "{message}");
    }
    Ok(())
}

#[test]
fn a_file_with_several_mistakes_names_the_file_for_each() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "lrr = 0.1\nlearner_queue_size = \"big\"\ngama = 0.9\n")?;
    let err = ImpalaConfig::load(&path).err().ok_or("expected an error")?;
    let lines: Vec<u32> = summary(&err)?.into_iter().map(|(_, _, line)| line).collect();
    assert_eq!(lines, [1, 2, 3], "{err}");
    let message = err.to_string();
    let file = path.display().to_string();
    assert!(message.starts_with(&format!("{file}: 3 problems:\n")), "{message}");
    for line in 1..=3 {
        assert!(message.contains(&format!("  - {file}:{line}:")), "{message}");
    }
    // The wrong type keeps the exact column of its value that the TOML parser reports.
    assert!(message.contains(&format!("{file}:2:22: `learner_queue_size`")), "{message}");
    Ok(())
}

#[test]
fn a_key_given_twice_is_listed_with_the_other_problems() -> TestResult {
    let err = ImpalaConfig::from_str_as(
        "num_workers: 2\nlrr: 1\nnum_env_runners: 3\n",
        ConfigFormat::Yaml,
    )
    .err()
    .ok_or("expected an error")?;
    let kinds: Vec<&str> = summary(&err)?.into_iter().map(|(what, _, _)| what).collect();
    assert_eq!(kinds, ["unknown", "twice"], "{err}");
    Ok(())
}

#[test]
fn from_dict_reports_every_problem_too() -> TestResult {
    let dict = [("lr", json!("fast")), ("lrr", json!(1)), ("gamma", json!([1]))]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let err = ImpalaConfig::from_dict(dict).err().ok_or("expected an error")?;
    let keys: Vec<String> = summary(&err)?.into_iter().map(|(_, key, _)| key).collect();
    // A dict has no file order: its keys' order.
    assert_eq!(keys, ["gamma", "lr", "lrr"], "{err}");
    Ok(())
}
