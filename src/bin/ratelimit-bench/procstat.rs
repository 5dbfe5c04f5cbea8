//! CPU time and memory of a process, from `/proc`.

use std::fs;

/// User + system CPU time of `pid` (all its threads, living and exited) in µs, from
/// `/proc/PID/stat` (clock-tick resolution, usually 10 ms).
pub fn cpu_us(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    cpu_us_of(&stat)
}

/// CPU time of this process in µs.
pub fn self_cpu_us() -> Option<u64> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    cpu_us_of(&stat)
}

fn cpu_us_of(stat: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may contain spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ")": field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * 1_000_000 / clock_ticks_per_second())
}

fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

/// Resident set size of this process in bytes (`VmRSS` of `/proc/self/status`).
pub fn self_rss_bytes() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_name_with_spaces_and_parentheses() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 1 2 3";
        let ticks = clock_ticks_per_second();
        assert_eq!(cpu_us_of(stat), Some(300 * 1_000_000 / ticks));
    }
}
