//! An SVG picture of queue length and utilisation over time (`tandem sim --plot FILE.svg`).

use std::fmt::Write;

use crate::Sample;

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
