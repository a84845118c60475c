//! Hit-rate curves: hit rate against capacity, one line per policy, with the unbounded-cache
//! maximum as a dashed line.
//!
//! Drawn with `plotters`. The SVG is always written: its text is SVG `<text>` that the viewer
//! renders. A PNG needs glyphs rasterised here; `plotters`' `ab_glyph` backend does that in pure
//! Rust from a TrueType file, so no system library (fontconfig, freetype) is linked. The font is
//! looked up at run time — `$KVCM_PLOT_FONT`, then common DejaVu / Liberation paths — and
//! registered once; text layout for both formats uses it. Without any font file the plot is
//! skipped with an error that says how to fix it, and the CSV results are unaffected.
//!
//! The x axis is logarithmic when the capacities span more than a factor of 20 (sweeps from 1%
//! to 100% of the distinct blocks), linear otherwise.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::policy::PolicyKind;
use crate::sweep::SweepRow;

/// Where fonts are looked for, after `$KVCM_PLOT_FONT`.
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/Library/Fonts/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// Output formats of a plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlotFormats {
    /// Write `hit_rate.svg`.
    pub svg: bool,
    /// Write `hit_rate.png`.
    pub png: bool,
}

/// What a plot call wrote.
#[derive(Debug, Default)]
pub struct PlotOutput {
    /// Files written.
    pub written: Vec<PathBuf>,
    /// Formats that could not be written, and why.
    pub skipped: Vec<String>,
}

/// Registers a font for text layout and PNG rendering, once per process. Returns the font's
/// path, or an error saying where fonts were looked for.
pub fn ensure_font() -> Result<&'static Path, String> {
    static FONT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let from_env = std::env::var_os("KVCM_PLOT_FONT").map(PathBuf::from);
        let candidates = from_env.into_iter().chain(FONT_CANDIDATES.iter().map(PathBuf::from));
        for path in candidates {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            // plotters keeps registered fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return Ok(path);
            }
        }
        Err(format!(
            "no TrueType font found for plot text; set KVCM_PLOT_FONT to a .ttf file \
             (looked in {}; on Debian: apt-get install fonts-dejavu-core)",
            FONT_CANDIDATES[..3].join(", ")
        ))
    })
    .as_deref()
    .map_err(Clone::clone)
}

fn color(policy: PolicyKind) -> RGBColor {
    match policy {
        PolicyKind::Lru => RGBColor(31, 119, 180),
        PolicyKind::Lfu => RGBColor(255, 127, 14),
        PolicyKind::Ttl => RGBColor(148, 103, 189),
        PolicyKind::RandomLru => RGBColor(140, 86, 75),
        PolicyKind::LeafLru => RGBColor(44, 160, 44),
        PolicyKind::S3Fifo => RGBColor(188, 189, 34),
        PolicyKind::LeafLfu => RGBColor(227, 119, 194),
        PolicyKind::Adaptive => RGBColor(23, 190, 207),
        PolicyKind::Opt => RGBColor(214, 39, 40),
    }
}

/// Writes `hit_rate.svg` and/or `hit_rate.png` into `dir`.
pub fn plot_hit_rates(
    rows: &[SweepRow],
    max_hit_rate: f64,
    title: &str,
    dir: &Path,
    formats: PlotFormats,
) -> PlotOutput {
    let mut output = PlotOutput::default();
    if !formats.svg && !formats.png {
        return output;
    }
    if let Err(why) = ensure_font() {
        output.skipped.push(why);
        return output;
    }
    if formats.svg {
        let path = dir.join("hit_rate.svg");
        let drawn = draw(&SVGBackend::new(&path, (960, 600)).into_drawing_area(), rows, max_hit_rate, title);
        match drawn {
            Ok(()) => output.written.push(path),
            Err(e) => {
                // Do not leave a half-drawn file behind.
                let _ = std::fs::remove_file(&path);
                output.skipped.push(format!("{}: {e}", path.display()));
            }
        }
    }
    if formats.png {
        let path = dir.join("hit_rate.png");
        let drawn = draw(&BitMapBackend::new(&path, (1280, 800)).into_drawing_area(), rows, max_hit_rate, title);
        match drawn {
            Ok(()) => output.written.push(path),
            Err(e) => {
                // Do not leave a half-drawn file behind.
                let _ = std::fs::remove_file(&path);
                output.skipped.push(format!("{}: {e}", path.display()));
            }
        }
    }
    output
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    rows: &[SweepRow],
    max_hit_rate: f64,
    title: &str,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let min_x = rows.iter().map(|r| r.capacity).min().unwrap_or(1).max(1) as f64;
    let max_x = (rows.iter().map(|r| r.capacity).max().unwrap_or(1) as f64).max(min_x + 1.0);
    let top = rows.iter().map(|r| r.stats.hit_rate()).fold(max_hit_rate, f64::max);
    let y_max = (top * 1.1).clamp(0.05, 1.0);
    let mut policies: Vec<PolicyKind> = Vec::new();
    for row in rows {
        if !policies.contains(&row.policy) {
            policies.push(row.policy);
        }
    }
    let series = |policy: PolicyKind| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r.policy == policy && r.capacity > 0)
            .map(|r| (r.capacity as f64, r.stats.hit_rate()))
            .collect()
    };

    let mut builder = ChartBuilder::on(root);
    builder.caption(title, ("sans-serif", 24)).margin(20).margin_right(40).x_label_area_size(56).y_label_area_size(72);

    macro_rules! finish {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc("capacity (blocks)")
                .y_desc("hit rate (hit blocks / requested blocks)")
                .y_label_formatter(&|v| format!("{:.0}%", v * 100.0))
                .x_label_formatter(&|v| format_count(*v))
                .label_style(("sans-serif", 16))
                .axis_desc_style(("sans-serif", 18))
                .draw()
                .map_err(err)?;
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(min_x, max_hit_rate), (max_x, max_hit_rate)],
                    8,
                    6,
                    BLACK.stroke_width(1),
                ))
                .map_err(err)?
                .label(format!("unbounded cache ({:.1}%)", max_hit_rate * 100.0))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], BLACK.stroke_width(1)));
            for &policy in &policies {
                let points = series(policy);
                let c = color(policy);
                // LRU, TTL and leaf-aware LRU often coincide; a wider LRU line stays visible
                // under the others.
                let width = if policy == PolicyKind::Lru { 6 } else { 2 };
                chart
                    .draw_series(LineSeries::new(points.clone(), c.stroke_width(width)))
                    .map_err(err)?
                    .label(policy.name())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
                chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, c.filled()))).map_err(err)?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .label_font(("sans-serif", 16))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.5))
                .draw()
                .map_err(err)?;
        }};
    }

    if max_x / min_x > 20.0 {
        finish!(builder.build_cartesian_2d((min_x..max_x).log_scale(), 0f64..y_max).map_err(err)?);
    } else {
        finish!(builder.build_cartesian_2d(min_x..max_x, 0f64..y_max).map_err(err)?);
    }
    root.present().map_err(err)?;
    Ok(())
}

/// `43924` → `43.9k`, for axis labels.
fn format_count(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::ReplayStats;

    fn rows() -> Vec<SweepRow> {
        [(PolicyKind::Lru, 0.1), (PolicyKind::Opt, 0.2)]
            .into_iter()
            .flat_map(|(policy, base)| {
                [10usize, 100, 1000].into_iter().enumerate().map(move |(i, capacity)| SweepRow {
                    capacity,
                    policy,
                    stats: ReplayStats {
                        requests: 1,
                        requested_blocks: 100,
                        hit_blocks: ((base + 0.2 * i as f64) * 100.0) as u64,
                        evictions: 0,
                        peak_resident: 0,
                    },
                    seconds: 0.0,
                })
            })
            .collect()
    }

    #[test]
    fn an_svg_plot_names_every_policy_and_the_unbounded_line() {
        if let Err(why) = ensure_font() {
            eprintln!("skipping: {why}");
            return;
        }
        let dir = std::env::temp_dir().join(format!("kvcm-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = plot_hit_rates(&rows(), 0.7, "test", &dir, PlotFormats { svg: true, png: true });
        assert!(out.skipped.is_empty(), "{:?}", out.skipped);
        let svg = std::fs::read_to_string(dir.join("hit_rate.svg")).unwrap();
        // plotters writes each text on its own line between the tags.
        assert!(svg.contains("\nlru\n</text>") && svg.contains("\nopt\n</text>"), "legend missing");
        assert!(svg.contains("unbounded cache (70.0%)"));
        let png = std::fs::read(dir.join("hit_rate.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn counts_are_abbreviated_on_axes() {
        assert_eq!(format_count(439.0), "439");
        assert_eq!(format_count(43_924.0), "43.9k");
        assert_eq!(format_count(2_500_000.0), "2.5M");
    }
}
