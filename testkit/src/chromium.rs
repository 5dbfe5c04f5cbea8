//! A real headless Chromium driven over the DevTools protocol, for the tests of the status page
//! (tests/it/status_page.rs): load a page, evaluate script in it, collect what it logged as an
//! error (console errors, uncaught exceptions, Content-Security-Policy violations, failed loads),
//! take a screenshot.
//!
//! The protocol runs over `--remote-debugging-pipe`, as Puppeteer's `pipe` mode does: commands
//! go to the browser's fd 3 and answers come from its fd 4, each a JSON message ended by a NUL
//! byte. No port, no WebSocket and no client crate: the browser is the only new part. The binary
//! is `$CHROMIUM_BIN`, else `chromium` on the PATH (Debian's `chromium`, which scripts/test.sh
//! installs); without it the test fails, never skips.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// How long one protocol command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// A headless Chromium with one page open; killed when dropped.
pub struct Chromium {
    child: Child,
    commands: File,
    messages: Receiver<Value>,
    next_id: u64,
    session: String,
    events: Vec<Value>,
    profile: tempfile::TempDir,
}

/// The browser's binary: `$CHROMIUM_BIN`, else `chromium` on the PATH; panics naming how to get
/// it when there is none.
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("CHROMIUM_BIN") {
        return PathBuf::from(path);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("chromium"))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "no chromium: install Debian's chromium package (apt-get install chromium; \
             scripts/test.sh does) or set CHROMIUM_BIN"
        )
    })
}

/// A pipe whose ends close on exec: (read end, write end).
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    let done = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(done, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nothing else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

impl Chromium {
    /// Starts the browser (headless, a fresh profile, `width` × `height` window) with one blank
    /// page, its console, log and runtime events followed.
    pub fn launch(width: u32, height: u32) -> Chromium {
        use std::os::fd::AsRawFd;
        let profile = tempfile::tempdir().expect("a profile directory");
        let log = File::create(profile.path().join("chromium.log")).expect("the browser's log");
        let (browser_reads, commands) = pipe();
        let (messages, browser_writes) = pipe();
        let (to_browser, from_browser) = (browser_reads.as_raw_fd(), browser_writes.as_raw_fd());
        let mut command = Command::new(binary());
        command
            .args([
                "--headless",
                "--remote-debugging-pipe",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--mute-audio",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--window-size={width},{height}"))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the browser's log"))
            .stderr(log);
        // SAFETY: between fork and exec only dup2 runs, which is async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(to_browser, 3) < 0 || libc::dup2(from_browser, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "start {}: {e} (install Debian's chromium package; scripts/test.sh does)",
                binary().display()
            )
        });
        drop((browser_reads, browser_writes));
        let (sender, received) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(File::from(messages));
            loop {
                let mut message = Vec::new();
                match reader.read_until(0, &mut message) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if message.last() == Some(&0) {
                    message.pop();
                }
                let Ok(value) = serde_json::from_slice::<Value>(&message) else {
                    continue;
                };
                if sender.send(value).is_err() {
                    return;
                }
            }
        });
        let mut browser = Chromium {
            child,
            commands: File::from(commands),
            messages: received,
            next_id: 0,
            session: String::new(),
            events: Vec::new(),
            profile,
        };
        let target = browser.browser_call("Target.createTarget", json!({"url": "about:blank"}));
        let target_id = target["targetId"].clone();
        let attached = browser.browser_call(
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        );
        browser.session = attached["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session in {attached}"))
            .to_owned();
        for domain in ["Page", "Runtime", "Log"] {
            browser.call(&format!("{domain}.enable"), json!({}));
        }
        browser
    }

    /// The browser's own output so far (for a failure's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.profile.path().join("chromium.log")).unwrap_or_default()
    }

    fn send(&mut self, method: &str, params: Value, session: Option<String>) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        if let Err(error) = self.commands.write_all(&bytes) {
            panic!("send {method} to the browser: {error}\n{}", self.log());
        }
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.messages.recv_timeout(left) {
                Ok(reply) if reply["id"] == id => {
                    if let Some(error) = reply.get("error") {
                        panic!("{method}: {error}");
                    }
                    return reply["result"].clone();
                }
                Ok(event) => self.events.push(event),
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "{method}: no answer within {COMMAND_TIMEOUT:?}\n{}",
                        self.log()
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("{method}: the browser closed its pipe\n{}", self.log())
                }
            }
        }
    }

    fn browser_call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, None)
    }

    /// A command to the page's session; its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(method, params, Some(session))
    }

    /// Opens `url` and waits for its load event.
    pub fn navigate(&mut self, url: &str) {
        let seen = self.events.len();
        let navigated = self.call("Page.navigate", json!({"url": url}));
        if let Some(error) = navigated.get("errorText") {
            panic!("navigate to {url}: {error}");
        }
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        while !self.events[seen..]
            .iter()
            .any(|event| event["method"] == "Page.loadEventFired")
        {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.messages.recv_timeout(left) {
                Ok(event) => self.events.push(event),
                Err(_) => panic!("{url}: no load event within {COMMAND_TIMEOUT:?}"),
            }
        }
    }

    /// The value of `expression` evaluated in the page (promises awaited); panics on an
    /// exception.
    pub fn evaluate(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(exception) = result.get("exceptionDetails") {
            panic!("{expression}: {exception}");
        }
        result["result"]["value"].clone()
    }

    /// Evaluates `expression` every 200 ms until it is `true`, for at most `timeout`; panics
    /// with `what` and the errors logged meanwhile otherwise.
    pub fn wait_until(&mut self, expression: &str, timeout: Duration, what: &str) {
        let deadline = Instant::now() + timeout;
        loop {
            if self.evaluate(expression) == Value::Bool(true) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {timeout:?}; errors logged: {:?}",
                self.errors()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Everything the page logged as an error so far: console errors and assertions, uncaught
    /// exceptions, log entries at level error (Content-Security-Policy violations, failed
    /// loads).
    pub fn errors(&mut self) -> Vec<String> {
        while let Ok(event) = self.messages.try_recv() {
            self.events.push(event);
        }
        self.events
            .iter()
            .filter_map(|event| {
                let params = &event["params"];
                match event["method"].as_str()? {
                    "Runtime.consoleAPICalled"
                        if matches!(params["type"].as_str(), Some("error" | "assert")) =>
                    {
                        Some(format!("console.{}: {}", params["type"], params["args"]))
                    }
                    "Runtime.exceptionThrown" => {
                        Some(format!("exception: {}", params["exceptionDetails"]))
                    }
                    "Log.entryAdded" if params["entry"]["level"] == "error" => {
                        Some(format!("log: {}", params["entry"]))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// Writes a PNG screenshot of the whole page to `path` (its directory made if needed).
    pub fn screenshot(&mut self, path: &Path) {
        let shot = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap_or_default())
            .expect("a base64 screenshot");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
