//! The thread RLQS work runs on: the reports of every stream, the share computations they and
//! the ticks call for, idle sweeps and rule changes, on a current-thread runtime of its own.
//!
//! Why: on a serving lane that work would run between the lane's RLS calls, and a burst of it
//! (a rule change over thousands of shared buckets, 100 Envoys reporting 2 500 buckets each)
//! held them back for seconds. On a thread of its own it only competes for the CPU, and the
//! thread runs at a lower priority than the lanes (Linux: nice +10 for this thread alone), so
//! when the CPUs are busy the RLS calls go first and RLQS answers wait. The streams' HTTP/2
//! connections stay on their lanes; only the work behind them moves here.

use std::io;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

/// How much less the RLQS thread weighs than a serving lane when both want a CPU (`nice`).
const NICENESS: i32 = 10;

/// How long tasks still running at shutdown are given to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Starts the thread (`ratelimitd-rlqs`); it runs what is spawned on the returned handle until
/// `stopping` is cancelled.
pub fn start(stopping: CancellationToken) -> io::Result<Handle> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("ratelimitd-rlqs".into())
        .spawn(move || {
            lower_priority();
            runtime.block_on(stopping.cancelled());
            runtime.shutdown_timeout(SHUTDOWN_GRACE);
        })?;
    Ok(handle)
}

/// Lowers the calling thread's scheduling priority by [`NICENESS`]; logged and left as it is
/// when the system refuses.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and setpriority take no pointers; PRIO_PROCESS with a thread id
        // changes that thread alone on Linux.
        let result = unsafe {
            let thread = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, thread as libc::id_t, NICENESS)
        };
        if result != 0 {
            tracing::debug!(
                error = %io::Error::last_os_error(),
                "the RLQS thread keeps the lanes' priority"
            );
        }
    }
}
