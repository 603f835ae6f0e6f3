//! `impala plot RUN`: the learning curve of a run folder as a PNG.
//!
//! Reads `RUN/result.json` (one JSON result per line, RLlib's metric names) and draws
//! `episode_return_mean` (and `evaluation.episode_return_mean` where an iteration evaluated)
//! against env steps and against training time, side by side, into
//! `RUN/episode_return_mean.png`. Text is set in DejaVu Sans, embedded in the binary by the
//! `dejavu` crate, so no system font is needed.

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{bail, Context as _};
use plotters::prelude::*;

/// The picture's file name inside the run folder.
pub(crate) const PLOT_FILE: &str = "episode_return_mean.png";

/// The font family name the embedded font is registered under.
const FONT: &str = "sans-serif";

const SIZE: (u32, u32) = (1400, 560);

/// One iteration's numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    steps: f64,
    time_s: f64,
    train: Option<f64>,
    eval: Option<f64>,
}

/// Draws `run_dir/result.json` into `run_dir/episode_return_mean.png` and returns its path.
/// The file is written whole or not at all (drawn to a temporary file, then renamed).
pub(crate) fn plot_run(run_dir: &Path) -> anyhow::Result<PathBuf> {
    let results = run_dir.join("result.json");
    let text = std::fs::read_to_string(&results).with_context(|| {
        format!(
            "cannot read {}: is {} a run folder (`impala train` writes result.json there)?",
            results.display(),
            run_dir.display()
        )
    })?;
    let points = read_points(&text).with_context(|| format!("{}", results.display()))?;
    if !points.iter().any(|p| p.train.is_some() || p.eval.is_some()) {
        bail!(
            "{}: no iteration has an episode_return_mean yet (no episode finished); train longer",
            results.display()
        );
    }
    let title = title(run_dir);
    let out = run_dir.join(PLOT_FILE);
    let partial = run_dir.join(format!(".{PLOT_FILE}.partial.png"));
    draw(&partial, &title, &points)
        .with_context(|| format!("cannot draw {}", partial.display()))?;
    std::fs::rename(&partial, &out)
        .with_context(|| format!("cannot move {} to {}", partial.display(), out.display()))?;
    Ok(out)
}

/// The points of `result.json`, one line per iteration. Lines that are not JSON (a run cut
/// off while writing) are an error naming the line; a missing or non-finite return is a gap.
fn read_points(text: &str) -> anyhow::Result<Vec<Point>> {
    let mut points = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("line {} is not JSON", i + 1))?;
        let number = |v: &serde_json::Value| v.as_f64().filter(|x| x.is_finite());
        let steps =
            number(&row["num_env_steps_sampled"]).or_else(|| number(&row["timesteps_total"]));
        let (Some(steps), Some(time_s)) = (steps, number(&row["time_total_s"])) else {
            bail!("line {} has no num_env_steps_sampled or time_total_s", i + 1);
        };
        points.push(Point {
            steps,
            time_s,
            train: number(&row["episode_return_mean"]),
            eval: number(&row["evaluation"]["episode_return_mean"]),
        });
    }
    Ok(points)
}

/// `env (run folder name)`, the env from `params.json` when it is there.
fn title(run_dir: &Path) -> String {
    let name = run_dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| run_dir.display().to_string());
    let env = std::fs::read_to_string(run_dir.join("params.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|p| p["env"].as_str().map(str::to_string));
    match env {
        Some(env) if !name.contains(&env) => format!("{env}: {name}"),
        _ => name,
    }
}

/// Registers the embedded DejaVu Sans once per process.
fn register_font() -> anyhow::Result<()> {
    static REGISTER: Once = Once::new();
    let mut ok = true;
    REGISTER.call_once(|| {
        ok = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
            .is_ok();
    });
    if !ok {
        bail!("the embedded DejaVu Sans font is unreadable");
    }
    Ok(())
}

fn draw(path: &Path, title: &str, points: &[Point]) -> anyhow::Result<()> {
    register_font()?;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(44);
    top.draw(&Text::new(
        format!("episode_return_mean - {title}"),
        (20, 12),
        (FONT, 22).into_font().color(&BLACK),
    ))?;
    let (left, right) = body.split_horizontally(SIZE.0 / 2);

    let values = points.iter().flat_map(|p| p.train.into_iter().chain(p.eval));
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
) -> anyhow::Result<()>
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

    /// A result.json like `impala train` writes: a rising, then solved curve, with an
    /// evaluation every 5th iteration and no episode finished in the first one.
    fn synthetic_results(dir: &Path) -> anyhow::Result<()> {
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
    fn plots_a_run_folder_to_a_png() -> anyhow::Result<()> {
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
    fn a_folder_without_results_is_an_error_that_says_so() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let err = plot_run(dir.path()).err().ok_or_else(|| anyhow::anyhow!("no error"))?;
        assert!(format!("{err:#}").contains("a run folder"), "{err:#}");
        std::fs::write(dir.path().join("result.json"), "{\"time_total_s\": 0.5, \"num_env_steps_sampled\": 10, \"episode_return_mean\": null}\n")?;
        let err = plot_run(dir.path()).err().ok_or_else(|| anyhow::anyhow!("no error"))?;
        assert!(format!("{err:#}").contains("no episode finished"), "{err:#}");
        std::fs::write(dir.path().join("result.json"), "{\"time_total_s\": 0.5,\n")?;
        let err = plot_run(dir.path()).err().ok_or_else(|| anyhow::anyhow!("no error"))?;
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
