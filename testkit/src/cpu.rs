//! CPU affinity for measurements that keep a server and its load generator off each other's core:
//! a child started on given CPUs ([`pin_command`], what `taskset -c LIST PROGRAM` does) and a
//! running process moved, every thread of it ([`pin_process`], `taskset -a -p -c LIST PID`).
//! Linux only (`sched_setaffinity`).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The CPUs this process may run on (what `nproc` prints): the CPUs a benchmark can pin to.
pub fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The set of `cpus` (their numbers, from 0).
fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array, valid when zeroed.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: CPU_SET ignores (does not write) a CPU number beyond the set's size.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    set
}

/// `sched_setaffinity(tid, set)`.
fn set_affinity(tid: libc::pid_t, set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let result =
        unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), set) };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes the process `command` starts run on `cpus` only, from its first instruction: every
/// thread it starts inherits the set. Spawning fails if the set is refused (no such CPU).
pub fn pin_command<'a>(command: &'a mut Command, cpus: &[usize]) -> &'a mut Command {
    let set = cpu_set(cpus);
    // SAFETY: the closure runs in the child between fork and exec and only makes one system
    // call (async-signal-safe), allocating nothing.
    unsafe { command.pre_exec(move || set_affinity(0, &set)) }
}

/// Moves every thread of the running process `pid` onto `cpus` (threads it starts later inherit
/// the set from the thread that starts them). A thread that ends meanwhile is skipped.
pub fn pin_process(pid: u32, cpus: &[usize]) -> io::Result<()> {
    let set = cpu_set(cpus);
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Some(tid) = task?
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        match set_affinity(tid, &set) {
            Ok(()) => {}
            Err(error) if error.raw_os_error() == Some(libc::ESRCH) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// The CPUs thread `tid` may run on (`/proc/<tid>/status`, `Cpus_allowed_list`), as the kernel
/// writes them (`0`, `0-1`, `0,2`...).
pub fn allowed_list(tid: u32) -> io::Result<String> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .map(|list| list.trim().to_string())
        .ok_or_else(|| io::Error::other("no Cpus_allowed_list in /proc/PID/status"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    #[test]
    fn a_pinned_child_runs_on_its_cpu_and_can_be_moved() {
        let last = available() - 1;
        let mut command = Command::new("sleep");
        command.arg("5").stdout(Stdio::null());
        let mut child = pin_command(&mut command, &[last])
            .spawn()
            .expect("run sleep");
        let pid = child.id();
        assert_eq!(allowed_list(pid).unwrap(), last.to_string());
        pin_process(pid, &[0]).expect("move it");
        assert_eq!(allowed_list(pid).unwrap(), "0");
        let _ = child.kill();
        let _ = child.wait();
    }
}
