//! Every Lua entry point the store calls ([`SCRIPTS`]), and all of them as ONE Redis Functions
//! library ([`library`]): the library files once, then each entry registered as a function, loaded
//! together with `FUNCTION LOAD` and called with `FCALL`. A new entry point is one more line in
//! [`SCRIPTS`].
//!
//! The library's name carries its version: `ratelimitd_` and the first 16 hex digits of the
//! SHA-256 of everything it runs (library files, entry names and files), and each function's name
//! starts with it. So a library another ratelimitd version left on the server is never called by
//! this one (their names differ), both can serve one Redis during a rolling upgrade, and a changed
//! library is loaded beside the old one rather than over it. Old libraries stay until removed
//! (`FUNCTION DELETE`): a server keeps one per version that ever connected.

use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::script::{entry_script, library_source, CallCommand, Script};

/// The request script (`lua/request.lua`): decides a batch of requests.
pub static DECIDE: Script = entry_script!("request", "request.lua");

/// The refund script (`lua/refund.lua`): gives back what a cluster node committed for a request
/// another node denied.
pub static REFUND: Script = entry_script!("refund", "refund.lua");

/// Every entry point, in library order: each becomes a function of the library.
pub static SCRIPTS: [&Script; 2] = [&DECIDE, &REFUND];

/// Flags of every entry function: a cluster call passes keys of several slots its node owns in
/// its arguments (declaring none; see `keys_and_arguments` in `lua/common.lua`), which a function
/// may access only with this flag.
const ENTRY_FLAGS: &str = "{'allow-cross-slot-keys'}";

/// The store's Redis Functions library.
pub struct Library {
    name: String,
    source: String,
    /// The function of each of [`SCRIPTS`], in its order.
    functions: Vec<String>,
    probe: String,
}

/// The library, assembled at first use.
pub fn library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| Library::assemble(library_source!(), &SCRIPTS))
}

impl Library {
    /// The library of `scripts` on the library files `files`.
    fn assemble(files: &str, scripts: &[&Script]) -> Library {
        let mut version = Sha256::new();
        version.update(files.as_bytes());
        for script in scripts {
            version.update(b"\0");
            version.update(script.name().as_bytes());
            version.update(b"\0");
            version.update(script.entry().as_bytes());
        }
        let digest = version.finalize();
        let hex: String = digest[..8]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let name = format!("ratelimitd_{hex}");
        let functions: Vec<String> = scripts
            .iter()
            .map(|script| format!("{name}_{}", script.name()))
            .collect();
        let probe = format!("{name}_version");
        let mut source = format!("#!lua name={name}\n{files}");
        for (script, function) in scripts.iter().zip(&functions) {
            source.push_str(&format!(
                "do\nlocal entry = (function()\n{}\nend)()\nredis.register_function{{function_name='{function}', \
                 callback=entry, flags={ENTRY_FLAGS}}}\nend\n",
                script.entry()
            ));
        }
        source.push_str(&format!(
            "redis.register_function{{function_name='{probe}', callback=function() return '{name}' \
             end, flags={{'no-writes'}}}}\n"
        ));
        Library {
            name,
            source,
            functions,
            probe,
        }
    }

    /// `ratelimitd_<16 hex digits of its version>`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The library's code, as `FUNCTION LOAD` takes it (a `#!lua name=...` line first).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// `FUNCTION LOAD <source>` (without `REPLACE`: a library of this name holds this code).
    pub fn load_command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg(self.source.as_str());
        cmd
    }

    /// `FCALL <library>_version 0`: answers the library's name where it is loaded and may be
    /// called, without touching a key.
    pub fn probe_command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(self.probe.as_str()).arg(0);
        cmd
    }

    /// The name `FCALL` calls `script` by: `<library>_<script name>`.
    ///
    /// Panics for a script that is not one of [`SCRIPTS`] (a programming error).
    pub fn function(&self, script: &Script) -> &str {
        SCRIPTS
            .iter()
            .position(|known| std::ptr::eq(*known, script))
            .and_then(|at| self.functions.get(at))
            .map(String::as_str)
            .expect("every script the store calls is in SCRIPTS")
    }

    /// What follows the command's name in a call of `script` with `command`: the function's name
    /// or the script's SHA1.
    pub fn target<'a>(&'a self, script: &'a Script, command: CallCommand) -> &'a str {
        match command {
            CallCommand::Fcall => self.function(script),
            CallCommand::Evalsha => script.sha1(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_versioned_by_what_the_library_runs() {
        let library = library();
        assert!(library.name().starts_with("ratelimitd_"));
        assert_eq!(library.name().len(), "ratelimitd_".len() + 16);
        assert!(library
            .source()
            .starts_with(&format!("#!lua name={}\n", library.name())));
        assert_eq!(
            library.function(&DECIDE),
            format!("{}_request", library.name())
        );
        assert_eq!(
            library.function(&REFUND),
            format!("{}_refund", library.name())
        );
        let changed = Library::assemble("-- another version\n", &SCRIPTS);
        assert_ne!(changed.name(), library.name());
        let same = Library::assemble(library_source!(), &SCRIPTS);
        assert_eq!(same.name(), library.name());
        assert_eq!(same.source(), library.source());
    }

    #[test]
    fn every_script_is_registered_with_its_flags() {
        let source = library().source();
        for script in SCRIPTS {
            let function = library().function(script);
            assert!(
                source.contains(&format!(
                    "function_name='{function}', callback=entry, flags={ENTRY_FLAGS}"
                )),
                "{function}"
            );
        }
        assert_eq!(
            library().target(&DECIDE, CallCommand::Evalsha),
            DECIDE.sha1()
        );
    }
}
