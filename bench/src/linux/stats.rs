//! Median / maximum of samples and number formatting. Target verdicts use the unrounded values.

/// Summary of a set of samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Median (mean of the two middle samples for an even count).
    pub median: f64,
    /// Largest sample.
    pub max: f64,
    /// Smallest sample.
    pub min: f64,
}

/// Summarizes `samples` (empty: all zero).
pub fn summarize(samples: &[f64]) -> Summary {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return Summary::default();
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Summary { n, median, max: v[n - 1], min: v[0] }
}

/// Nanoseconds as milliseconds with three decimals.
pub fn ms(ns: f64) -> String {
    format!("{:.3}", ns / 1e6)
}

/// A ratio with three significant decimals (`-` when undefined).
pub fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() {
        format!("{:.3}", a / b)
    } else {
        "-".into()
    }
}

/// Bytes with a KiB / MiB figure beside them (two decimals, the exact byte count first).
pub fn bytes(b: f64) -> String {
    if b >= 1024.0 * 1024.0 {
        format!("{b:.0} ({:.2} MiB)", b / (1024.0 * 1024.0))
    } else {
        format!("{b:.0} ({:.2} KiB)", b / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_max() {
        let s = summarize(&[5.0, 1.0, 3.0]);
        assert_eq!((s.n, s.median, s.max, s.min), (3, 3.0, 5.0, 1.0));
        let s = summarize(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!(s.median, 2.5);
        assert_eq!(summarize(&[]), Summary::default());
        assert_eq!(summarize(&[f64::NAN, 2.0]).n, 1);
    }

    #[test]
    fn formatting() {
        assert_eq!(ms(1_234_567.0), "1.235");
        assert_eq!(ratio(1.0, 4.0), "0.250");
        assert_eq!(ratio(1.0, 0.0), "-");
        assert_eq!(bytes(2048.0), "2048 (2.00 KiB)");
        assert_eq!(bytes(3.0 * 1024.0 * 1024.0), "3145728 (3.00 MiB)");
    }
}
