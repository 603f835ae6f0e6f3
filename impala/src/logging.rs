//! The `log_level` option on a terminal: a tracing subscriber on stderr that prints the
//! library's events (runner failures and restarts, learner stalls) as `warning: ...` /
//! `error: ...` lines, the shape of the `impala` command's own messages. Any program built on
//! the library (the command, a runner process of another transport) installs the same one.
//!
//! ```
//! impala::logging::init(impala::config::LogLevel::Warn);
//! tracing::warn!("printed on stderr as `warning: ...`");
//! ```

use std::fmt;

use impala_config::LogLevel;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

/// `level: message key=value ...`, without timestamps or module paths.
struct OneLine;

impl<S, N> FormatEvent<S, N> for OneLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "info",
            Level::DEBUG => "debug",
            Level::TRACE => "trace",
        };
        write!(writer, "{level}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Installs the subscriber at RLlib's `log_level` (`WARN` by default). Only the first call in a
/// process takes effect.
pub fn init(log_level: LogLevel) {
    let level = match log_level {
        LogLevel::Trace => Level::TRACE,
        LogLevel::Debug => Level::DEBUG,
        LogLevel::Info => Level::INFO,
        LogLevel::Warn => Level::WARN,
        LogLevel::Error => Level::ERROR,
    };
    // Fails only when a subscriber is already installed, which is then the one to use.
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(OneLine)
        .try_init();
}
