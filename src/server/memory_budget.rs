//! The memory budget of all gRPC calls together (`--grpc-memory-budget`): every open call is
//! charged [`CALL_COST`] plus the size of its request head, and every message being received is
//! charged at the length its 5-byte prefix declares (tonic reserves that much as soon as it reads
//! the prefix, whatever follows). A call that does not fit is answered RESOURCE_EXHAUSTED before
//! tonic sees it; a message that does not fit, at its prefix, before any of it is buffered.
//!
//! The per-connection caps (streams, the connection's message bytes) bound one peer; this bounds
//! what all peers together can make the process hold, whatever the number of connections.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hyper::Request;

use super::machine_memory;

/// Bytes an open call holds besides its request head and message: h2's stream state, hyper's
/// request and the task serving it, the call's future and tonic's buffers. Measured with
/// `ratelimit-bench hold --headers-only` on a release build: 100 000 calls of a plain gRPC
/// request head, each waiting for its message, hold 6.2 KiB each (VmRSS 10 → 626 MiB).
pub const CALL_COST: usize = 6 << 10;

/// What HPACK counts for each header besides its name and value (RFC 7541, 4.1): the cost of
/// the entry's bookkeeping, applied to the request's own headers too.
const HEADER_OVERHEAD: usize = 32;

/// Fraction of the memory the process may use that the default budget takes.
const DEFAULT_SHARE: u64 = 4;
/// The default budget is never below this.
const DEFAULT_FLOOR: u64 = 32 << 20;
/// The default budget when the process's memory cannot be read.
const DEFAULT_UNKNOWN: u64 = 1 << 30;

/// The budget and what is held against it.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    held: AtomicUsize,
    /// The most held since [`MemoryBudget::take_peak`] last looked.
    peak: AtomicUsize,
    calls: AtomicUsize,
}

/// The budget was spent: nothing was charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent;

impl MemoryBudget {
    pub fn new(limit: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            held: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
        })
    }

    /// The budget, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held against it now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Calls open (each charged [`CALL_COST`] and its head).
    /// The most held since the last call (at least what is held now): a burst that came and
    /// went between two looks still shows.
    pub fn take_peak(&self) -> usize {
        self.peak
            .swap(self.held(), Ordering::Relaxed)
            .max(self.held())
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }

    /// Charges a new call whose request head is `head_bytes` (see [`head_bytes`]); the charge
    /// is given back when the returned [`CallCharge`] is dropped.
    pub fn open_call(self: &Arc<MemoryBudget>, head_bytes: usize) -> Result<CallCharge, Spent> {
        let bytes = CALL_COST.saturating_add(head_bytes);
        self.charge(bytes)?;
        self.calls.fetch_add(1, Ordering::Relaxed);
        Ok(CallCharge {
            budget: self.clone(),
            bytes,
        })
    }

    /// Charges `bytes` more, or nothing when they do not fit.
    pub fn charge(&self, bytes: usize) -> Result<(), Spent> {
        let held = self
            .held
            .fetch_add(bytes, Ordering::AcqRel)
            .saturating_add(bytes);
        if held > self.limit {
            self.held.fetch_sub(bytes, Ordering::AcqRel);
            return Err(Spent);
        }
        self.peak.fetch_max(held, Ordering::Relaxed);
        Ok(())
    }

    /// Why a call or message is refused when the budget is spent.
    pub fn refusal(&self) -> String {
        format!(
            "the server's gRPC calls hold their memory budget of {} bytes (--grpc-memory-budget)",
            self.limit
        )
    }

    /// Gives back `bytes` charged before.
    pub fn release(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// One open call's charge, given back on drop.
#[derive(Debug)]
pub struct CallCharge {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl Drop for CallCharge {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
        self.budget.calls.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The size of a request head as HPACK counts a header list (name, value and 32 bytes per
/// header), its path and authority included.
pub fn head_bytes<B>(request: &Request<B>) -> usize {
    let uri = request.uri();
    let pseudo = uri.path_and_query().map_or(0, |p| p.as_str().len())
        + uri.authority().map_or(0, |a| a.as_str().len())
        + 4 * HEADER_OVERHEAD;
    request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + HEADER_OVERHEAD)
        .fold(pseudo, usize::saturating_add)
}

/// The default budget: a quarter of the memory this process may use (its cgroup's limit, else
/// the machine's physical memory), at least 32 MiB; 1 GiB when neither can be read.
pub fn default_bytes() -> usize {
    let bytes = machine_memory::available().map_or(DEFAULT_UNKNOWN, |memory| {
        (memory / DEFAULT_SHARE).max(DEFAULT_FLOOR)
    });
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_messages_share_the_budget_and_give_it_back() {
        let budget = MemoryBudget::new(3 * CALL_COST);
        let first = budget.open_call(0).unwrap();
        let second = budget.open_call(100).unwrap();
        assert_eq!(budget.calls(), 2);
        assert_eq!(budget.held(), 2 * CALL_COST + 100);
        assert_eq!(budget.open_call(CALL_COST).err(), Some(Spent));
        assert_eq!(budget.charge(CALL_COST - 100), Ok(()));
        assert_eq!(budget.charge(1), Err(Spent));
        assert_eq!(budget.held(), 3 * CALL_COST);
        drop(first);
        budget.release(CALL_COST - 100);
        assert!(budget.open_call(0).is_ok());
        drop(second);
        assert_eq!((budget.held(), budget.calls()), (0, 0));
    }

    #[test]
    fn a_head_counts_as_hpack_counts_it() {
        let request = Request::builder()
            .uri("http://h/p")
            .header("te", "trailers")
            .body(())
            .unwrap();
        // `/p` and `h`, four pseudo-headers, `te: trailers`.
        assert_eq!(head_bytes(&request), 2 + 1 + 4 * 32 + (2 + 8 + 32));
    }

    #[test]
    fn the_default_is_at_least_the_floor() {
        assert!(default_bytes() >= DEFAULT_FLOOR as usize);
    }
}
