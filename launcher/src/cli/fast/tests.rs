//! The fast path against clap, the reference: same options, same shapes, and on any line it
//! accepts, the same value.

use clap::builder::ValueRange;
use clap::{ArgAction, CommandFactory, Parser};
use proptest::prelude::*;

use super::{parse, Takes, COMPAT, EGRESS, NETWORK, OPTIONS};
use crate::cli::{Cli, Command, WholeProcessOnly};

/// clap's own arguments that the fast path declines on purpose, so that clap answers them.
const ROUTED_TO_CLAP: &[&str] = &["help"];

/// What the whole tree makes of `whole-process LINE…`, as `Debug` text (`prompt_timeout` is an
/// f64: NaN reads the same on both sides only as text).
fn clap_reads(line: &[String]) -> Result<String, clap::Error> {
    let full = ["sandbox-launch", "whole-process"]
        .into_iter()
        .map(String::from)
        .chain(line.iter().cloned());
    match Cli::try_parse_from(full)?.command {
        Command::WholeProcess(w) => Ok(format!("{w:?}")),
        other => panic!("{line:?} parsed as {other:?}"),
    }
}

/// Whether the fast path takes `line`; when it does, clap must read it the same.
fn fast_agrees_with_clap(line: &[String]) -> bool {
    let Some(fast) = parse(line) else {
        return false;
    };
    match clap_reads(line) {
        Ok(clap) => assert_eq!(format!("{fast:?}"), clap, "{line:?}"),
        Err(e) => panic!("{line:?}: the fast path reads {fast:?}, clap refuses it: {e}"),
    }
    true
}

fn line(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// A value each option takes (the tests need one per option: a new option needs one here).
fn valid_value(long: &str) -> &'static str {
    match long {
        "policy" | "settings" => "/etc/p.yaml",
        "cwd" | "allow-write" | "deny-write" | "deny-read" | "allow-unix-socket" => "/w/x",
        "bind" | "ro-bind" | "overlay" => "/a:/b",
        "tmpfs" => "/t",
        "network" => "none",
        "allow-domain" => "*.example.com",
        "allow-loopback-port" => "8080",
        "egress" => "proxy-only",
        "resolve" => "h.example:127.0.0.1",
        "tunnel-idle-timeout" => "10m",
        "events" => "fd:3",
        "seccomp-policy" => "default",
        "json-status-fd" | "preserve-fd" => "3",
        "env" => "NAME=VALUE",
        "credential" => "TOKEN=api.example.com,b.example",
        "timeout" => "1h30m",
        "rlimit" => "nofile=10:20",
        "memory" | "tmp-size" => "2G",
        "pids" => "100",
        "cpus" => "1.5",
        "limits-compatibility" => "best_effort",
        "name" => "n",
        "prompt-timeout" => "2.5",
        other => panic!("--{other}: give it a valid value here"),
    }
}

#[test]
fn every_option_clap_defines_is_in_the_fast_paths_table_with_the_same_shape() {
    let mut command = WholeProcessOnly::command();
    command.build();
    assert!(!command.is_allow_negative_numbers_set() && !command.is_no_binary_name_set());
    let mut clap_longs = Vec::new();
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        if ROUTED_TO_CLAP.contains(&id) {
            continue;
        }
        if arg.is_positional() {
            assert_eq!(
                id, "command",
                "a new positional: teach cli::fast, or route it here"
            );
            assert!(arg.is_trailing_var_arg_set() && arg.is_required_set());
            continue;
        }
        let long = arg.get_long().unwrap_or_else(|| {
            panic!("{id} has no long name: teach cli::fast, or add it to ROUTED_TO_CLAP")
        });
        let opt = OPTIONS.iter().find(|o| o.long == long).unwrap_or_else(|| {
            panic!(
                "--{long} is clap's but not in cli::fast::OPTIONS: add it there (or add it to \
                 ROUTED_TO_CLAP here, and make fast::parse decline it)"
            )
        });
        assert_eq!(opt.short, arg.get_short(), "--{long}'s short option");
        let (same, values) = match (arg.get_action(), &opt.takes) {
            (ArgAction::SetTrue, Takes::Flag(_)) | (ArgAction::Count, Takes::Count(_)) => {
                (true, ValueRange::EMPTY)
            }
            (ArgAction::Set, Takes::Once(_)) | (ArgAction::Append, Takes::Many(_)) => {
                (true, ValueRange::SINGLE)
            }
            _ => (false, ValueRange::EMPTY),
        };
        assert!(same, "--{long}: clap's action is {:?}", arg.get_action());
        assert_eq!(
            arg.get_num_args(),
            Some(values),
            "--{long}: number of values"
        );
        // Nothing that would make clap split the line differently from the fast path.
        assert!(
            arg.get_all_aliases().is_none() && arg.get_all_short_aliases().is_none(),
            "--{long}: aliases"
        );
        assert!(
            !arg.is_allow_hyphen_values_set()
                && !arg.is_allow_negative_numbers_set()
                && !arg.is_require_equals_set()
                && !arg.is_ignore_case_set()
                && !arg.is_last_set()
                && !arg.is_exclusive_set()
                && !arg.is_global_set(),
            "--{long}: a setting the fast path does not mirror"
        );
        assert_eq!(arg.get_value_delimiter(), None, "--{long}: value delimiter");
        assert_eq!(
            arg.get_value_terminator(),
            None,
            "--{long}: value terminator"
        );
        assert_eq!(arg.get_env(), None, "--{long}: read from the environment");
        assert!(
            command.get_arg_conflicts_with(arg).is_empty(),
            "--{long}: conflicts"
        );
        clap_longs.push(long);
    }
    for o in OPTIONS {
        assert!(
            clap_longs.contains(&o.long),
            "--{} is in cli::fast::OPTIONS but clap does not define it",
            o.long
        );
    }
}

/// The names a `ValueEnum` takes (aliases included), each with its variant, as `Debug` text.
fn names_of<T: clap::ValueEnum + std::fmt::Debug>() -> Vec<(String, String)> {
    let mut names: Vec<_> = T::value_variants()
        .iter()
        .flat_map(|v| {
            let possible = v.to_possible_value().expect("no skipped variants");
            let names = possible.get_name_and_aliases().map(String::from);
            names.map(|n| (n, format!("{v:?}"))).collect::<Vec<_>>()
        })
        .collect();
    names.sort();
    names
}

fn table<T: std::fmt::Debug>(values: &[(&str, T)]) -> Vec<(String, String)> {
    let mut names: Vec<_> = values
        .iter()
        .map(|(n, v)| (n.to_string(), format!("{v:?}")))
        .collect();
    names.sort();
    names
}

#[test]
fn the_fast_paths_value_names_are_clap_value_enums() {
    assert_eq!(table(NETWORK), names_of::<super::NetworkArg>());
    assert_eq!(table(EGRESS), names_of::<super::EgressArg>());
    assert_eq!(table(COMPAT), names_of::<super::CompatArg>());
}

#[test]
fn each_option_with_a_valid_value_takes_the_fast_path_and_reads_as_clap_reads_it() {
    assert!(fast_agrees_with_clap(&line(&["id"])), "the defaults");
    for o in OPTIONS {
        let long = format!("--{}", o.long);
        let lines = match o.takes {
            Takes::Flag(_) | Takes::Count(_) => vec![line(&[&long, "id"])],
            Takes::Once(_) | Takes::Many(_) => {
                let v = valid_value(o.long);
                vec![
                    line(&[&long, v, "id"]),
                    line(&[&format!("{long}={v}"), "--", "id"]),
                ]
            }
        };
        for l in lines {
            assert!(fast_agrees_with_clap(&l), "{l:?} should take the fast path");
        }
    }
}

#[test]
fn ordinary_lines_take_the_fast_path_and_read_as_clap_reads_them() {
    let lines: &[&[&str]] = &[
        &["--network", "restricted", "--", "/bin/true"],
        &[
            "--network=restricted",
            "--allow-domain",
            "example.com",
            "--allow-write",
            "/tmp/x",
            "-v",
            "--timeout",
            "10s",
            "--",
            "/bin/true",
        ],
        &[
            "-v",
            "-v",
            "--verbose",
            "droid",
            "--some-flag",
            "-v",
            "--",
            "x",
        ],
        &[
            "--allow-domain",
            "a.example",
            "--allow-domain=b.example",
            "sh",
        ],
        &["--worktree", "--name", "n", "--", "--looks-like-an-option"],
        &["--", "-x", "--network"],
        &[
            "--env", "A=", "--env=B", "--rlimit", "core=0", "sh", "-c", "",
        ],
        &[
            "--prompt-timeout",
            "NaN",
            "--prompts",
            "--non-interactive",
            "id",
        ],
        &[
            "--policy=a=b",
            "--settings",
            "s.json",
            "--env-all",
            "--empty-root",
            "p",
        ],
    ];
    for l in lines {
        assert!(
            fast_agrees_with_clap(&line(l)),
            "{l:?} should take the fast path"
        );
    }
}

#[test]
fn what_the_fast_path_is_not_sure_of_goes_to_clap() {
    let lines: &[&[&str]] = &[
        &[],
        &["--"],
        &["--network", "none"],
        &["--help"],
        &["-h", "id"],
        &["--version"],
        &["-V", "id"],
        &["-vv", "id"],
        &["-vx", "id"],
        &["-", "id"],
        &["--polcy", "x", "--", "id"],
        &["--pol", "x", "id"],
        &["--network", "nonsense", "id"],
        &["--network", "None", "id"],
        &["--policy", "a", "--policy", "b", "id"],
        &["--prompts", "--prompts", "id"],
        &["--prompts=true", "id"],
        &["--name", "-x", "id"],
        &["--name", "--", "id"],
        &["--name=", "id"],
        &["--allow-loopback-port", "+5", "id"],
        &["--allow-loopback-port", "65536", "id"],
        &["--preserve-fd", "-1", "id"],
        &["--timeout", "soon", "id"],
        &["--", ""],
        &[""],
    ];
    for l in lines {
        assert!(parse(&line(l)).is_none(), "{l:?} should go to clap");
    }
}

/// Every option with each value of [`VALUES`] and each near miss of its valid value, as
/// `--opt VALUE`, `--opt=VALUE` and twice: the fast path reads it as clap does, or declines.
#[test]
fn every_option_with_every_odd_value_reads_as_clap_reads_it_or_goes_to_clap() {
    for (i, o) in OPTIONS.iter().enumerate() {
        let long = format!("--{}", o.long);
        let values = VALUES
            .iter()
            .map(|v| v.to_string())
            .chain(near_misses(valid_value_of(i)));
        for v in values {
            let inline = format!("{long}={v}");
            for l in [
                vec![long.clone(), v.clone(), "id".into()],
                vec![inline.clone(), "id".into()],
                vec![inline.clone(), inline, "--".into(), "id".into()],
            ] {
                fast_agrees_with_clap(&l);
            }
        }
    }
}

/// Values valid for some option and not for others, and the odd ones.
const VALUES: &[&str] = &[
    "",
    "-",
    "-x",
    "--",
    "x",
    "/a",
    "/a:/b",
    "a=b",
    "none",
    "None",
    "full",
    "restricted",
    "transparent",
    "proxy-only",
    "proxy_only",
    "best_effort",
    "best-effort",
    "hard_requirement",
    "0",
    "1",
    "3",
    "65535",
    "65536",
    "-1",
    "+5",
    "007",
    "2147483648",
    "1.5",
    "NaN",
    "inf",
    "1e3",
    "90",
    "10m",
    "1h30m",
    "2G",
    "nofile=10",
    "nofile=1:2",
    "core=0",
    "bogus=1",
    "TOKEN=h.example",
    "GH=a,b",
    "fd:3",
    "default",
    "é",
    " spaced ",
    "PATH",
    "X=1",
    "=",
    "-v",
    "--help",
];

/// Tokens no option reads: clap's own, misspellings, clusters.
const JUNK: &[&str] = &[
    "-",
    "--",
    "-h",
    "--help",
    "-V",
    "--version",
    "--polcy",
    "--POLICY",
    "---policy",
    "-vv",
    "-v=1",
    "-vx",
    "--=x",
    "-",
    "--allow",
    "--no-such",
];

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(VALUES).prop_map(String::from),
        "[a-z0-9=:/.,+-]{0,6}",
    ]
}

/// The valid value of option `i` (a stand-in for a flag).
fn valid_value_of(i: usize) -> &'static str {
    match OPTIONS[i].takes {
        Takes::Flag(_) | Takes::Count(_) => "x",
        Takes::Once(_) | Takes::Many(_) => valid_value(OPTIONS[i].long),
    }
}

/// Values close to `valid` that a parser might take too readily.
fn near_misses(valid: &str) -> Vec<String> {
    vec![
        valid.to_uppercase(),
        format!("{}{}", valid[..1].to_uppercase(), &valid[1..]),
        format!("+{valid}"),
        format!("-{valid}"),
        format!("{valid}x"),
        format!(" {valid}"),
        valid[..valid.len() / 2].to_string(),
        valid.replace('-', "_"),
        valid.replace('_', "-"),
    ]
}

/// A value for option `i`: mostly its valid one when `clean`, else a near miss of it, or any.
fn value_for(i: usize, clean: bool) -> impl Strategy<Value = String> {
    let valid = valid_value_of(i);
    let valid_weight = if clean { 8 } else { 1 };
    prop_oneof![
        valid_weight => Just(valid.to_string()),
        1 => proptest::sample::select(near_misses(valid)),
        1 => value(),
    ]
}

/// One of the options (mostly one of `focus`, so that repeats are frequent), written as users
/// do when `clean`, else in any of the ways clap or a user might.
fn option(focus: Vec<usize>, clean: bool) -> impl Strategy<Value = Vec<String>> {
    let index = prop_oneof![3 => proptest::sample::select(focus), 1 => 0..OPTIONS.len()];
    index
        .prop_flat_map(move |i| (Just(i), 0..10u8, value_for(i, clean), 1..6usize))
        .prop_map(move |(i, form, v, cut)| {
            let o = &OPTIONS[i];
            let long = format!("--{}", o.long);
            let flag = matches!(o.takes, Takes::Flag(_) | Takes::Count(_));
            let form = match (clean && form < 8, flag) {
                (true, true) => 2 + form % 2,
                (true, false) => form % 2,
                (false, _) => form % 5,
            };
            match form {
                0 => vec![long, v],
                1 => vec![format!("{long}={v}")],
                2 => vec![long],
                3 => vec![o.short.map_or(long, |c| format!("-{c}"))],
                // An abbreviation: clap does not infer long names.
                _ => vec![format!("--{}", &o.long[..cut.min(o.long.len())])],
            }
        })
}

fn token(focus: Vec<usize>, clean: bool) -> impl Strategy<Value = Vec<String>> {
    let junk = if clean { 1 } else { 8 };
    prop_oneof![
        64 => option(focus, clean),
        junk => proptest::sample::select(JUNK).prop_map(|j| vec![j.to_string()]),
        junk => "-{1,2}[a-zA-Z-]{1,8}(=[a-z]{0,3})?".prop_map(|j| vec![j]),
        junk => value().prop_map(|v| vec![v]),
    ]
}

/// A `whole-process` line: options, perhaps `--`, PROGRAM and its arguments (which may look
/// like options), or not. Half the lines are mostly as users write them (one odd word makes
/// them refused), half are noisy.
fn whole_process_line() -> impl Strategy<Value = Vec<String>> {
    (
        proptest::collection::vec(0..OPTIONS.len(), 1..3),
        any::<bool>(),
    )
        .prop_flat_map(|(focus, clean)| {
            let program = if clean {
                prop_oneof![6 => Just("id".to_string()), 1 => value()].boxed()
            } else {
                value().boxed()
            };
            (
                proptest::collection::vec(token(focus.clone(), clean), 0..8),
                any::<bool>(),
                proptest::option::weighted(0.9, program),
                proptest::collection::vec(token(focus, false), 0..4),
            )
        })
        .prop_map(|(options, dash_dash, program, rest)| {
            let mut line: Vec<String> = options.into_iter().flatten().collect();
            if dash_dash {
                line.push("--".into());
            }
            line.extend(program);
            line.extend(rest.into_iter().flatten());
            line
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn whatever_the_fast_path_accepts_clap_reads_the_same(line in whole_process_line()) {
        fast_agrees_with_clap(&line);
    }
}
