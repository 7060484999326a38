//! What a contender's process costs, from /proc: CPU seconds (user + system) and peak RSS.

/// Clock ticks per second of /proc/<pid>/stat's times (Linux's USER_HZ is 100 everywhere it runs).
const TICKS_PER_SECOND: f64 = 100.0;

/// User + system CPU seconds `pid` has used, including its exited children.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime, stime, cutime, cstime are fields 14-17 of the whole line, 12-15 after the name.
    let ticks: u64 = fields.get(11..15)?.iter().filter_map(|f| f.parse::<u64>().ok()).sum();
    Some(ticks as f64 / TICKS_PER_SECOND)
}

/// The peak resident set size of `pid` in MiB (VmHWM).
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert!(cpu_seconds(me).is_some_and(|s| s >= 0.0));
        assert!(peak_rss_mib(me).is_some_and(|m| m > 0.0));
    }
}
