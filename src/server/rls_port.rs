//! The RLS port (`--rls-addr`): a second gRPC listener that serves only
//! `ShouldRateLimit` and health `Check`, through an HTTP/2 server of ratelimitd's own instead of
//! hyper's and tonic's. Envoy's rate limit filter calls nothing else, and a decision's cost on the
//! gRPC port is mostly theirs (docs/performance.md, "Where a decision's instructions go"): header
//! maps and URIs built per call, a task and boxed bodies per stream, a write per response.
//! Here a request's head is decoded straight into what the call needs ([`head`]), its body kept
//! as a slice of the read buffer, the call run on the connection's task, and every answer ready
//! after a read written in one write, with answers' headers as fixed HPACK literals.
//!
//! No crate offers an HTTP/2 server that can be cut down this way (h2 is the general one
//! underneath hyper); HPACK decoding is [`hpack`]'s. Every other method (health
//! `Watch`, reflection, RLQS) is answered UNIMPLEMENTED with a message naming the gRPC port,
//! and so is a compressed request. The port shares the gRPC port's TLS, connection cap, memory
//! budget, stream and body bounds, read timeout, idle timeout, connection age and drain.

mod connection;
pub mod frame;
pub mod h2;
pub mod head;
pub mod hpack;
pub mod huffman;

pub(crate) use connection::RlsService;
