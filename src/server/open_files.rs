//! The open-files limit (RLIMIT_NOFILE): raised to its hard limit at startup, read to size the
//! connection caps.
//!
//! The usual soft limit of 1024 was chosen for `select(2)`, which this process never uses; each
//! connection costs one descriptor, so a busy server needs the hard limit (often 524288 or
//! 1048576) and caps below it (see [`super::transport_bounds::TransportBounds::connection_caps`]).

/// The soft and hard open-files limits before and after [`raise_to_hard_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    pub soft_before: u64,
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft RLIMIT_NOFILE to the hard limit, and logs the values. An error (no such
/// limit, or refused) is logged and leaves the limit as it was.
pub fn raise_to_hard_limit() -> Option<OpenFiles> {
    let Some((soft, hard)) = get() else {
        tracing::warn!("cannot read the open-files limit (RLIMIT_NOFILE)");
        return None;
    };
    if soft >= hard {
        tracing::info!(soft, hard, "open-files limit");
        return Some(OpenFiles {
            soft_before: soft,
            soft,
            hard,
        });
    }
    let wanted = libc::rlimit {
        rlim_cur: hard as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct, which lives for the whole call.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) } != 0 {
        let error = std::io::Error::last_os_error();
        tracing::warn!(soft, hard, %error, "cannot raise the open-files limit");
        return Some(OpenFiles {
            soft_before: soft,
            soft,
            hard,
        });
    }
    let raised = current_soft_limit().unwrap_or(soft);
    tracing::info!(
        soft_before = soft,
        soft = raised,
        hard,
        "open-files limit raised"
    );
    Some(OpenFiles {
        soft_before: soft,
        soft: raised,
        hard,
    })
}

/// The soft RLIMIT_NOFILE now in force; `None` when it cannot be read. "Unlimited" reads as
/// `u64::MAX`.
pub fn current_soft_limit() -> Option<u64> {
    get().map(|(soft, _)| soft)
}

fn get() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct, which lives for the whole call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    // rlim_t is u64 on Linux, not on every platform.
    #[allow(clippy::unnecessary_cast)]
    let value = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            v as u64
        }
    };
    Some((value(limit.rlim_cur), value(limit.rlim_max)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_readable() {
        assert!(current_soft_limit().is_some_and(|soft| soft > 0));
    }
}
