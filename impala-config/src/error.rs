//! The crate's error type.

use std::fmt;
use std::path::PathBuf;

use crate::diagnostics::Violation;

/// A 1-based line and column in a config file (`u32` keeps [`ConfigError`] small).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Line, counting from 1.
    pub line: u32,
    /// Column (in characters), counting from 1.
    pub column: u32,
}

impl Position {
    /// A position from a parser's `usize` line and column (saturating).
    pub(crate) fn new(line: usize, column: usize) -> Position {
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Position { line: clamp(line), column: clamp(column) }
    }

    /// The position of byte `offset` in `text` (offsets past the end clamp to the end).
    pub(crate) fn from_offset(text: &str, offset: usize) -> Position {
        let offset = offset.min(text.len());
        let before = text.get(..offset).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
        Position::new(line, column)
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Where a piece of config text came from, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A file on disk.
    File(PathBuf),
    /// A string handed to [`crate::ImpalaConfig::from_str_as`].
    Text,
    /// A `key=value` override (the text is kept).
    Override(String),
    /// A value handed to [`crate::ImpalaConfig::set`] or [`crate::ImpalaConfig::from_dict`].
    Set,
    /// Values from a source the caller names ([`crate::ImpalaConfig::from_dict_as`]): a
    /// builder method such as `training()`, a trial.
    Named(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path) => write!(f, "{}", path.display()),
            Origin::Text => f.write_str("<config text>"),
            Origin::Override(text) => write!(f, "override `{text}`"),
            Origin::Set => f.write_str("set()"),
            Origin::Named(name) => f.write_str(name),
        }
    }
}

/// `origin` or `origin:line:column`.
fn at(origin: &Origin, position: &Option<Position>) -> String {
    match position {
        Some(p) => format!("{origin}:{p}"),
        None => origin.to_string(),
    }
}

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key that is neither an option nor an alias of one.
    #[error(
        "{}: unknown key `{key}`; the nearest valid key is `{suggestion}`",
        at(origin, position)
    )]
    UnknownKey {
        /// The key as written (with its table, e.g. `model.fcnet_hidens`).
        key: String,
        /// The nearest valid key.
        suggestion: String,
        /// Where the text came from.
        origin: Origin,
        /// Where the key is, when known.
        position: Option<Position>,
    },
    /// An option given twice, under its name and an alias (or two aliases).
    #[error("{origin}: `{key}` is given twice (as `{first}` and `{second}`); keep one")]
    DuplicateKey {
        /// The option's name.
        key: String,
        /// The first spelling.
        first: String,
        /// The second spelling.
        second: String,
        /// Where the text came from.
        origin: Origin,
    },
    /// A value of the wrong type (or an unknown enum variant).
    #[error("{}: `{key}` expects {expected}: {message}", at(origin, position))]
    WrongType {
        /// The path of the value (`lr`, `model.fcnet_hiddens[1]`).
        key: String,
        /// What the key accepts, in words.
        expected: String,
        /// The parser's explanation.
        message: String,
        /// Where the text came from.
        origin: Origin,
        /// Where the value is, when the format reports it.
        position: Option<Position>,
    },
    /// Text that is not valid TOML, YAML or JSON.
    #[error("{}: not valid {format}: {message}", at(origin, position))]
    Syntax {
        /// The format the text was read as.
        format: crate::ConfigFormat,
        /// The parser's explanation.
        message: String,
        /// Where the text came from.
        origin: Origin,
        /// Where the problem is, when the format reports it.
        position: Option<Position>,
    },
    /// A config file whose extension is not `.toml`, `.yaml`, `.yml` or `.json`.
    #[error("{}: unknown config format; use a .toml, .yaml, .yml or .json file", path.display())]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// An override that is not `key=value` or `group.key=value`.
    #[error("bad override `{text}`: {reason}")]
    BadOverride {
        /// The override as given.
        text: String,
        /// What is wrong and how to write it.
        reason: String,
    },
    /// A key used with a group prefix it does not belong to (`resources.lr=...`).
    #[error("`{key}` is set by `{expected_group}()`, not `{group}()`; write `{expected_group}.{key}=...` or `{key}=...`")]
    WrongGroup {
        /// The key.
        key: String,
        /// The group that was written.
        group: String,
        /// The group the key belongs to.
        expected_group: String,
    },
    /// The config cannot be written in the asked format.
    #[error("cannot write the config as {format}: {message}")]
    Serialize {
        /// The format.
        format: crate::ConfigFormat,
        /// The serializer's explanation.
        message: String,
    },
    /// Reading or writing a config file failed. The OS error is part of the message (and so
    /// not a `source`), followed by the fix.
    #[error(
        "cannot access config file {}: {cause}; check the path and its permissions",
        path.display()
    )]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        cause: std::io::Error,
    },
    /// A config file that is not text: not UTF-8, or holding a NUL byte (a binary or
    /// compressed file, or the wrong path).
    #[error("{}:{position}: {}", path.display(), not_text(*offset, *byte, *utf16))]
    NotText {
        /// The file.
        path: PathBuf,
        /// The byte offset of the first byte that is not UTF-8 text.
        offset: usize,
        /// That byte.
        byte: u8,
        /// Its line and column.
        position: Position,
        /// The file starts with a UTF-16 byte order mark.
        utf16: bool,
    },
    /// A config file without a single key (empty, or only comments). It would mean the
    /// library defaults, which differ from the tuned example the `impala` command uses when no
    /// file is given.
    #[error(
        "{}: the config file is empty (no keys), which would mean the library defaults \
         (RLlib's `ImpalaConfig()`), not the tuned example used without a file; add {} and the \
         options to change, or omit the file to use the embedded example",
        path.display(),
        example_env_line(*format)
    )]
    EmptyFile {
        /// The file.
        path: PathBuf,
        /// Its format (for the example line).
        format: crate::ConfigFormat,
    },
    /// Several unknown keys, wrongly typed values or keys given twice in one text, all of
    /// them, in the order they are written.
    #[error("{origin}: {} problems:\n{}", errors.len(), list(errors))]
    Several {
        /// Where the text came from.
        origin: Origin,
        /// Every problem: [`ConfigError::UnknownKey`], [`ConfigError::WrongType`] or
        /// [`ConfigError::DuplicateKey`].
        errors: Vec<ConfigError>,
    },
    /// An RLlib experiment file (`name: {env, run, stop, config}`) that cannot run here.
    #[error("{origin}: {reason}")]
    Experiment {
        /// Where the file came from.
        origin: Origin,
        /// What cannot run, and what to write instead.
        reason: String,
    },
    /// Validation found problems; all of them are listed.
    #[error("{} problem(s) in the config:\n{}", violations.len(), list(violations))]
    Invalid {
        /// Every problem found.
        violations: Vec<Violation>,
    },
    /// The resource request cannot be met on this machine.
    #[error(
        "the config asks for {requested} {resource}(s) but this machine has {available}; {fix}"
    )]
    InsufficientResources {
        /// `"GPU"` (CPUs are time-shared by threads and only warn).
        resource: &'static str,
        /// The total asked for.
        requested: f64,
        /// What the machine has.
        available: f64,
        /// How to fix the config.
        fix: String,
    },
}

fn list<T: fmt::Display>(items: &[T]) -> String {
    items.iter().map(|v| format!("  - {v}")).collect::<Vec<_>>().join("\n")
}

fn not_text(offset: usize, byte: u8, utf16: bool) -> String {
    let what = if byte == 0 {
        "a NUL byte".to_string()
    } else {
        format!("byte {byte:#04x}, which is not UTF-8 text,")
    };
    let hint = if utf16 { " (the file looks like UTF-16: save it as UTF-8)" } else { "" };
    format!(
        "not a text config file: {what} at byte offset {offset}{hint}; a config file is TOML, \
         YAML or JSON text: check that the path names the config and not a binary file"
    )
}

fn example_env_line(format: crate::ConfigFormat) -> &'static str {
    match format {
        crate::ConfigFormat::Toml => "`env = \"CartPole-v1\"`",
        crate::ConfigFormat::Yaml => "`env: CartPole-v1`",
        crate::ConfigFormat::Json => "`{\"env\": \"CartPole-v1\"}`",
    }
}

/// The crate's result type.
pub type Result<T, E = ConfigError> = std::result::Result<T, E>;
