//! Algorithm math.
