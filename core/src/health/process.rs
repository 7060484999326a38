//! The process's own resource use under Prometheus' conventional names, read from `/proc` by
//! the metrics upkeep thread (Linux; elsewhere the series are absent):
//! `process_resident_memory_bytes` (`VmRSS` of `/proc/self/status`, exact without asking for
//! the page size) and `process_cpu_seconds_total` (user + system time of `/proc/self/stat`).

use metrics::gauge;

/// Clock ticks per second of `/proc/<pid>/stat`: the kernel reports them in `USER_HZ`, which is
/// 100 on every architecture Rust targets with Linux.
const USER_HZ: f64 = 100.0;

/// Reads `/proc/self` and sets the two series.
pub fn record() {
    if let Some(bytes) = std::fs::read_to_string("/proc/self/status").ok().as_deref().and_then(resident_bytes) {
        gauge!("process_resident_memory_bytes").set(bytes as f64);
    }
    if let Some(seconds) = std::fs::read_to_string("/proc/self/stat").ok().as_deref().and_then(cpu_seconds) {
        // The facade's counters count in whole units; a gauge keeps the fraction, and `rate()`
        // reads it the same.
        gauge!("process_cpu_seconds_total").set(seconds);
    }
}

/// `VmRSS` of a `/proc/<pid>/status` page, in bytes.
pub fn resident_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kib: u64 = words.next()?.parse().ok()?;
    (words.next()? == "kB").then_some(kib * 1024)
}

/// User plus system CPU time of a `/proc/<pid>/stat` line, in seconds. The command name (field
/// 2) is in parentheses and may hold spaces and parentheses, so fields count from the last `)`.
pub fn cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state is field 3, utime field 14, stime field 15.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_vmrss_in_bytes() {
        let status = "Name:\tstrait\nVmPeak:\t  900000 kB\nVmRSS:\t   51234 kB\nThreads:\t12\n";
        assert_eq!(resident_bytes(status), Some(51234 * 1024));
        assert_eq!(resident_bytes("Name:\tkthreadd\n"), None, "kernel threads have no VmRSS");
    }

    #[test]
    fn cpu_is_utime_plus_stime_even_when_the_name_holds_spaces_and_parentheses() {
        let stat = "4242 (strait (x) y) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 12 0 100 900000000 12800";
        assert_eq!(cpu_seconds(stat), Some(3.25));
        assert_eq!(cpu_seconds("4242 (strait) S 1"), None);
    }

    #[test]
    fn this_process_reads() {
        let status = std::fs::read_to_string("/proc/self/status").expect("linux");
        assert!(resident_bytes(&status).is_some_and(|b| b > 0));
        let stat = std::fs::read_to_string("/proc/self/stat").expect("linux");
        assert!(cpu_seconds(&stat).is_some());
    }
}
