//! How much memory this process may use: the tightest memory limit of its cgroup and the
//! cgroups above it (v2 `memory.max`, v1 `memory.limit_in_bytes`), else the machine's physical
//! memory (`MemTotal` of `/proc/meminfo`). A container's limit is what the kernel enforces,
//! while `/proc/meminfo` shows the host's.

use std::fs;
use std::path::Path;

/// The memory this process may use, in bytes; `None` when it cannot be read.
pub fn available() -> Option<u64> {
    let physical = physical();
    let cgroup = fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| cgroup_limit(&text, Path::new("/sys/fs/cgroup")));
    match (physical, cgroup) {
        (Some(physical), Some(cgroup)) => Some(physical.min(cgroup)),
        (physical, cgroup) => physical.or(cgroup),
    }
}

/// `MemTotal` in bytes.
fn physical() -> Option<u64> {
    let meminfo = fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// The tightest limit of the cgroups that `/proc/self/cgroup` (`proc_cgroup`) names, read
/// under `root`; `None` when none has one.
fn cgroup_limit(proc_cgroup: &str, root: &Path) -> Option<u64> {
    let mut tightest: Option<u64> = None;
    let mut tighten = |limit: Option<u64>| {
        if let Some(limit) = limit {
            tightest = Some(tightest.map_or(limit, |t| t.min(limit)));
        }
    };
    for line in proc_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if controllers.is_empty() {
            // v2: the process's cgroup and every one above it.
            let mut dir = root.join(path);
            loop {
                tighten(read_limit(&dir.join("memory.max")));
                if dir == root || !dir.pop() {
                    break;
                }
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            tighten(read_limit(
                &root.join("memory").join(path).join("memory.limit_in_bytes"),
            ));
        }
    }
    tightest
}

/// A limit file's value; `None` for `max`, a value no machine has (v1's "unlimited" is near
/// 2^63) or a file that cannot be read.
fn read_limit(path: &Path) -> Option<u64> {
    let text = fs::read_to_string(path).ok()?;
    let limit: u64 = text.trim().parse().ok()?;
    (limit < 1 << 60).then_some(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tightest_cgroup_limit_counts() {
        let root = tempfile::tempdir().unwrap();
        let pod = root.path().join("kubepods/pod1");
        fs::create_dir_all(pod.join("app")).unwrap();
        fs::write(root.path().join("kubepods/memory.max"), "max\n").unwrap();
        fs::write(pod.join("memory.max"), "536870912\n").unwrap();
        fs::write(pod.join("app/memory.max"), "max\n").unwrap();
        assert_eq!(
            cgroup_limit("0::/kubepods/pod1/app\n", root.path()),
            Some(512 << 20)
        );
        assert_eq!(cgroup_limit("0::/elsewhere\n", root.path()), None);

        let v1 = root.path().join("memory/docker/abc");
        fs::create_dir_all(&v1).unwrap();
        fs::write(v1.join("memory.limit_in_bytes"), "268435456\n").unwrap();
        assert_eq!(
            cgroup_limit(
                "5:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n",
                root.path()
            ),
            Some(256 << 20)
        );
        fs::write(v1.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        assert_eq!(cgroup_limit("5:memory:/docker/abc\n", root.path()), None);
    }

    #[test]
    fn this_machine_has_memory() {
        assert!(available().is_some_and(|bytes| bytes > 0));
    }
}
