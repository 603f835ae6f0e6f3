//! `log_level`: RLlib's level names, parsed once by validation.

use std::fmt;
use std::str::FromStr;

/// How much the program logs (`log_level`): RLlib's names plus TRACE, in any case.
///
/// ```
/// use impala_config::LogLevel;
/// assert_eq!("warn".parse::<LogLevel>()?, LogLevel::Warn);
/// assert_eq!(LogLevel::Info.to_string(), "INFO");
/// assert!("LOUD".parse::<LogLevel>().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Everything.
    Trace,
    /// Debugging detail.
    Debug,
    /// Progress.
    Info,
    /// Warnings and errors (the default).
    Warn,
    /// Errors only.
    Error,
}

impl LogLevel {
    /// Every level, in RLlib's spelling.
    pub const NAMES: [&'static str; 5] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];
}

/// A name that is not one of [`LogLevel::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` is not a log level")]
pub struct UnknownLogLevel {
    /// The name given.
    pub name: String,
}

impl FromStr for LogLevel {
    type Err = UnknownLogLevel;

    fn from_str(name: &str) -> Result<Self, UnknownLogLevel> {
        Ok(match name.to_ascii_uppercase().as_str() {
            "TRACE" => LogLevel::Trace,
            "DEBUG" => LogLevel::Debug,
            "INFO" => LogLevel::Info,
            "WARN" => LogLevel::Warn,
            "ERROR" => LogLevel::Error,
            _ => return Err(UnknownLogLevel { name: name.into() }),
        })
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = *self as usize;
        f.write_str(Self::NAMES[i])
    }
}
