//! YAML configuration.
