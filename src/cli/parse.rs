//! Value parsers shared by several flag groups; each error says what the value should be.

use std::time::Duration;

use crate::server::limits;

/// A share in (0, 1].
pub fn ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ratio) if ratio > 0.0 && ratio <= 1.0 => Ok(ratio),
        _ => Err(format!("`{text}` is not a ratio in (0, 1]")),
    }
}

/// A positive size in B, KiB, MiB or GiB.
pub fn size(text: &str) -> Result<usize, String> {
    let size = limits::parse_size(text)?;
    match usize::try_from(size) {
        Ok(size) if size > 0 => Ok(size),
        _ => Err(format!("`{text}` is not a positive size")),
    }
}

/// An HTTP/2 window: 65535 bytes (the protocol's initial window) to 2^31 - 1.
pub fn window(text: &str) -> Result<u32, String> {
    let size = limits::parse_size(text)?;
    match u32::try_from(size) {
        Ok(size) if (65_535..=0x7fff_ffff).contains(&size) => Ok(size),
        _ => Err(format!(
            "`{text}` is not an HTTP/2 window (64KiB to 2GiB - 1)"
        )),
    }
}

/// A positive count.
pub fn count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(count) if count > 0 => Ok(count),
        _ => Err(format!("`{text}` is not a positive count")),
    }
}

/// A duration of more than zero.
pub fn positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) => Err("must be more than 0s".into()),
        Err(error) => Err(error.to_string()),
    }
}

/// An absolute HTTP path of printable ASCII.
pub fn http_path(text: &str) -> Result<String, String> {
    if text.starts_with('/') && text.len() <= 256 && text.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(text.to_owned())
    } else {
        Err(format!("`{text}` is not an HTTP path (it starts with `/`)"))
    }
}
