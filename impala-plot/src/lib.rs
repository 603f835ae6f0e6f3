//! The learning curve of a run folder as a PNG: what `impala plot RUN` draws, and `impala
//! train` at the end of a run.
//!
//! Reads `RUN/result.json` (one result per line, RLlib's metric names) and draws
//! `episode_return_mean` (and `evaluation.episode_return_mean` where an iteration evaluated)
//! against env steps and against training time, side by side, into
//! `RUN/episode_return_mean.png`. Text is set in DejaVu Sans, embedded by the `dejavu` crate,
//! so no system font is needed. A crate of its own so that the algorithm's library (which
//! Python embeds) and the sweeps need neither plotters nor a font.
//!
//! ```
//! let run = tempfile::tempdir()?;
//! let mut results = String::new();
//! for i in 1..=20_u32 {
//!     let ret = 10.0 * f64::from(i);
//!     results += &format!(
//!         "{{\"time_total_s\": {i}, \"num_env_steps_sampled\": {}, \"episode_return_mean\": {ret}}}\n",
//!         i * 1000
//!     );
//! }
//! std::fs::write(run.path().join(impala::RESULT_FILE), results)?;
//! let png = impala_plot::plot_run(run.path())?;
//! assert_eq!(png, run.path().join(impala_plot::PLOT_FILE));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Once;

use impala::{IterationResult, RESULT_FILE};
use plotters::prelude::*;

/// The picture's file name inside the run folder.
pub const PLOT_FILE: &str = "episode_return_mean.png";

/// The font family name the embedded font is registered under.
const FONT: &str = "sans-serif";

const SIZE: (u32, u32) = (1400, 560);

/// Why a run folder could not be plotted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlotError {
    /// The folder has no readable `result.json`.
    #[error(
        "cannot read {}: is {} a run folder (`impala train` writes result.json there)?",
        results.display(),
        run_dir.display()
    )]
    NoResults {
        /// The `result.json` looked for.
        results: PathBuf,
        /// The folder.
        run_dir: PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// A line of `result.json` is not a result (a run cut off while writing).
    #[error("{}: line {line} is not JSON", results.display())]
    BadLine {
        /// The `result.json`.
        results: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// Why it does not parse.
        source: serde_json::Error,
    },
    /// No iteration has a return yet.
    #[error(
        "{}: no iteration has an episode_return_mean yet (no episode finished); train longer",
        results.display()
    )]
    NoReturns {
        /// The `result.json`.
        results: PathBuf,
    },
    /// Drawing the picture failed.
    #[error("cannot draw {}: {reason}", path.display())]
    Draw {
        /// The picture being drawn.
        path: PathBuf,
        /// The drawing library's error.
        reason: String,
    },
    /// The finished picture could not be moved into place.
    #[error("cannot move {} to {}", from.display(), to.display())]
    Rename {
        /// The drawn picture.
        from: PathBuf,
        /// Its place.
        to: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The crate's result alias.
pub type Result<T, E = PlotError> = std::result::Result<T, E>;

/// One iteration's numbers.
#[derive(Debug, Clone, PartialEq)]
struct Point {
    steps: f64,
    time_s: f64,
    train: Option<f64>,
    eval: Option<f64>,
    /// A multi-agent run's `policy_reward_mean` per policy id (finite values only).
    policies: std::collections::BTreeMap<String, f64>,
}

impl From<&IterationResult> for Point {
    fn from(result: &IterationResult) -> Point {
        let finite = |x: f64| Some(x).filter(|x| x.is_finite());
        Point {
            steps: result.num_env_steps_sampled as f64,
            time_s: result.time_total_s,
            train: finite(result.episode_return_mean),
            eval: result.evaluation.as_ref().and_then(|e| finite(e.episode_return_mean)),
            policies: result
                .policy_reward_mean
                .iter()
                .filter_map(|(id, &v)| finite(v).map(|v| (id.clone(), v)))
                .collect(),
        }
    }
}

/// Draws `run_dir/result.json` into `run_dir/episode_return_mean.png` and returns its path.
/// The file is written whole or not at all (drawn to a temporary file, then renamed).
pub fn plot_run(run_dir: &Path) -> Result<PathBuf> {
    let results = run_dir.join(RESULT_FILE);
    let text = std::fs::read_to_string(&results).map_err(|source| PlotError::NoResults {
        results: results.clone(),
        run_dir: run_dir.to_path_buf(),
        source,
    })?;
    let points = read_points(&text, &results)?;
    if !points.iter().any(|p| p.train.is_some() || p.eval.is_some()) {
        return Err(PlotError::NoReturns { results });
    }
    let title = title(run_dir);
    let out = run_dir.join(PLOT_FILE);
    let partial = run_dir.join(format!(".{PLOT_FILE}.partial.png"));
    draw(&partial, &title, &points)
        .map_err(|reason| PlotError::Draw { path: partial.clone(), reason })?;
    std::fs::rename(&partial, &out).map_err(|source| PlotError::Rename {
        from: partial.clone(),
        to: out.clone(),
        source,
    })?;
    Ok(out)
}

/// The points of `result.json` (`text`), one line per iteration, read as the results they
/// are. A line that is not one (a run cut off while writing) is an error naming the line.
fn read_points(text: &str, results: &Path) -> Result<Vec<Point>> {
    let mut points = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let result: IterationResult = serde_json::from_str(line).map_err(|source| {
            PlotError::BadLine { results: results.to_path_buf(), line: i + 1, source }
        })?;
        points.push(Point::from(&result));
    }
    Ok(points)
}

/// `env: run folder name`, the env from `params.json` when it is there.
fn title(run_dir: &Path) -> String {
    let name = run_dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| run_dir.display().to_string());
    match impala::params_env(run_dir) {
        Some(env) if !name.contains(&env) => format!("{env}: {name}"),
        _ => name,
    }
}

/// Registers the embedded DejaVu Sans once per process.
fn register_font() -> std::result::Result<(), String> {
    static REGISTER: Once = Once::new();
    let mut ok = true;
    REGISTER.call_once(|| {
        ok = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
            .is_ok();
    });
    if !ok {
        return Err("the embedded DejaVu Sans font is unreadable".into());
    }
    Ok(())
}

/// Draws the two panels into `path`; the drawing library's error as text.
fn draw(path: &Path, title: &str, points: &[Point]) -> std::result::Result<(), String> {
    register_font()?;
    draw_panels(path, title, points).map_err(|e| e.to_string())
}

fn draw_panels(
    path: &Path,
    title: &str,
    points: &[Point],
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(44);
    top.draw(&Text::new(
        format!("episode_return_mean - {title}"),
        (20, 12),
        (FONT, 22).into_font().color(&BLACK),
    ))?;
    let (left, right) = body.split_horizontally(SIZE.0 / 2);

    let values = points
        .iter()
        .flat_map(|p| p.train.into_iter().chain(p.eval).chain(p.policies.values().copied()));
    let (lo, hi) =
        values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let pad = ((hi - lo) * 0.05).max(1.0);
    let y = (lo - pad)..(hi + pad);
    let max = |f: fn(&Point) -> f64| points.iter().map(f).fold(0.0, f64::max).max(1e-9);

    panel(&left, points, "env steps sampled", 0.0..max(|p| p.steps), y.clone(), |p| p.steps)?;
    panel(&right, points, "training time (s)", 0.0..max(|p| p.time_s), y, |p| p.time_s)?;
    root.present()?;
    Ok(())
}

/// One panel: the training curve, and evaluation points where there are any.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    points: &[Point],
    x_label: &str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    x_of: fn(&Point) -> f64,
) -> std::result::Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let mut chart = ChartBuilder::on(area)
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("episode_return_mean")
        .x_labels(8)
        .y_labels(10)
        .x_label_formatter(&|v| short_number(*v))
        .y_label_formatter(&|v| short_number(*v))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(RGBColor(245, 245, 245))
        .draw()?;

    let train: Vec<(f64, f64)> =
        points.iter().filter_map(|p| p.train.map(|v| (x_of(p), v))).collect();
    let blue = RGBColor(31, 119, 180);
    chart
        .draw_series(LineSeries::new(train, blue.stroke_width(2)))?
        .label("training (last 100 episodes)")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], blue.stroke_width(2)));

    // A multi-agent run: one thinner line per policy (its agents' summed rewards per episode).
    let ids: std::collections::BTreeSet<&String> =
        points.iter().flat_map(|p| p.policies.keys()).collect();
    for (i, id) in ids.into_iter().enumerate() {
        let color = POLICY_COLORS[i % POLICY_COLORS.len()];
        let line: Vec<(f64, f64)> =
            points.iter().filter_map(|p| p.policies.get(id).map(|&v| (x_of(p), v))).collect();
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(1)))?
            .label(format!("policy {id}"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], color.stroke_width(1)));
    }

    let eval: Vec<(f64, f64)> =
        points.iter().filter_map(|p| p.eval.map(|v| (x_of(p), v))).collect();
    if !eval.is_empty() {
        let red = RGBColor(214, 39, 40);
        chart
            .draw_series(LineSeries::new(eval.iter().copied(), red.stroke_width(1)))?
            .label("evaluation")
            .legend(move |(x, y)| Circle::new((x + 12, y), 4, red.filled()));
        chart.draw_series(eval.into_iter().map(|p| Circle::new(p, 4, red.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(180, 180, 180))
        .label_font((FONT, 15))
        .draw()?;
    Ok(())
}

/// The colors of policies' lines (matplotlib's tab10 after blue and red).
const POLICY_COLORS: [RGBColor; 6] = [
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// `1.5M`, `250k`, `12.5`: axis labels that stay short.
fn short_number(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    match v.abs() {
        a if a >= 1e6 => format!("{}M", trim(format!("{:.2}", v / 1e6))),
        a if a >= 1e3 => format!("{}k", trim(format!("{:.1}", v / 1e3))),
        _ => trim(format!("{v:.1}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    /// A result.json like `impala train` writes: a rising, then solved curve, with an
    /// evaluation every 5th iteration and no episode finished in the first one.
    fn synthetic_results(dir: &Path) -> TestResult {
        let mut text = String::new();
        for i in 0..60_u32 {
            let t = f64::from(i) * 0.25;
            let ret =
                if i == 0 { serde_json::Value::Null } else { (500.0 * (t / 8.0).min(1.0)).into() };
            let mut row = serde_json::json!({
                "training_iteration": i + 1,
                "time_total_s": t,
                "num_env_steps_sampled": u64::from(i) * 20_000,
                "timesteps_total": u64::from(i) * 20_000,
                "episode_return_mean": ret,
            });
            if i % 5 == 4 {
                row["evaluation"] =
                    serde_json::json!({ "episode_return_mean": 480.0_f64.min(60.0 * t) });
            }
            text.push_str(&format!("{row}\n"));
        }
        std::fs::write(dir.join("result.json"), text)?;
        std::fs::write(dir.join("params.json"), r#"{"env": "CartPole-v1"}"#)?;
        Ok(())
    }

    #[test]
    fn plots_a_run_folder_to_a_png() -> TestResult {
        let dir = tempfile::tempdir()?;
        synthetic_results(dir.path())?;
        let png = plot_run(dir.path())?;
        assert_eq!(png, dir.path().join(PLOT_FILE));
        let bytes = std::fs::read(&png)?;
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
        assert!(bytes.len() > 20_000, "suspiciously small PNG: {} bytes", bytes.len());
        // Nothing else is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()?;
        assert_eq!(names.len(), 3, "{names:?}");
        Ok(())
    }

    #[test]
    fn a_multi_agent_run_gets_a_line_per_policy() -> TestResult {
        let dir = tempfile::tempdir()?;
        synthetic_results(dir.path())?;
        let single = std::fs::read(plot_run(dir.path())?)?;
        let results = dir.path().join("result.json");
        let text: String = std::fs::read_to_string(&results)?
            .lines()
            .map(|line| {
                let mut row: serde_json::Value = serde_json::from_str(line)?;
                let ret = row["episode_return_mean"].as_f64().unwrap_or(f64::NAN);
                row["policy_reward_mean"] =
                    serde_json::json!({"left": ret / 2.0, "right": ret / 3.0});
                Ok(format!("{row}\n"))
            })
            .collect::<Result<_, serde_json::Error>>()?;
        std::fs::write(&results, &text)?;
        let points = read_points(&text, &results)?;
        assert_eq!(points[0].policies.len(), 0, "no episode yet: nothing to draw");
        assert_eq!(points[10].policies.keys().collect::<Vec<_>>(), ["left", "right"]);
        let multi = std::fs::read(plot_run(dir.path())?)?;
        assert_ne!(single, multi, "the policies' lines are drawn");
        Ok(())
    }

    #[test]
    fn a_folder_without_results_is_an_error_that_says_so() -> TestResult {
        let dir = tempfile::tempdir()?;
        let err = plot_run(dir.path()).err().ok_or("no error")?;
        assert!(format!("{err:#}").contains("a run folder"), "{err:#}");
        std::fs::write(dir.path().join("result.json"), "{\"time_total_s\": 0.5, \"num_env_steps_sampled\": 10, \"episode_return_mean\": null}\n")?;
        let err = plot_run(dir.path()).err().ok_or("no error")?;
        assert!(format!("{err:#}").contains("no episode finished"), "{err:#}");
        std::fs::write(dir.path().join("result.json"), "{\"time_total_s\": 0.5,\n")?;
        let err = plot_run(dir.path()).err().ok_or("no error")?;
        assert!(format!("{err:#}").contains("line 1 is not JSON"), "{err:#}");
        Ok(())
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short_number(1_500_000.0), "1.5M");
        assert_eq!(short_number(250_000.0), "250k");
        assert_eq!(short_number(0.0), "0");
        assert_eq!(short_number(12.5), "12.5");
    }
}

/// The README's code blocks, run as doctests so the documented usage keeps working.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
