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

/// The whole machine's CPU time, every process's: what the processes a run measures leave to
/// others shows only against it (on a shared machine, other work takes cores too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineCpu {
    /// Clock ticks spent busy (everything but idle and iowait; steal counts, as the hypervisor
    /// gave the time to someone else), summed over the CPUs.
    pub busy_ticks: u64,
    /// Clock ticks of every state, summed over the CPUs.
    pub total_ticks: u64,
    pub cpus: u32,
}

/// The machine's CPU time from `/proc/stat`.
pub fn machine_cpu() -> Option<MachineCpu> {
    machine_cpu_of(&fs::read_to_string("/proc/stat").ok()?)
}

fn machine_cpu_of(stat: &str) -> Option<MachineCpu> {
    let mut lines = stat.lines();
    let all = lines.next()?.strip_prefix("cpu ")?;
    // user nice system idle iowait irq softirq steal (guest time is already in user and nice).
    let ticks: Vec<u64> = all
        .split_whitespace()
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if ticks.len() < 5 {
        return None;
    }
    let total_ticks: u64 = ticks.iter().sum();
    let cpus = lines
        .take_while(|line| line.starts_with("cpu"))
        .filter(|line| line[3..].starts_with(|c: char| c.is_ascii_digit()))
        .count();
    Some(MachineCpu {
        busy_ticks: total_ticks - ticks[3] - ticks[4],
        total_ticks,
        cpus: u32::try_from(cpus).ok()?,
    })
}

/// Context switches of `pid` so far, voluntary and not, summed over its living threads (from
/// `/proc/PID/task/*/status`; `/proc/PID/status` counts the main thread alone). A server that
/// waits for its store sleeps and wakes where one that computes does not, and on a virtual
/// machine each wake-up costs CPU time of its own: this is how often it happened.
pub fn context_switches(pid: u32) -> Option<u64> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut switches = 0;
    // A thread that ends between the listing and the read is skipped, as an ended one is.
    for task in tasks.flatten() {
        if let Ok(status) = fs::read_to_string(task.path().join("status")) {
            switches += context_switches_of(&status)?;
        }
    }
    Some(switches)
}

fn context_switches_of(status: &str) -> Option<u64> {
    let count = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line[name.len()..].trim().parse().ok()
    };
    Some(count("voluntary_ctxt_switches:")? + count("nonvoluntary_ctxt_switches:")?)
}

/// Resident set size of this process in bytes (`VmRSS` of `/proc/self/status`).
pub fn self_rss_bytes() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// VmRSS of `pid` in KiB.
pub fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Open file descriptors of `pid` (the entries of `/proc/PID/fd`).
pub fn open_descriptors(pid: u32) -> Option<u64> {
    Some(fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
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

    #[test]
    fn context_switches_add_both_kinds_of_every_thread() {
        let status =
            "Name:\tratelimitd\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(context_switches_of(status), Some(127));
        assert_eq!(context_switches_of("Name:\tx\n"), None);
        let me = std::process::id();
        let before = context_switches(me).expect("this process's context switches");
        std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(5)))
            .join()
            .expect("a sleeping thread");
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(context_switches(me).expect("again") > before);
        assert_eq!(context_switches(u32::MAX), None);
    }

    #[test]
    fn machine_cpu_counts_every_state_but_idle_as_busy() {
        let stat = "cpu  100 10 50 800 20 0 5 15 7 0\n\
                    cpu0 50 5 25 400 10 0 3 7 4 0\n\
                    cpu1 50 5 25 400 10 0 2 8 3 0\n\
                    intr 12345 0 0\n";
        assert_eq!(
            machine_cpu_of(stat),
            Some(MachineCpu {
                busy_ticks: 100 + 10 + 50 + 5 + 15,
                total_ticks: 1000,
                cpus: 2
            })
        );
        assert_eq!(machine_cpu_of("intr 1\n"), None);
        assert!(machine_cpu().is_some_and(|m| m.cpus >= 1 && m.busy_ticks <= m.total_ticks));
    }
}
