//! The clap arguments of `serve` and `check` completed from the settings table
//! ([`crate::settings`]): each argument's variable, default, help heading and help text come
//! from its row, matched by long flag; the clap derive declares only what makes the value (its
//! field, type and parser).

use clap::Command;

use crate::settings::{self, Setting};

/// `cli` with the `serve` and `check` arguments completed from their settings.
pub fn apply(cli: Command) -> Command {
    cli.mut_subcommand("serve", complete)
        .mut_subcommand("check", complete)
}

/// Parses `arguments` as `T`, a command of some of the flag groups, completed from the table:
/// how the groups' tests parse.
#[cfg(test)]
pub fn parse<T: clap::Parser>(
    arguments: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
) -> Result<T, clap::Error> {
    let matches = complete(T::command()).try_get_matches_from(arguments)?;
    T::from_arg_matches(&matches)
}

fn complete(command: Command) -> Command {
    command.mut_args(|arg| {
        let long = arg.get_long();
        if let Some(setting) = long.and_then(settings::by_flag) {
            return described(arg, setting);
        }
        // `--no-X` turns the setting `--X` off and is listed beside it.
        match long
            .and_then(|long| long.strip_prefix("no-"))
            .and_then(settings::by_flag)
        {
            Some(negated) => arg.help_heading(negated.group.heading()),
            None => arg,
        }
    })
}

fn described(arg: clap::Arg, setting: &'static Setting) -> clap::Arg {
    let (help, long_help) = help_texts(setting.help);
    let arg = arg
        .env(setting.variable)
        .help_heading(setting.group.heading())
        .help(help)
        .long_help(long_help);
    match setting.default.text() {
        Some(default) => arg.default_value(default).required(false),
        None => arg,
    }
}

/// The one-line help (the first paragraph, without its final period) and, for a text of
/// several paragraphs, the long help (all of them), as clap's derive makes them of a doc
/// comment.
fn help_texts(text: &'static str) -> (&'static str, Option<&'static str>) {
    let first = text.split("\n\n").next().unwrap_or(text);
    let short = match first.strip_suffix('.') {
        Some(short) if !first.ends_with("..") => short,
        _ => first,
    };
    let long = text.contains("\n\n").then_some(text);
    (short, long)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_texts_split_as_clap_derive_does() {
        assert_eq!(help_texts("One line."), ("One line", None));
        assert_eq!(help_texts("Ends so..."), ("Ends so...", None));
        assert_eq!(
            help_texts("First.\n\nSecond."),
            ("First", Some("First.\n\nSecond."))
        );
    }
}
