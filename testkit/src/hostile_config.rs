//! Configuration files an attacker (or an accident) can put where ratelimitd reads: an alias
//! bomb, a FIFO, a symlink to a device, a huge file.

use std::ffi::CString;
use std::fs;
use std::path::Path;

/// The alias bomb of the issue: `domain: bomb`, one anchored 1 MiB string, then four levels of
/// lists of ten aliases to the level below (about 12 000 nodes counting aliases, over 10 GiB
/// expanded). The first alias past an 8 MiB budget is the ninth one of line 3, at column 50.
pub fn alias_bomb() -> String {
    let mut text = format!("domain: bomb\ns0: &s0 {}\n", "x".repeat(1 << 20));
    for level in 1..=4 {
        let below = format!("*s{}", level - 1);
        let list = [below.as_str(); 10].join(", ");
        text.push_str(&format!("s{level}: &s{level} [{list}]\n"));
    }
    text.push_str("descriptors: []\n");
    text
}

/// Where [`alias_bomb`] passes the default 8 MiB alias budget: `(line, column)`.
pub const ALIAS_BOMB_POSITION: (usize, usize) = (3, 50);

/// Makes a FIFO at `path`.
pub fn mkfifo(path: &Path) {
    let name = CString::new(path.as_os_str().as_encoded_bytes()).expect("a path without NUL");
    // SAFETY: `name` is a NUL-terminated path that outlives the call.
    let made = unsafe { libc::mkfifo(name.as_ptr(), 0o644) };
    assert_eq!(made, 0, "mkfifo {}", path.display());
}

/// A sparse file of `bytes` zero bytes at `path` (no disk space, no time to write).
pub fn sparse_file(path: &Path, bytes: u64) {
    fs::File::create(path)
        .and_then(|file| file.set_len(bytes))
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
}

/// `VmRSS` and `VmHWM` (peak) of process `pid`, in KiB, from `/proc/PID/status`.
pub fn memory_kib(pid: u32) -> (u64, u64) {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}
