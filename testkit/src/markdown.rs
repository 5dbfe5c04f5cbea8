//! The documentation (README.md and the Markdown files under docs/) as the documentation tests read it: fenced code
//! blocks, paragraphs with their inline code spans and links, headings as GitHub anchors, and the
//! command lines of shell blocks split into words the way a shell would.
//!
//! Shared by `tests/it/docs.rs` (the service's commands, configurations and links) and
//! `bench/tests/docs.rs` (the benchmark tools' commands).

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

/// One Markdown file of the documentation.
pub struct Doc {
    /// Path relative to the repository root, e.g. `docs/redis.md`.
    pub path: PathBuf,
    pub blocks: Vec<Block>,
    pub paragraphs: Vec<Paragraph>,
    pub headings: Vec<String>,
}

/// A fenced code block.
pub struct Block {
    /// The words after the opening fence: the language first (```` ```yaml invalid ````).
    pub info: Vec<String>,
    /// 1-based line of the block's first content line.
    pub line: usize,
    pub lines: Vec<String>,
}

/// Consecutive text lines outside code blocks (a paragraph, a list, a table).
pub struct Paragraph {
    /// 1-based line of its first line.
    pub line: usize,
    pub text: String,
}

/// One simple command of a shell or console block: its words, any `NAME=value` prefixes, and,
/// for a `$ ` line of a console block, the output printed under it.
pub struct ShellCommand {
    pub line: usize,
    pub assignments: Vec<(String, String)>,
    pub words: Vec<String>,
    pub output: Option<String>,
}

/// README.md and every `.md` file under docs/ (its subfolders included), in that order (docs
/// sorted by path).
pub fn documentation(root: &Path) -> Vec<Doc> {
    let mut paths = vec![PathBuf::from("README.md")];
    let mut docs = Vec::new();
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
            let path = entry.expect("a docs/ entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                docs.push(
                    path.strip_prefix(root)
                        .expect("under the root")
                        .to_path_buf(),
                );
            }
        }
    }
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|path| {
            let text = fs::read_to_string(root.join(&path))
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            Doc::parse(path, &text)
        })
        .collect()
}

impl Doc {
    pub fn parse(path: PathBuf, text: &str) -> Doc {
        let mut blocks = Vec::new();
        let mut paragraphs = Vec::new();
        let mut headings = Vec::new();
        let mut open: Option<Block> = None;
        let mut paragraph: Option<Paragraph> = None;
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            if let Some(block) = open.as_mut() {
                if line.trim_start().starts_with("```") {
                    blocks.push(open.take().expect("an open block"));
                } else {
                    block.lines.push(line.to_string());
                }
                continue;
            }
            if let Some(info) = line.trim_start().strip_prefix("```") {
                paragraphs.extend(paragraph.take());
                open = Some(Block {
                    info: info.split_whitespace().map(str::to_string).collect(),
                    line: number + 1,
                    lines: Vec::new(),
                });
                continue;
            }
            if line.trim().is_empty() {
                paragraphs.extend(paragraph.take());
                continue;
            }
            if let Some(heading) = line.strip_prefix('#') {
                paragraphs.extend(paragraph.take());
                headings.push(heading.trim_start_matches('#').trim().to_string());
            }
            match paragraph.as_mut() {
                Some(paragraph) => {
                    paragraph.text.push('\n');
                    paragraph.text.push_str(line);
                }
                None => {
                    paragraph = Some(Paragraph {
                        line: number,
                        text: line.to_string(),
                    })
                }
            }
        }
        assert!(
            open.is_none(),
            "{}: a code block is never closed",
            path.display()
        );
        paragraphs.extend(paragraph);
        Doc {
            path,
            blocks,
            paragraphs,
            headings,
        }
    }

    /// `file:line` for messages.
    pub fn at(&self, line: usize) -> String {
        format!("{}:{line}", self.path.display())
    }

    /// Inline code spans outside code blocks, with the line they start on. A span may wrap
    /// across lines of its paragraph; the line break reads as a space.
    pub fn code_spans(&self) -> Vec<(usize, String)> {
        let mut spans = Vec::new();
        for paragraph in &self.paragraphs {
            let mut rest = paragraph.text.as_str();
            let mut consumed = 0;
            while let Some(start) = rest.find('`') {
                let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
                let fence = &rest[start..start + ticks];
                let body_start = start + ticks;
                let Some(length) = rest[body_start..].find(fence) else {
                    break;
                };
                let body = &rest[body_start..body_start + length];
                let line =
                    paragraph.line + paragraph.text[..consumed + start].matches('\n').count();
                spans.push((line, body.replace('\n', " ").trim().to_string()));
                let end = body_start + length + ticks;
                consumed += end;
                rest = &rest[end..];
            }
        }
        spans
    }

    /// Link targets `[text](target)` outside code blocks and code spans, with their line.
    pub fn links(&self) -> Vec<(usize, String)> {
        let mut links = Vec::new();
        for paragraph in &self.paragraphs {
            let text = without_code_spans(&paragraph.text);
            let mut offset = 0;
            while let Some(found) = text[offset..].find("](") {
                let start = offset + found + 2;
                let Some(length) = text[start..].find(')') else {
                    break;
                };
                let target = text[start..start + length].trim();
                let line = paragraph.line + text[..start].matches('\n').count();
                if !target.is_empty() && !target.contains(char::is_whitespace) {
                    links.push((line, target.to_string()));
                }
                offset = start + length;
            }
        }
        links
    }

    /// The anchors GitHub gives this file's headings.
    pub fn anchors(&self) -> HashSet<String> {
        let mut anchors = HashSet::new();
        for heading in &self.headings {
            let slug = slug(heading);
            let mut candidate = slug.clone();
            let mut n = 1;
            while !anchors.insert(candidate.clone()) {
                candidate = format!("{slug}-{n}");
                n += 1;
            }
        }
        anchors
    }

    /// The simple commands of the shell (`sh`, `bash`, `shell`) and `console` blocks: every
    /// line of a shell block, the `$ ` lines of a console block (with the output under each).
    pub fn shell_commands(&self) -> Vec<ShellCommand> {
        let mut commands = Vec::new();
        for block in &self.blocks {
            let language = block.info.first().map(String::as_str).unwrap_or("");
            let console = language == "console";
            if !console && !matches!(language, "sh" | "bash" | "shell") {
                continue;
            }
            let mut index = 0;
            while index < block.lines.len() {
                let first = index;
                let mut line = block.lines[index].clone();
                index += 1;
                if console {
                    let Some(command) = line.strip_prefix("$ ") else {
                        continue;
                    };
                    line = command.to_string();
                }
                while line.trim_end().ends_with('\\') && index < block.lines.len() {
                    line = line.trim_end().trim_end_matches('\\').to_string();
                    line.push(' ');
                    line.push_str(block.lines[index].trim());
                    index += 1;
                }
                let output = console.then(|| {
                    let start = index;
                    while index < block.lines.len() && !block.lines[index].starts_with("$ ") {
                        index += 1;
                    }
                    block.lines[start..index].join("\n").trim().to_string()
                });
                for SimpleCommand { assignments, words } in simple_commands(&line) {
                    commands.push(ShellCommand {
                        line: block.line + first,
                        assignments,
                        words,
                        output: output.clone(),
                    });
                }
            }
        }
        commands
    }
}

/// GitHub's anchor for a heading: lower case, code ticks and punctuation other than `-` and `_`
/// dropped, spaces turned into `-`.
pub fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

fn without_code_spans(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut inside = false;
    for c in text.chars() {
        if c == '`' {
            inside = !inside;
        } else if !inside {
            out.push(c);
        } else if c == '\n' {
            out.push('\n');
        }
    }
    out
}

/// Every `--flag` named in `text` (the name only: `--deny-cache=false` gives `--deny-cache`).
pub fn flags(text: &str) -> Vec<String> {
    let mut flags = Vec::new();
    let bytes = text.as_bytes();
    let mut index = 0;
    while let Some(found) = text[index..].find("--") {
        let start = index + found;
        let before = start.checked_sub(1).map(|i| bytes[i]);
        let mut end = start + 2;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'-') {
            end += 1;
        }
        let standalone = before.is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'-'));
        if standalone && end > start + 2 && bytes[start + 2].is_ascii_lowercase() {
            flags.push(text[start..end].trim_end_matches('-').to_string());
        }
        index = end.max(start + 2);
    }
    flags
}

/// One command of a shell line: its leading `NAME=value` assignments and its words (quotes
/// removed, redirections and comments dropped).
pub struct SimpleCommand {
    pub assignments: Vec<(String, String)>,
    pub words: Vec<String>,
}

/// A shell line split into simple commands at `|`, `&&`, `||`, `;` and `&`.
pub fn simple_commands(line: &str) -> Vec<SimpleCommand> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let mut end_command = |words: &mut Vec<String>| {
        let mut assignments = Vec::new();
        let mut taken: Vec<String> = std::mem::take(words);
        while let Some(first) = taken.first() {
            match first.split_once('=') {
                Some((name, value))
                    if !name.is_empty()
                        && name.chars().all(|c| c.is_ascii_uppercase() || c == '_') =>
                {
                    assignments.push((name.to_string(), value.to_string()));
                    taken.remove(0);
                }
                _ => break,
            }
        }
        let mut cleaned = Vec::new();
        let mut skip_next = false;
        for word in taken {
            if skip_next {
                skip_next = false;
                continue;
            }
            let redirect = word.trim_start_matches(|c: char| c.is_ascii_digit());
            if redirect.starts_with('>') || redirect.starts_with('<') {
                skip_next = redirect.trim_start_matches(['>', '<']).is_empty();
                continue;
            }
            cleaned.push(word);
        }
        if !cleaned.is_empty() || !assignments.is_empty() {
            commands.push(SimpleCommand {
                assignments,
                words: cleaned,
            });
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        _ => word.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '|' | ';' | '&' if !word.ends_with('>') => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                if matches!(chars.peek(), Some('|') | Some('&')) {
                    chars.next();
                }
                end_command(&mut words);
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    end_command(&mut words);
    commands
}
