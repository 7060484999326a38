//! The harness's output: a JSON file, a Markdown section for benches/RESULTS.md, and an SVG
//! chart of throughput and latency per contender and size.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;
use serde::Serialize;

use crate::contenders::Contender;
use crate::run::{Drain, Steady};

/// One record size's figures.
#[derive(Debug, Clone, Serialize)]
pub struct SizeResult {
    /// Record (value) size in bytes.
    pub size: usize,
    /// Backlog records drained.
    pub records: u64,
    /// Per contender: the drain.
    pub drains: Vec<(Contender, Drain)>,
    /// Per contender and round: the steady mode.
    pub steady: Vec<(Contender, Round)>,
}

/// One steady run of one contender, and which round of `--repeat` it was.
#[derive(Debug, Clone, Serialize)]
pub struct Round {
    /// 1, 2, ...: the contenders took turns, so runs of one round are minutes apart at most.
    pub round: u32,
    /// What it measured.
    #[serde(flatten)]
    pub steady: Steady,
}

impl SizeResult {
    fn drain(&self, c: Contender) -> Option<&Drain> {
        self.drains.iter().find(|(k, _)| *k == c).map(|(_, d)| d)
    }

    /// `c`'s steady run with the median p99 over the rounds (the lower middle of an even
    /// count).
    fn steady_of(&self, c: Contender) -> Option<&Steady> {
        let mut runs: Vec<&Steady> = self.steady.iter().filter(|(k, _)| *k == c).map(|(_, r)| &r.steady).collect();
        runs.sort_by(|a, b| a.p99_ms.total_cmp(&b.p99_ms));
        runs.get(runs.len().saturating_sub(1) / 2).copied()
    }

    fn rounds(&self) -> u32 {
        self.steady.iter().map(|(_, r)| r.round).max().unwrap_or(0)
    }

    fn round_of(&self, c: Contender, round: u32) -> Option<&Steady> {
        self.steady.iter().find(|(k, r)| *k == c && r.round == round).map(|(_, r)| &r.steady)
    }
}

/// Everything one invocation measured.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// UTC date of the run.
    pub date: String,
    /// Cores and memory of the machine.
    pub machine: String,
    /// The link one cluster sat across, if any (`--rtt`).
    pub link: Option<crate::kafka::Link>,
    /// The command that produced it.
    pub command: String,
    /// Partitions of every topic.
    pub partitions: i32,
    /// Seconds of measured steady load.
    pub steady_seconds: u64,
    /// Whether the steady rate was fixed (`--rate`) rather than half the ceiling's drain.
    pub rate_fixed: bool,
    /// How each contender ran.
    pub settings: Vec<(Contender, String)>,
    /// Per record size.
    pub sizes: Vec<SizeResult>,
}

fn size_name(size: usize) -> String {
    if size >= 1024 {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} B")
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    }
}

impl Results {
    /// Writes the JSON file.
    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, serde_json::to_string_pretty(self)?).with_context(|| format!("writing {}", path.display()))
    }

    /// The Markdown section for benches/RESULTS.md.
    pub fn markdown(&self, chart: &str) -> String {
        let mut md = format!(
            "\n## strait vs MirrorMaker 2 vs the raw copy ceiling{}{} ({})\n\n{}, Kafka 4.3.1 on loopback (`us-east` 3 brokers, `us-west` 1 broker){}, \
             {} partitions per topic. Command:\n\n    {}\n\n",
            if self.sizes.iter().all(|s| s.drains.is_empty()) { ": latency at a fixed rate" } else { "" },
            self.link.map_or(String::new(), |l| format!(", {} ms from the {}", l.rtt_ms, match l.across {
                crate::kafka::Across::Target => "target",
                crate::kafka::Across::Source => "source",
            })),
            self.date,
            self.machine,
            self.link.map_or(String::new(), |l| format!(
                "; the {} is a cluster of its own (`wan-west` 1 broker, or `bench-wan-east` 3) behind Toxiproxy 2.5.0 \
                 (`scripts/wan.sh`) with {} ms round trip and {} ms jitter, which every contender crosses",
                match l.across { crate::kafka::Across::Target => "target", crate::kafka::Across::Source => "source" },
                l.rtt_ms,
                l.rtt_ms / 10
            )),
            self.partitions,
            self.command
        );
        for (c, s) in &self.settings {
            md += &format!("- **{}**: {s}\n", c.name());
        }
        md += "\n| size | contender | records/s | MB/s | CPU s (drain) | records per CPU-s | peak RSS MiB | first record s | B to target per record | steady rate asked / achieved | p50 ms | p99 ms | p99.9 ms |\n";
        md += "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        for s in &self.sizes {
            for c in [
                Contender::Ceiling,
                Contender::Strait,
                Contender::StraitWan,
                Contender::Mm2,
                Contender::Mm2Stock,
                Contender::Mm2Wan,
            ] {
                let (d, st) = (s.drain(c), s.steady_of(c));
                if d.is_none() && st.is_none() {
                    continue;
                }
                let drain = |f: fn(&Drain) -> String| d.map_or("-".to_string(), f);
                let lat = |f: fn(&Steady) -> f64| st.map_or("-".to_string(), |st| format!("{:.0}", f(st)));
                let rates = st.map_or("-".to_string(), |st| format!("{} / {:.0}", st.rate, st.achieved_rate));
                md += &format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {rates} | {} | {} | {} |\n",
                    size_name(s.size),
                    c.name(),
                    drain(|d| format!("{:.0}", d.records_per_second)),
                    drain(|d| format!("{:.1}", d.mb_per_second)),
                    drain(|d| format!("{:.1}", d.cpu_seconds)),
                    drain(|d| format!("{:.0}", d.records_per_cpu_second)),
                    drain(|d| format!("{:.0}", d.peak_rss_mib)),
                    drain(|d| format!("{:.1}", d.first_record_seconds)),
                    drain(|d| format!("{:.0}", d.target_bytes_per_record)),
                    lat(|s| s.p50_ms),
                    lat(|s| s.p99_ms),
                    lat(|s| s.p999_ms)
                );
            }
        }
        if self.sizes.iter().any(|s| s.rounds() > 1) {
            md += "\nSteady rounds (the contenders took turns; the table above shows each one's median-p99 run):\n\n";
            md += "| size | round | ceiling p50 / p99 / p99.9 ms | strait p50 / p99 / p99.9 ms | mm2 p50 / p99 / p99.9 ms | MM2 p99 / strait p99 |\n|---|---|---|---|---|---|\n";
            for s in &self.sizes {
                for round in 1..=s.rounds() {
                    let cell = |c| {
                        s.round_of(c, round).map_or("-".to_string(), |x| {
                            format!("{:.0} / {:.0} / {:.0}", x.p50_ms, x.p99_ms, x.p999_ms)
                        })
                    };
                    let p99 = |c| s.round_of(c, round).map(|x| x.p99_ms);
                    md += &format!(
                        "| {} | {round} | {} | {} | {} | {} |\n",
                        size_name(s.size),
                        cell(Contender::Ceiling),
                        cell(Contender::Strait),
                        cell(Contender::Mm2),
                        ratio(p99(Contender::Mm2), p99(Contender::Strait))
                    );
                }
            }
        }
        md += "\nRatios from this run, against the goals of issue 15:\n\n";
        md += "| size | strait/MM2 records per CPU-s (goal ≥ 4) | strait/ceiling CPU per record (goal ≤ 1.1) | strait/ceiling throughput | MM2 RSS / strait RSS | strait p99 ms (goal ≤ 50) | MM2 p99 / strait p99 (goal ≥ 3) |\n|---|---|---|---|---|---|---|\n";
        for s in &self.sizes {
            let (st, mm, ce) = (s.drain(Contender::Strait), s.drain(Contender::Mm2), s.drain(Contender::Ceiling));
            let p99 = |c| s.steady_of(c).map(|x| x.p99_ms);
            md += &format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                size_name(s.size),
                ratio(st.map(|d| d.records_per_cpu_second), mm.map(|d| d.records_per_cpu_second)),
                ratio(ce.map(|d| d.records_per_cpu_second), st.map(|d| d.records_per_cpu_second)),
                ratio(st.map(|d| d.records_per_second), ce.map(|d| d.records_per_second)),
                ratio(mm.map(|d| d.peak_rss_mib), st.map(|d| d.peak_rss_mib)),
                p99(Contender::Strait).map_or("-".into(), |x| format!("{x:.0}")),
                ratio(p99(Contender::Mm2), p99(Contender::Strait)),
            );
        }
        for s in &self.sizes {
            if let Some(i) = s.steady_of(Contender::Strait).and_then(|st| st.inside_ms) {
                md += &format!(
                    "\nstrait's own histograms at {}: a batch's oldest record was fetched p50 {:.1} ms / p99 {:.1} ms after its source timestamp, \
                     and acknowledged by the target p50 {:.1} ms / p99 {:.1} ms after it.\n",
                    size_name(s.size),
                    i.fetched_p50,
                    i.fetched_p99,
                    i.acked_p50,
                    i.acked_p99
                );
            }
        }
        let load = if self.rate_fixed {
            "at the fixed rate in the table".to_string()
        } else {
            "at 50% of the ceiling's drain rate".to_string()
        };
        md += &format!(
            "\nChart: [{chart}]({chart}). Throughput is over the drain (first to last replicated record); CPU is the \
             process's user + system time over the same span; bytes to target are the target topic's log segments over its records; \
             latency is arrival at a consumer on the target minus the source record's timestamp, over {} s after a {} s warm-up load, {load}.\n",
            self.steady_seconds,
            crate::run::WARM_UP_SECONDS
        );
        md
    }

    /// Draws MB/s and p99 latency per size and contender.
    pub fn chart(&self, path: &Path) -> anyhow::Result<()> {
        let root = SVGBackend::new(path, (1100, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
        let (left, right) = root.split_horizontally(550);
        let contenders = [Contender::Ceiling, Contender::Strait, Contender::Mm2];
        let colors = [RGBColor(120, 120, 120), RGBColor(31, 119, 180), RGBColor(214, 39, 40)];
        type Metric = Box<dyn Fn(&SizeResult, Contender) -> Option<f64>>;
        let panels: [(&str, Metric); 2] = [
            ("drain throughput, MB/s", Box::new(|s: &SizeResult, c| s.drain(c).map(|d| d.mb_per_second))),
            ("steady p99 latency, ms", Box::new(|s: &SizeResult, c| s.steady_of(c).map(|x| x.p99_ms))),
        ];
        for (area, (title, value)) in [left, right].iter().zip(panels.iter()) {
            let max =
                self.sizes.iter().flat_map(|s| contenders.iter().filter_map(|c| value(s, *c))).fold(1.0_f64, f64::max)
                    * 1.15;
            let n = self.sizes.len();
            let mut chart = ChartBuilder::on(area)
                .caption(*title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(30)
                .y_label_area_size(50)
                // Group i is centred on x = i, so the axis labels fall under their bars.
                .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..max)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let names: Vec<String> = self.sizes.iter().map(|s| size_name(s.size)).collect();
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n)
                .x_label_formatter(&|x| names.get(x.round().max(0.0) as usize).cloned().unwrap_or_default())
                .draw()
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            for (ci, c) in contenders.iter().enumerate() {
                let color = colors[ci];
                let bars: Vec<Rectangle<(f64, f64)>> = self
                    .sizes
                    .iter()
                    .enumerate()
                    .filter_map(|(si, s)| value(s, *c).map(|v| (si, v)))
                    .map(|(si, v)| {
                        let x = si as f64 - 0.4 + ci as f64 * 0.27;
                        Rectangle::new([(x, 0.0), (x + 0.25, v)], color.filled())
                    })
                    .collect();
                chart
                    .draw_series(bars)
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .label(c.name())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
            }
            chart
                .configure_series_labels()
                .border_style(BLACK)
                .background_style(WHITE)
                .draw()
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(())
    }
}
