//! Reading a file the server was told to open (a configuration file, TLS material, a CA bundle)
//! without letting the file decide what that costs: only regular files (or symlinks to them) are
//! read, never more than the caller's size cap, and nothing blocks.
//!
//! The type and size come from `stat` before the file is opened: opening a FIFO for reading
//! blocks until a writer appears, and `/dev/zero` never ends. The file is then opened with
//! `O_NONBLOCK` (so a file swapped for a FIFO between `stat` and `open` does not block either),
//! checked again on the open descriptor, and read through `take(cap + 1)`, so a file that grows
//! while it is read is rejected instead of read to the end.

use std::fmt;
use std::fs::{self, File, Metadata};
use std::io::{self, Read};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Largest PEM file (certificate chain, private key, CA bundle) read anywhere: they are a few
/// KiB, so anything bigger is a wrong path (a log file, a disk image) that must not be read into
/// memory, let alone every second.
pub const MAX_PEM_FILE_BYTES: u64 = 1 << 20;

/// Why a file was not read.
#[derive(Debug)]
pub enum FileError {
    /// A FIFO, device, socket or directory (named `kind`, e.g. "a FIFO").
    NotRegular(&'static str),
    /// Larger than the cap (`size` as `stat` reports it).
    TooLarge {
        size: u64,
        max: u64,
    },
    /// Grew past the cap while it was read.
    GrewPast {
        max: u64,
    },
    /// The content is not UTF-8.
    NotUtf8,
    Io(io::Error),
}

impl FileError {
    /// Whether a configuration bound (size or file type) refused the file.
    pub fn bound(&self) -> Option<FileBound> {
        match self {
            FileError::NotRegular(_) => Some(FileBound::FileType),
            FileError::TooLarge { .. } | FileError::GrewPast { .. } => Some(FileBound::FileBytes),
            FileError::NotUtf8 | FileError::Io(_) => None,
        }
    }
}

/// The bound that refused a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileBound {
    FileType,
    FileBytes,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::NotRegular(kind) => write!(
                f,
                "not a regular file ({kind}); only regular files and symlinks to regular files are read"
            ),
            FileError::TooLarge { size, max } => write!(
                f,
                "file has {size} bytes; at most {max} are accepted"
            ),
            FileError::GrewPast { max } => write!(
                f,
                "file grew past {max} bytes while it was read; at most {max} are accepted"
            ),
            FileError::NotUtf8 => f.write_str("cannot read file: it is not UTF-8 text"),
            FileError::Io(error) => write!(f, "cannot read file: {error}"),
        }
    }
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FileError::Io(error) => Some(error),
            _ => None,
        }
    }
}

/// What `stat` says about a file's identity and version: a file whose stamp is unchanged has, on
/// a file system with fine timestamps, unchanged content (any write moves `ctime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    device: u64,
    inode: u64,
    size: u64,
    modified: Option<SystemTime>,
    changed: Option<SystemTime>,
}

/// How long after its last change a stamp is trusted to tell a change: some file systems keep
/// timestamps in whole seconds (or two), so a second write within that time may leave the stamp
/// as it was.
const TIMESTAMP_GRANULARITY: Duration = Duration::from_secs(2);

impl Stamp {
    fn of(metadata: &Metadata) -> Stamp {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let changed = u64::try_from(metadata.ctime()).ok().map(|secs| {
                SystemTime::UNIX_EPOCH
                    + Duration::new(secs, u32::try_from(metadata.ctime_nsec()).unwrap_or(0))
            });
            Stamp {
                device: metadata.dev(),
                inode: metadata.ino(),
                size: metadata.size(),
                modified: metadata.modified().ok(),
                changed,
            }
        }
        #[cfg(not(unix))]
        Stamp {
            device: 0,
            inode: 0,
            size: metadata.len(),
            modified: metadata.modified().ok(),
            changed: None,
        }
    }

    /// Whether the file's last change is far enough before `now` for an unchanged stamp to mean
    /// unchanged content (see [`TIMESTAMP_GRANULARITY`]).
    pub fn settled(&self, now: SystemTime) -> bool {
        let last = self.modified.max(self.changed);
        last.and_then(|last| now.duration_since(last).ok())
            .is_some_and(|age| age > TIMESTAMP_GRANULARITY)
    }

    /// The stamp's fields as bytes, for digests.
    pub fn to_bytes(self) -> Vec<u8> {
        let nanos = |time: Option<SystemTime>| {
            time.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos())
        };
        let mut bytes = Vec::with_capacity(56);
        bytes.extend(self.device.to_le_bytes());
        bytes.extend(self.inode.to_le_bytes());
        bytes.extend(self.size.to_le_bytes());
        bytes.extend(nanos(self.modified).to_le_bytes());
        bytes.extend(nanos(self.changed).to_le_bytes());
        bytes
    }
}

/// The stamp of what `path` names (symlinks followed), without opening it; an error when it is
/// not a regular file.
pub fn stat(path: &Path) -> Result<Stamp, FileError> {
    let metadata = fs::metadata(path).map_err(FileError::Io)?;
    regular(&metadata)?;
    Ok(Stamp::of(&metadata))
}

/// Refuses a stamp above `max` bytes.
pub fn check_size(stamp: &Stamp, max: u64) -> Result<(), FileError> {
    if stamp.size > max {
        return Err(FileError::TooLarge {
            size: stamp.size,
            max,
        });
    }
    Ok(())
}

/// The content of `path` (a regular file of at most `max` bytes) and the stamp of what was read.
pub fn read(path: &Path, max: u64) -> Result<(Vec<u8>, Stamp), FileError> {
    check_size(&stat(path)?, max)?;
    let file = open_nonblocking(path).map_err(FileError::Io)?;
    let metadata = file.metadata().map_err(FileError::Io)?;
    regular(&metadata)?;
    let stamp = Stamp::of(&metadata);
    check_size(&stamp, max)?;
    let mut content = Vec::with_capacity(usize::try_from(stamp.size).unwrap_or(0));
    file.take(max.saturating_add(1))
        .read_to_end(&mut content)
        .map_err(FileError::Io)?;
    if content.len() as u64 > max {
        return Err(FileError::GrewPast { max });
    }
    Ok((content, stamp))
}

/// [`read`] as UTF-8 text.
pub fn read_text(path: &Path, max: u64) -> Result<String, FileError> {
    let (content, _) = read(path, max)?;
    String::from_utf8(content).map_err(|_| FileError::NotUtf8)
}

fn open_nonblocking(path: &Path) -> io::Result<File> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    options.open(path)
}

fn regular(metadata: &Metadata) -> Result<(), FileError> {
    let kind = metadata.file_type();
    if kind.is_file() {
        return Ok(());
    }
    Err(FileError::NotRegular(describe(kind)))
}

fn describe(kind: fs::FileType) -> &'static str {
    if kind.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    "not a file"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_within_the_cap_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.yaml");
        fs::write(&path, "domain: a\n").unwrap();
        let (content, stamp) = read(&path, 10).unwrap();
        assert_eq!(content, b"domain: a\n");
        assert_eq!(stamp.size, 10);
        assert_eq!(stat(&path).unwrap(), stamp);
    }

    #[test]
    fn a_file_above_the_cap_is_refused_with_its_size_and_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.yaml");
        fs::write(&path, "domain: a\n").unwrap();
        let error = read(&path, 9).unwrap_err();
        assert_eq!(
            error.to_string(),
            "file has 10 bytes; at most 9 are accepted"
        );
        assert_eq!(error.bound(), Some(FileBound::FileBytes));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reading_stops_at_the_cap_even_when_stat_says_less() {
        // Like every /proc file, it reports 0 bytes and has more.
        let error = read(Path::new("/proc/self/status"), 10).unwrap_err();
        assert_eq!(
            error.to_string(),
            "file grew past 10 bytes while it was read; at most 10 are accepted"
        );
        assert_eq!(error.bound(), Some(FileBound::FileBytes));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_device_is_refused_without_being_read() {
        // /dev/zero would be read until memory runs out.
        let error = read(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(
            error.to_string(),
            "not a regular file (a character device); only regular files and symlinks to regular files are read"
        );
        assert_eq!(error.bound(), Some(FileBound::FileType));
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_being_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.yaml");
        let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `name` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0);
        // Opening it for reading would block until a writer came.
        let error = read(&path, 1 << 20).unwrap_err();
        assert!(error.to_string().starts_with("not a regular file (a FIFO)"));
        assert!(matches!(stat(&path), Err(FileError::NotRegular("a FIFO"))));
    }

    #[cfg(unix)]
    #[test]
    fn opening_never_blocks_even_on_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.yaml");
        let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `name` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0);
        let file = open_nonblocking(&path).unwrap();
        assert!(matches!(
            regular(&file.metadata().unwrap()),
            Err(FileError::NotRegular("a FIFO"))
        ));
    }

    #[test]
    fn a_directory_is_not_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            read(dir.path(), 1 << 20),
            Err(FileError::NotRegular("a directory"))
        ));
    }

    #[test]
    fn a_stamp_settles_once_its_file_is_older_than_the_timestamp_granularity() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.yaml");
        fs::write(&path, "domain: a\n").unwrap();
        let stamp = stat(&path).unwrap();
        let now = SystemTime::now();
        assert!(!stamp.settled(now));
        assert!(stamp.settled(now + TIMESTAMP_GRANULARITY + Duration::from_secs(1)));
    }

    #[test]
    fn non_utf8_content_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.yaml");
        fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(matches!(read_text(&path, 10), Err(FileError::NotUtf8)));
    }
}
