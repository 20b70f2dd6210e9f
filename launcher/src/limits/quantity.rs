//! The quantities a limit is written in: sizes (`200M`), durations (`90s`, `1h30m`), CPU counts
//! (`1.5`) and counts. One grammar for the command line and the policy files, so `--memory 2G`
//! and `limits: {memory: 2G}` mean the same.

use std::time::Duration;

/// A size in bytes: an integer with an optional binary suffix `K`, `M`, `G`, `T` (powers of
/// 1024, as `docker --memory` and `ulimit` read them; `KiB`, `MB`... are accepted and read the
/// same). `200M` is 200 MiB.
pub fn size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 512M, 2G, 1048576)"))?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?} (allowed: K, M, G, T; powers of 1024)"
            ))
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// A duration: an integer of seconds, or one or more `<n><unit>` with units `ms`, `s`, `m`,
/// `h`, `d` (`90`, `90s`, `1h30m`, `500ms`). Zero is refused (a limit of nothing).
pub fn duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration (e.g. 90, 90s, 10m, 1h30m, 500ms)");
    let t = text.trim();
    if t.is_empty() {
        return Err(bad());
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = t.parse().map_err(|_| bad())?;
        return positive(Duration::from_secs(secs), text);
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86400)),
            _ => return Err(bad()),
        };
        total = total.saturating_add(part);
        rest = &rest[unit_len..];
    }
    positive(total, text)
}

fn positive(d: Duration, text: &str) -> Result<Duration, String> {
    if d.is_zero() {
        Err(format!("{text:?}: a duration of zero is no time at all"))
    } else {
        Ok(d)
    }
}

/// A number of CPUs as thousandths (`1.5` is 1500): at most three decimals, more than zero.
pub fn cpus(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a number of CPUs (e.g. 1, 0.5, 2.25)");
    let t = text.trim();
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    if whole.is_empty() && frac.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > 3
    {
        return Err(bad());
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    let frac: u64 = format!("{frac:0<3}").parse().map_err(|_| bad())?;
    let millis = whole
        .checked_mul(1000)
        .and_then(|w| w.checked_add(frac))
        .ok_or_else(bad)?;
    if millis == 0 {
        return Err(format!("{text:?}: zero CPUs would never run"));
    }
    Ok(millis)
}

/// A count (processes, files): a positive integer.
pub fn count(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err(format!("{text:?}: a limit of zero would stop everything")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{text:?} is not a positive integer")),
    }
}

/// `n` bytes the way people write them: `200M`, `1.5G`, `4096`.
pub fn show_size(n: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "T"), (30, "G"), (20, "M"), (10, "K")];
    for (shift, unit) in UNITS {
        let base = 1u64 << shift;
        if n >= base {
            if n.is_multiple_of(base) {
                return format!("{}{unit}", n >> shift);
            }
            return format!("{:.1}{unit}", n as f64 / base as f64);
        }
    }
    n.to_string()
}

/// A duration the way `--timeout` takes it.
pub fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    let parts = [(s / 3600, "h"), (s % 3600 / 60, "m"), (s % 60, "s")];
    let text: String = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    if text.is_empty() {
        "0s".into()
    } else {
        text
    }
}

/// Thousandths of a CPU as written: `1.5`.
pub fn show_cpus(millis: u64) -> String {
    let s = format!("{}.{:03}", millis / 1000, millis % 1000);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_binary_suffixes() {
        assert_eq!(size("200M"), Ok(200 << 20));
        assert_eq!(size("2g"), Ok(2 << 30));
        assert_eq!(size("512KiB"), Ok(512 << 10));
        assert_eq!(size("4096"), Ok(4096));
        assert!(size("2X").unwrap_err().contains("unknown unit"));
        assert!(size("M").is_err());
        assert!(size("-1").is_err());
        assert!(size("99999999999T").unwrap_err().contains("too large"));
    }

    #[test]
    fn durations_read_seconds_and_units() {
        assert_eq!(duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("2d"), Ok(Duration::from_secs(172_800)));
        assert!(duration("0").is_err());
        assert!(duration("1x").is_err());
        assert!(duration("m").is_err());
        assert!(duration("").is_err());
    }

    #[test]
    fn cpus_read_up_to_three_decimals() {
        assert_eq!(cpus("1.5"), Ok(1500));
        assert_eq!(cpus("2"), Ok(2000));
        assert_eq!(cpus(".25"), Ok(250));
        assert!(cpus("0").is_err());
        assert!(cpus("0.0001").is_err());
        assert!(cpus("1,5").is_err());
        assert!(cpus(".").is_err());
    }

    #[test]
    fn quantities_are_shown_as_written() {
        assert_eq!(show_size(200 << 20), "200M");
        assert_eq!(show_size(1536 << 20), "1.5G");
        assert_eq!(show_size(100), "100");
        assert_eq!(show_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(show_duration(Duration::from_secs(1)), "1s");
        assert_eq!(show_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(show_cpus(1500), "1.5");
        assert_eq!(show_cpus(2000), "2");
    }

    #[test]
    fn counts_are_positive() {
        assert_eq!(count("200"), Ok(200));
        assert!(count("0").is_err());
        assert!(count("many").is_err());
    }
}
