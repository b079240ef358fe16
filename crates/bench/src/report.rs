//! Figures as data: the Markdown tables of `docs/benchmarks.md`, the PNG
//! plots (gnuplot) and the JSON results.

use crate::util::Cell;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;

/// One line of a figure: a daemon (or a store operation) over the x values.
#[derive(Debug, Clone)]
pub struct Series {
    /// Name in the table and the plot's key.
    pub name: String,
    /// holdfastd's (its ratio to the best other series is shown).
    pub holdfast: bool,
    /// One cell per x value.
    pub cells: Vec<Cell>,
}

/// How the y axis and the x axis are scaled in the plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Linear.
    Linear,
    /// Logarithmic, base 10.
    Log10,
    /// Logarithmic, base 2.
    Log2,
}

/// One figure: a table and a plot.
#[derive(Debug, Clone)]
pub struct Figure {
    /// File stem of the plot, e.g. `fig6a-packed`.
    pub id: String,
    /// Section title.
    pub title: String,
    /// What is measured (a paragraph).
    pub what: String,
    /// The x column's header and axis label, with its unit.
    pub x_label: String,
    /// The value column's header and axis label, with its unit.
    pub y_label: String,
    /// The series column's header ("daemon", "operation").
    pub series_label: String,
    /// x values.
    pub xs: Vec<f64>,
    /// How x values are written in the table.
    pub x_names: Vec<String>,
    /// x axis scale.
    pub x_scale: Scale,
    /// y axis scale.
    pub y_scale: Scale,
    /// The lines.
    pub series: Vec<Series>,
    /// Headers of the cells' extra columns.
    pub extra_headers: Vec<String>,
    /// Whether holdfastd's rows get the ratio to the best other series (lower is better).
    pub ratio: bool,
    /// Bullet notes under the table.
    pub notes: Vec<String>,
    /// The plot, relative to the Markdown file, once drawn.
    pub png: Option<String>,
}

/// A number with a precision that suits its size.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a < 0.01 {
        format!("{v:.4}")
    } else if a < 1.0 {
        format!("{v:.3}")
    } else if a < 100.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

/// `median (min–max)` with the number of runs when fewer than `runs`.
pub fn fmt_cell(c: &Cell, runs: usize) -> String {
    match c.value {
        Some((m, lo, hi)) => {
            let mut s = if hi > lo && num(hi) != num(lo) {
                format!("{} ({}–{})", num(m), num(lo), num(hi))
            } else {
                num(m)
            };
            if c.runs < runs {
                let _ = write!(s, " ({} run{})", c.runs, if c.runs == 1 { "" } else { "s" });
            }
            s
        }
        None => c.note.clone(),
    }
}

impl Figure {
    /// holdfastd's ratio to the best other series at x index `i`, with that series' name.
    pub fn ratio_at(&self, series: &Series, i: usize) -> Option<(f64, String)> {
        let mine = series.cells.get(i)?.median()?;
        let (best, name) = self
            .series
            .iter()
            .filter(|s| !s.holdfast)
            .filter_map(|s| Some((s.cells.get(i)?.median()?, s.name.clone())))
            .min_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal))?;
        (best > 0.0).then(|| (mine / best, name))
    }

    /// The Markdown section.
    pub fn markdown(&self, runs: usize) -> String {
        let mut t = format!("\n## {}\n\n{}\n", self.title, self.what);
        if let Some(p) = &self.png {
            let _ = writeln!(t, "\n![{}]({p})", self.title);
        }
        let _ = write!(
            t,
            "\n| {} | {} | {}: median (min–max) |",
            self.x_label, self.series_label, self.y_label
        );
        for h in &self.extra_headers {
            let _ = write!(t, " {h} |");
        }
        if self.ratio {
            t.push_str(" holdfastd ÷ best other |");
        }
        t.push_str("\n|---|---|---|");
        for _ in &self.extra_headers {
            t.push_str("---|");
        }
        if self.ratio {
            t.push_str("---|");
        }
        t.push('\n');
        for (i, xn) in self.x_names.iter().enumerate() {
            for s in &self.series {
                let Some(c) = s.cells.get(i) else { continue };
                let _ = write!(t, "| {xn} | {} | {} |", s.name, fmt_cell(c, runs));
                for j in 0..self.extra_headers.len() {
                    let e = c.extra.get(j).map_or("–", String::as_str);
                    let _ = write!(t, " {e} |");
                }
                if self.ratio {
                    let r = if s.holdfast {
                        self.ratio_at(s, i)
                            .map_or("–".to_string(), |(r, n)| format!("**{r:.2}×** ({n})"))
                    } else {
                        "".to_string()
                    };
                    let _ = write!(t, " {r} |");
                }
                t.push('\n');
            }
        }
        if !self.notes.is_empty() {
            t.push('\n');
            for n in &self.notes {
                let _ = writeln!(t, "- {n}");
            }
        }
        t
    }

    /// The figure as JSON.
    pub fn json(&self) -> Value {
        let series: Vec<Value> = self
            .series
            .iter()
            .map(|s| {
                let cells: Vec<Value> = s
                    .cells
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let ratio = if s.holdfast && self.ratio {
                            self.ratio_at(s, i)
                                .map(|(r, n)| json!({ "ratio": r, "best_other": n }))
                        } else {
                            None
                        };
                        json!({
                            "x": self.xs.get(i),
                            "median": c.value.map(|v| v.0),
                            "min": c.value.map(|v| v.1),
                            "max": c.value.map(|v| v.2),
                            "runs": c.runs,
                            "note": c.note,
                            "extra": c.extra,
                            "vs_best_other": ratio,
                        })
                    })
                    .collect();
                json!({ "name": s.name, "holdfastd": s.holdfast, "cells": cells })
            })
            .collect();
        json!({
            "id": self.id,
            "title": self.title,
            "x_label": self.x_label,
            "y_label": self.y_label,
            "x_names": self.x_names,
            "extra_headers": self.extra_headers,
            "series": series,
            "notes": self.notes,
            "png": self.png,
        })
    }

    /// Draws the plot with gnuplot into `dir/<id>.png` (data and script in
    /// `work`); sets [`Figure::png`] to `rel/<id>.png`.
    pub fn plot(&mut self, dir: &Path, rel: &str, work: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
        let dat = work.join(format!("{}.dat", self.id));
        let png = dir.join(format!("{}.png", self.id));
        let mut data = String::new();
        let mut plots = Vec::new();
        let mut block = 0;
        for (si, s) in self.series.iter().enumerate() {
            let pts: Vec<(f64, (f64, f64, f64))> = self
                .xs
                .iter()
                .zip(&s.cells)
                .filter_map(|(x, c)| Some((*x, c.value?)))
                .filter(|(_, (m, lo, _))| self.y_scale == Scale::Linear || (*m > 0.0 && *lo > 0.0))
                .collect();
            if pts.is_empty() {
                continue;
            }
            for (x, (m, lo, hi)) in &pts {
                let _ = writeln!(data, "{x} {m} {lo} {hi}");
            }
            data.push_str("\n\n");
            let style = if s.holdfast { "lw 2.5" } else { "lw 1.5" };
            plots.push(format!(
                "'{}' index {block} using 1:2:3:4 with yerrorlines {style} pt {} ps 1.2 title \"{}\"",
                dat.display(),
                [7, 5, 9, 11, 13, 4, 6][si % 7],
                s.name.replace('"', "'")
            ));
            block += 1;
        }
        if plots.is_empty() {
            self.png = None;
            return Ok(());
        }
        std::fs::write(&dat, data).with_context(|| format!("writing {}", dat.display()))?;
        let scale = |axis: &str, s: Scale| match s {
            Scale::Linear => String::new(),
            Scale::Log10 => format!("set logscale {axis} 10\n"),
            Scale::Log2 => format!("set logscale {axis} 2\n"),
        };
        let xtics: Vec<String> = self
            .xs
            .iter()
            .zip(&self.x_names)
            .map(|(x, n)| format!("\"{n}\" {x}"))
            .collect();
        let script = format!(
            "set terminal pngcairo size 960,600 noenhanced font \",11\"\nset output '{}'\nset title \"{}\"\nset xlabel \"{}\"\nset ylabel \"{}\"\n{}{}set xtics ({})\nset grid\nset key below\nset offsets graph 0.03, graph 0.03, 0, 0\nplot {}\n",
            png.display(),
            self.title.replace('"', "'"),
            self.x_label.replace('"', "'"),
            self.y_label.replace('"', "'"),
            scale("x", self.x_scale),
            scale("y", self.y_scale),
            xtics.join(", "),
            plots.join(", \\\n     ")
        );
        let gp = work.join(format!("{}.gp", self.id));
        std::fs::write(&gp, &script).with_context(|| format!("writing {}", gp.display()))?;
        let out = std::process::Command::new("gnuplot")
            .arg(&gp)
            .output()
            .context("running gnuplot")?;
        if !out.status.success() {
            bail!(
                "gnuplot {}: {}",
                gp.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        self.png = Some(format!("{rel}/{}.png", self.id));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(v: f64) -> Cell {
        Cell::from_runs(&[v, v * 1.1, v * 0.9], None)
    }

    #[test]
    fn ratio_is_against_the_best_other() {
        let f = Figure {
            id: "t".into(),
            title: "t".into(),
            what: String::new(),
            x_label: "N".into(),
            y_label: "time (s)".into(),
            series_label: "daemon".into(),
            xs: vec![1.0],
            x_names: vec!["1".into()],
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: vec![
                Series {
                    name: "holdfastd".into(),
                    holdfast: true,
                    cells: vec![cell(1.0)],
                },
                Series {
                    name: "a".into(),
                    holdfast: false,
                    cells: vec![cell(4.0)],
                },
                Series {
                    name: "b".into(),
                    holdfast: false,
                    cells: vec![cell(2.0)],
                },
            ],
            extra_headers: vec![],
            ratio: true,
            notes: vec![],
            png: None,
        };
        let (r, n) = f.ratio_at(&f.series[0], 0).unwrap();
        assert!((r - 0.5).abs() < 1e-9);
        assert_eq!(n, "b");
        let md = f.markdown(3);
        assert!(md.contains("**0.50×** (b)"), "{md}");
        assert!(md.contains("| 1 | holdfastd | 1.00 (0.900–1.10) |"), "{md}");
    }
}
