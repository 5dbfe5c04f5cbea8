//! Wiring.
