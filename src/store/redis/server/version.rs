//! The oldest Redis the script runs on, checked once at startup.
//!
//! The script keeps a key's expiry with `SET ... KEEPTTL` (Redis 6.0). On an older server every
//! admitted request would fail with a bare `ERR syntax error`, so the store refuses to start there
//! with a message that names the cause instead.

use redis::Value;

use crate::store::StoreError;

/// The oldest `redis_version` the script runs on (major, minor).
pub const MIN_VERSION: (u64, u64) = (6, 0);

/// The error for a server older than [`MIN_VERSION`], or, when it is recent enough or does not
/// tell, the server's name and version for the logs (`redis 7.0.15`, `valkey 8.1.8`; `None` when
/// it does not tell): a user whose ACL denies `INFO` is still served (on a server that old, its
/// requests would then fail with Redis's own error).
pub async fn check(
    conn: &mut impl redis::aio::ConnectionLike,
) -> Result<Option<String>, StoreError> {
    let info = match redis::cmd("INFO")
        .arg("server")
        .query_async::<Value>(conn)
        .await
    {
        Ok(Value::BulkString(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(Value::VerbatimString { text, .. }) => text,
        Ok(_) | Err(_) => {
            tracing::debug!("INFO server unavailable: the Redis version is not checked");
            return Ok(None);
        }
    };
    match too_old(&info) {
        Some(version) => Err(StoreError::Unavailable(format!(
            "redis {version} is too old: ratelimitd needs Redis {}.{} or later (SET ... KEEPTTL)",
            MIN_VERSION.0, MIN_VERSION.1
        ))),
        None => Ok(server_name(&info)),
    }
}

/// `<server name> <version>` of an `INFO server` text: Valkey names itself (`server_name`,
/// `valkey_version`) and answers a Redis version (`redis_version:7.2.4`) beside its own.
fn server_name(info: &str) -> Option<String> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let name = field("server_name").unwrap_or("redis");
    let version = field(&format!("{name}_version")).or_else(|| field("redis_version"))?;
    Some(format!("{name} {version}"))
}

/// The `redis_version` of an `INFO server` text when it is older than [`MIN_VERSION`].
fn too_old(info: &str) -> Option<&str> {
    let version = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))?
        .trim();
    let mut parts = version.split('.').map(|part| part.parse::<u64>().ok());
    let major = parts.next().flatten()?;
    let minor = parts.next().flatten().unwrap_or(0);
    ((major, minor) < MIN_VERSION).then_some(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(version: &str) -> String {
        format!("# Server\r\nredis_version:{version}\r\nredis_git_sha1:00000000\r\n")
    }

    #[test]
    fn older_than_six_is_refused() {
        assert_eq!(too_old(&info("5.0.14")), Some("5.0.14"));
        assert_eq!(too_old(&info("3.2.12")), Some("3.2.12"));
    }

    #[test]
    fn six_and_later_and_unknown_versions_pass() {
        for version in ["6.0.0", "6.2.14", "7.0.15", "7.2.4", "8.0.2", "255.255.255"] {
            assert_eq!(too_old(&info(version)), None, "{version}");
        }
        // No version, or one that does not parse: the check cannot tell, so it does not refuse.
        assert_eq!(too_old("# Server\r\nos:Linux\r\n"), None);
        assert_eq!(too_old(&info("unstable")), None);
    }

    #[test]
    fn the_server_is_named_with_its_own_version() {
        assert_eq!(
            server_name(&info("7.0.15")).as_deref(),
            Some("redis 7.0.15")
        );
        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n";
        assert_eq!(server_name(valkey).as_deref(), Some("valkey 8.1.8"));
        assert_eq!(server_name("# Server\r\nos:Linux\r\n"), None);
    }
}
