//! Latency summaries: nearest-rank percentiles over every sample (no histogram buckets).

use serde::{Deserialize, Serialize};

/// A distribution of durations in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub count: usize,
    pub min_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

impl Summary {
    pub fn of(samples: &[f64]) -> Self {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
        if sorted.is_empty() {
            return Self::default();
        }
        sorted.sort_by(f64::total_cmp);
        let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
        Self {
            count: sorted.len(),
            min_ms: round3(sorted[0]),
            p50_ms: round3(percentile(&sorted, 50.0)),
            p90_ms: round3(percentile(&sorted, 90.0)),
            p99_ms: round3(percentile(&sorted, 99.0)),
            max_ms: round3(sorted[sorted.len() - 1]),
            mean_ms: round3(mean),
        }
    }

    /// `p50 / p90 / p99 / max` in one cell.
    pub fn cell(&self) -> String {
        if self.count == 0 {
            return "no samples".into();
        }
        format!(
            "{} / {} / {} / {} ms (n={})",
            fmt_ms(self.p50_ms),
            fmt_ms(self.p90_ms),
            fmt_ms(self.p99_ms),
            fmt_ms(self.max_ms),
            self.count
        )
    }
}

/// Nearest-rank percentile of sorted, non-empty samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// A duration in ms, with precision that suits its size.
pub fn fmt_ms(ms: f64) -> String {
    if ms >= 100.0 {
        format!("{:.0}", ms)
    } else if ms >= 10.0 {
        format!("{:.1}", ms)
    } else {
        format!("{:.2}", ms)
    }
}

/// The median of some values (e.g. per-round results); 0 when empty.
pub fn median(values: &[f64]) -> f64 {
    Summary::of(values).p50_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&samples);
        assert_eq!(s.count, 100);
        assert_eq!(s.p50_ms, 50.0);
        assert_eq!(s.p90_ms, 90.0);
        assert_eq!(s.p99_ms, 99.0);
        assert_eq!(s.max_ms, 100.0);
        assert_eq!(s.min_ms, 1.0);
        let one = Summary::of(&[7.0]);
        assert_eq!((one.p50_ms, one.p99_ms), (7.0, 7.0));
        assert_eq!(Summary::of(&[]).count, 0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }
}
