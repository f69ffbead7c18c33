//! Pictures of a run: queue length and utilisation over time (`tandem sim --plot FILE.svg`), or
//! the GPU allocation curve of a placement evaluation (`--inflate`).

use std::fmt::Write;

use crate::{CurvePoint, Sample};

/// Renders the series as a standalone SVG document: utilisation (0–100 %, left axis) and queue
/// length (right axis) against time in days. At most 2,000 points per line are drawn.
pub fn svg(title: &str, series: &[Sample]) -> String {
    let (w, h, l, r, t, b) = (960.0, 420.0, 70.0, 70.0, 40.0, 50.0);
    let pw = w - l - r;
    let ph = h - t - b;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let esc = title.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let _ = writeln!(s, r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{esc}</text>"#, w / 2.0);
    if series.is_empty() {
        let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">no data</text></svg>"#, w / 2.0, h / 2.0);
        return s;
    }
    let t0 = series[0].t as f64;
    let t1 = (series[series.len() - 1].t as f64).max(t0 + 1.0);
    let qmax = series.iter().map(|x| x.queue).max().unwrap_or(1).max(1) as f64;
    let x = |tt: f64| l + (tt - t0) / (t1 - t0) * pw;
    let step = series.len().div_ceil(2000).max(1);
    let pts = |f: &dyn Fn(&Sample) -> f64| -> String {
        series.iter().step_by(step).map(|p| format!("{:.1},{:.1}", x(p.t as f64), t + ph - f(p) * ph)).collect::<Vec<_>>().join(" ")
    };
    let _ = writeln!(s, r##"<rect x="{l}" y="{t}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>"##);
    for k in 0..=4 {
        let y = t + ph - k as f64 / 4.0 * ph;
        let _ = writeln!(s, r##"<line x1="{l}" x2="{}" y1="{y}" y2="{y}" stroke="#eee"/>"##, l + pw);
        let _ = writeln!(s, r##"<text x="{}" y="{}" text-anchor="end" fill="#1f77b4">{}%</text>"##, l - 6.0, y + 4.0, k * 25);
        let _ = writeln!(s, r##"<text x="{}" y="{}" fill="#d62728">{:.0}</text>"##, l + pw + 6.0, y + 4.0, qmax * k as f64 / 4.0);
    }
    let days = (t1 - t0) / 86400.0;
    for k in 0..=5 {
        let tt = t0 + (t1 - t0) * k as f64 / 5.0;
        let _ = writeln!(s, r#"<text x="{:.1}" y="{}" text-anchor="middle">{:.1}</text>"#, x(tt), t + ph + 18.0, days * k as f64 / 5.0);
    }
    let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">time (days)</text>"#, l + pw / 2.0, h - 10.0);
    let _ = writeln!(s, r##"<polyline fill="none" stroke="#1f77b4" stroke-width="1" points="{}"/>"##, pts(&|p| p.util.clamp(0.0, 1.0)));
    let _ = writeln!(s, r##"<polyline fill="none" stroke="#d62728" stroke-width="1" points="{}"/>"##, pts(&|p| p.queue as f64 / qmax));
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" fill="#1f77b4">utilisation</text><text x="{}" y="{}" fill="#d62728">queue length</text>"##,
        l,
        t - 8.0,
        l + 100.0,
        t - 8.0
    );
    s.push_str("</svg>\n");
    s
}

/// Renders allocation curves (`tandem sim --inflate R --plot FILE.svg`): for each named run, GPU
/// allocation ratio (left axis, %) against arrived workload (% of GPU capacity), with the
/// diagonal an ideal packing would follow until the cluster is full.
pub fn curve_svg(title: &str, runs: &[(String, Vec<CurvePoint>)]) -> String {
    let (w, h, l, r, t, b) = (760.0, 480.0, 70.0, 170.0, 40.0, 50.0);
    let pw = w - l - r;
    let ph = h - t - b;
    let xmax = runs.iter().flat_map(|(_, c)| c.iter().map(|p| p.arrived)).fold(1.0f64, f64::max);
    let x = |v: f64| l + v / xmax * pw;
    let y = |v: f64| t + ph - v.clamp(0.0, 1.0) * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let esc = title.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let _ = writeln!(s, r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{esc}</text>"#, l + pw / 2.0);
    let _ = writeln!(s, r##"<rect x="{l}" y="{t}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>"##);
    for k in 0..=10 {
        let v = k as f64 / 10.0;
        let _ = writeln!(s, r##"<line x1="{l}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="#eee"/>"##, l + pw, y(v), y(v));
        let _ = writeln!(s, r#"<text x="{}" y="{:.1}" text-anchor="end">{}%</text>"#, l - 6.0, y(v) + 4.0, k * 10);
    }
    let mut k = 0.0;
    while k <= xmax + 1e-9 {
        let _ = writeln!(s, r#"<text x="{:.1}" y="{}" text-anchor="middle">{:.0}%</text>"#, x(k), t + ph + 18.0, k * 100.0);
        k += 0.1;
    }
    let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">arrived workload (% of GPU capacity)</text>"#, l + pw / 2.0, h - 10.0);
    let _ = writeln!(
        s,
        r##"<polyline fill="none" stroke="#bbb" stroke-dasharray="4 3" points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}"/>"##,
        x(0.0),
        y(0.0),
        x(1.0_f64.min(xmax)),
        y(1.0_f64.min(xmax)),
        x(xmax),
        y(1.0_f64.min(xmax))
    );
    const COLOURS: [&str; 8] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
    for (n, (name, curve)) in runs.iter().enumerate() {
        let c = COLOURS[n % COLOURS.len()];
        let pts: Vec<String> = std::iter::once((0.0, 0.0))
            .chain(curve.iter().map(|p| (p.arrived, p.allocated)))
            .map(|(a, v)| format!("{:.1},{:.1}", x(a), y(v)))
            .collect();
        let _ = writeln!(s, r#"<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{}"/>"#, pts.join(" "));
        let last = curve.last().map_or(0.0, |p| p.allocated);
        let esc = name.replace('&', "&amp;").replace('<', "&lt;");
        let _ =
            writeln!(s, r#"<text x="{}" y="{}" fill="{c}">{esc} ({:.1}%)</text>"#, l + pw + 10.0, t + 16.0 + 18.0 * n as f64, last * 100.0);
    }
    s.push_str("</svg>\n");
    s
}

/// The same curves as a text table: one row per point, one column per run (percentages).
pub fn curve_table(runs: &[(String, Vec<CurvePoint>)]) -> String {
    let mut s = String::new();
    let _ = write!(s, "{:>8}", "arrived");
    for (name, _) in runs {
        let _ = write!(s, " {:>10}", name);
    }
    s.push('\n');
    let n = runs.iter().map(|(_, c)| c.len()).max().unwrap_or(0);
    for i in 0..n {
        let a = runs.iter().find_map(|(_, c)| c.get(i)).map_or(0.0, |p| p.arrived);
        let _ = write!(s, "{:>7.0}%", a * 100.0);
        for (_, c) in runs {
            match c.get(i) {
                Some(p) => {
                    let _ = write!(s, " {:>9.2}%", p.allocated * 100.0);
                }
                None => {
                    let _ = write!(s, " {:>10}", "");
                }
            }
        }
        s.push('\n');
    }
    s
}
