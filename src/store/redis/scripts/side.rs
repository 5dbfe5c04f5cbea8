//! Small scripts the store runs besides the request script, one call each, not batched (the RLQS
//! demands): called by SHA1, sent whole on `NOSCRIPT`.

/// A small script the store runs besides the request script (`RedisStore::run_side_script`),
/// hashed once.
pub struct SideScript {
    source: &'static str,
    sha1: std::sync::OnceLock<String>,
}

impl SideScript {
    pub const fn new(source: &'static str) -> SideScript {
        SideScript {
            source,
            sha1: std::sync::OnceLock::new(),
        }
    }

    fn sha1(&self) -> &str {
        self.sha1
            .get_or_init(|| redis::Script::new(self.source).get_hash().to_owned())
    }

    /// `EVALSHA <sha1> 1 <key> <args>...`
    pub(in crate::store::redis) fn evalsha(&self, key: &str, args: &[String]) -> redis::Cmd {
        redis::cmd("EVALSHA")
            .arg(self.sha1())
            .arg(1)
            .arg(key)
            .arg(args)
            .clone()
    }

    /// `EVAL <source> 1 <key> <args>...`, for a server that lost the script.
    pub(in crate::store::redis) fn eval(&self, key: &str, args: &[String]) -> redis::Cmd {
        redis::cmd("EVAL")
            .arg(self.source)
            .arg(1)
            .arg(key)
            .arg(args)
            .clone()
    }
}
