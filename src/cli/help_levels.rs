//! Two levels of `serve` help: `--help` (and `-h`) shows the settings a user needs to start
//! (where the configuration comes from, the addresses, the store, the log), and `--help-all`
//! every one of them. The others stay accepted, and a misspelt one is still suggested: hiding
//! an argument only leaves it out of the help text.

use std::ffi::OsString;

use clap::{Command, CommandFactory};

use super::command::Cli;
use super::table;
use crate::settings;

/// The flag that shows every setting of `serve`.
pub const HELP_ALL: &str = "--help-all";

/// `arguments` with `--help-all` read as `--help`, and whether it was given.
pub fn expand(arguments: &[OsString]) -> (Vec<OsString>, bool) {
    let mut all = false;
    let expanded = arguments
        .iter()
        .map(|argument| {
            if argument == HELP_ALL {
                all = true;
                OsString::from("--help")
            } else {
                argument.clone()
            }
        })
        .collect();
    (expanded, all)
}

/// The command line: `serve` takes `--help-all` (read as `--help`, see [`expand`]) beside
/// `--help`, and unless `all`, its help is [`brief`].
pub fn command(all: bool) -> Command {
    let cli = table::apply(Cli::command()).mut_subcommand("serve", |serve| {
        serve.next_help_heading(None::<&str>).arg(
            clap::Arg::new("help_all")
                .long("help-all")
                .action(clap::ArgAction::HelpLong)
                .help("Print help with every setting"),
        )
    });
    if all {
        cli
    } else {
        brief(cli)
    }
}

/// `cli` with the `serve` settings that are not essential ([`settings::Setting::essential`]) left out of its help, which ends by
/// saying how many there are and how to see them. `--help` prints what `-h` does, the essential
/// settings with their one-line help (their longer one is `--help-all`'s): one screen.
pub fn brief(cli: Command) -> Command {
    cli.mut_subcommand("serve", |serve| {
        let hidden = serve
            .get_arguments()
            .filter(|arg| is_setting(arg) && !is_essential(arg))
            .count();
        let more = format!(
            "{hidden} more settings (listeners, TLS, Redis, responses, bounds, RLQS, telemetry): \
             ratelimitd serve {HELP_ALL}"
        );
        let after = match serve.get_after_help() {
            Some(after) => format!("{after}\n\n{more}"),
            None => more,
        };
        serve
            .mut_args(|arg| {
                if is_setting(&arg) && !is_essential(&arg) {
                    arg.hide(true)
                } else {
                    arg
                }
            })
            .disable_help_flag(true)
            .next_help_heading(None::<&str>)
            .arg(
                clap::Arg::new("help")
                    .short('h')
                    .long("help")
                    .action(clap::ArgAction::HelpShort)
                    .help("Print help: the settings needed to start"),
            )
            .after_help(after)
    })
}

fn is_setting(arg: &clap::Arg) -> bool {
    arg.get_long()
        .is_some_and(|long| long != "help" && long != "help-all")
        && !arg.is_hide_set()
}

fn is_essential(arg: &clap::Arg) -> bool {
    arg.get_long()
        .and_then(settings::by_flag)
        .is_some_and(|setting| setting.essential)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The flags of `serve` that are no setting of their own: the negation of one.
    const NEGATIONS: &[&str] = &["no-deny-cache"];

    #[test]
    fn every_argument_of_serve_is_a_setting_and_every_setting_an_argument() {
        let cli = command(true);
        let serve = cli.find_subcommand("serve").expect("serve");
        let arguments: BTreeSet<&str> = serve
            .get_arguments()
            .filter_map(|arg| arg.get_long())
            .filter(|long| !["help", "help-all"].contains(long) && !NEGATIONS.contains(long))
            .collect();
        let table: BTreeSet<&str> = settings::all().map(|setting| setting.flag).collect();
        assert_eq!(
            arguments.difference(&table).collect::<Vec<_>>(),
            Vec::<&&str>::new(),
            "arguments without a setting"
        );
        assert_eq!(
            table.difference(&arguments).collect::<Vec<_>>(),
            Vec::<&&str>::new(),
            "settings without an argument"
        );
    }

    #[test]
    fn every_argument_reads_its_variable_and_shows_its_default() {
        let cli = command(true);
        let serve = cli.find_subcommand("serve").expect("serve");
        for setting in settings::all() {
            let arg = serve
                .get_arguments()
                .find(|arg| arg.get_long() == Some(setting.flag))
                .expect("an argument");
            assert_eq!(
                arg.get_env().and_then(|env| env.to_str()),
                Some(setting.variable)
            );
            assert_eq!(arg.get_help_heading(), Some(setting.group.heading()));
            if let Some(default) = setting.default.text() {
                let defaults: Vec<_> = arg
                    .get_default_values()
                    .iter()
                    .map(|value| value.to_string_lossy().into_owned())
                    .collect();
                assert_eq!(defaults, [default], "--{}", setting.flag);
            }
        }
    }

    #[test]
    fn brief_help_keeps_the_essentials_and_hides_the_rest() {
        let brief = command(false);
        let serve = brief.find_subcommand("serve").expect("serve");
        let shown: Vec<&str> = serve
            .get_arguments()
            .filter(|arg| !arg.is_hide_set())
            .filter_map(|arg| arg.get_long())
            .filter(|long| *long != "help" && *long != "help-all")
            .collect();
        let essential: Vec<&str> = settings::all()
            .filter(|setting| setting.essential)
            .map(|setting| setting.flag)
            .collect();
        assert_eq!(shown.len(), essential.len(), "{shown:?}");
        assert!(
            shown.iter().all(|flag| essential.contains(flag)),
            "{shown:?}"
        );
        let after = serve
            .get_after_help()
            .map(|a| a.to_string())
            .unwrap_or_default();
        assert!(
            after.contains("Drop-in mode") && after.contains(HELP_ALL),
            "{after}"
        );
    }
}
