//! gRPC edge.
