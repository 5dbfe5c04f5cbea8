//! One Lua entry point of `lua/` (the request script, the refund script) in the two forms a server
//! runs it: a script of its own (the library files, then the entry, `SCRIPT LOAD` and `EVALSHA`),
//! or a function of the store's library (see [`super::library`], `FUNCTION LOAD` and `FCALL`).
//!
//! An entry file is a Lua chunk that returns its entry function, called with the call's keys and
//! arguments (see the header of `lua/common.lua`).

use std::sync::OnceLock;

/// The library files every entry point runs on, each followed by a newline: helpers, the five
/// algorithms, envoyproxy/ratelimit's fixed-window counter, the rate table, the leases (see
/// `lua/common.lua`).
macro_rules! library_source {
    () => {
        concat!(
            include_str!("../../../../lua/common.lua"),
            "\n",
            include_str!("../../../../lua/fixed_window.lua"),
            "\n",
            include_str!("../../../../lua/sliding_window_log.lua"),
            "\n",
            include_str!("../../../../lua/sliding_window_counter.lua"),
            "\n",
            include_str!("../../../../lua/token_bucket.lua"),
            "\n",
            include_str!("../../../../lua/gcra.lua"),
            "\n",
            include_str!("../../../../lua/envoyproxy_fixed_window.lua"),
            "\n",
            include_str!("../../../../lua/rates.lua"),
            "\n",
            include_str!("../../../../lua/lease.lua"),
            "\n",
        )
    };
}
pub(crate) use library_source;

/// The [`Script`] of the entry file `lua/<file>`, named `name` in the function library.
macro_rules! entry_script {
    ($name:literal, $file:literal) => {
        $crate::store::redis::scripts::script::Script::new(
            $name,
            include_str!(concat!("../../../../lua/", $file)),
            concat!(
                $crate::store::redis::scripts::script::library_source!(),
                "return (function()\n",
                include_str!(concat!("../../../../lua/", $file)),
                "\nend)()(KEYS, ARGV)\n"
            ),
        )
    };
}
pub(crate) use entry_script;

/// The command that carries a call of a script on a server, chosen per server when the store
/// connects (see `store::redis::server::calling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallCommand {
    /// `FCALL <function> ...`: the script as a function of the store's library (Redis 7.0 and
    /// later, Valkey), whose library code runs once per load rather than once per call.
    Fcall,
    /// `EVALSHA <sha1> ...`: the script on its own (Redis 6.x, or a user that may not load or
    /// call functions).
    Evalsha,
}

impl CallCommand {
    /// The command's name.
    pub fn name(self) -> &'static str {
        match self {
            CallCommand::Fcall => "FCALL",
            CallCommand::Evalsha => "EVALSHA",
        }
    }
}

/// A Lua entry point the store calls: by SHA1 (`EVALSHA`), loaded on each server it calls with
/// `SCRIPT LOAD` and reloaded there after `NOSCRIPT`; or by its function name (`FCALL`) in the
/// store's library (see [`super::library`]). Both forms take the same keys and arguments and answer
/// alike. The hash is computed once per process, at first use.
pub struct Script {
    name: &'static str,
    entry: &'static str,
    source: &'static str,
    sha1: OnceLock<String>,
}

impl Script {
    /// The entry point `name`, whose entry file is `entry`, and its script form `source` (the
    /// library files, then the entry, called with `KEYS` and `ARGV`): see `entry_script!`.
    pub const fn new(name: &'static str, entry: &'static str, source: &'static str) -> Script {
        Script {
            name,
            entry,
            source,
            sha1: OnceLock::new(),
        }
    }

    /// Its name in the library (the suffix of its function's name).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The entry file: a chunk that returns the entry function.
    pub fn entry(&self) -> &'static str {
        self.entry
    }

    /// The script form: what `SCRIPT LOAD` loads and `EVALSHA` runs.
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// The SHA1 of [`Script::source`] (hex).
    pub fn sha1(&self) -> &str {
        self.sha1
            .get_or_init(|| redis::Script::new(self.source).get_hash().into())
    }

    /// `SCRIPT LOAD <source>`
    pub fn load_command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source);
        cmd
    }
}
