//! Value parsers shared by several flag groups; each error says what the value should be.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::server::transport_bounds;

/// A share in (0, 1].
pub fn ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ratio) if ratio > 0.0 && ratio <= 1.0 => Ok(ratio),
        _ => Err(format!("`{text}` is not a ratio in (0, 1]")),
    }
}

/// A positive size in B, KiB, MiB or GiB.
pub fn size(text: &str) -> Result<usize, String> {
    let size = transport_bounds::parse_size(text)?;
    match usize::try_from(size) {
        Ok(size) if size > 0 => Ok(size),
        _ => Err(format!("`{text}` is not a positive size")),
    }
}

/// An HTTP/2 window: 65535 bytes (the protocol's initial window) to 2^31 - 1.
pub fn window(text: &str) -> Result<u32, String> {
    let size = transport_bounds::parse_size(text)?;
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

/// A listening address, `IP:PORT` (`[::1]:8081` for IPv6) or `HOST:PORT` with a host name looked up
/// once, now (an IPv4 address preferred: `localhost` then listens where IPv4 clients connect).
pub fn listen_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!(
            "`{text}` is not HOST:PORT (e.g. 0.0.0.0:8081, 127.0.0.1:8081, localhost:8081)"
        ));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("`{port}` in `{text}` is not a port (0 to 65535)"))?;
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|error| {
            format!("`{host}` in `{text}` is not an address or a host name found here: {error}")
        })?
        .collect();
    addrs
        .iter()
        .find(|addr| addr.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| format!("`{host}` in `{text}` has no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_address_is_an_address_or_a_host_name() {
        assert_eq!(
            listen_addr("127.0.0.1:8081"),
            Ok("127.0.0.1:8081".parse().unwrap())
        );
        assert_eq!(listen_addr("[::1]:80"), Ok("[::1]:80".parse().unwrap()));
        assert_eq!(
            listen_addr("localhost:18181"),
            Ok("127.0.0.1:18181".parse().unwrap())
        );
        assert_eq!(listen_addr(":8081"), Ok("0.0.0.0:8081".parse().unwrap()));
    }

    #[test]
    fn a_listen_address_without_a_port_says_what_it_should_be() {
        assert!(listen_addr("localhost").unwrap_err().contains("HOST:PORT"));
        assert!(listen_addr("localhost:http")
            .unwrap_err()
            .contains("is not a port"));
        assert!(listen_addr("no-such-host.invalid:80")
            .unwrap_err()
            .contains("not an address or a host name"));
    }
}
