use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use super::filesystem::Violation;
use super::offer::Answer;
use super::Prompts;
use crate::cli::{Cli, Command};
use crate::policy::model::{Source, Sourced};
use crate::proxy::decide::{Channel, Decider, Verdict};
use crate::proxy::events::EventSink;
use crate::proxy::matcher::Host;
use crate::proxy::resolve::Resolver;
use crate::proxy::testing::allowing;
use crate::proxy::Proxy;
use crate::reload::cell::DeciderCell;
use crate::reload::Reloader;

/// A proxy (not listening) with prompts, its rules allowing nothing and the organisation
/// denying `blocked.test`.
fn prompting(timeout: Duration) -> (Proxy, Arc<Prompts>) {
    prompting_at(
        timeout,
        "/nonexistent/sandbox-launch/settings.json".into(),
        Vec::new(),
    )
}

/// The same, with the user's settings at `settings` and these `denyWrite` entries.
fn prompting_at(
    timeout: Duration,
    settings: std::path::PathBuf,
    deny_write: Vec<Sourced<std::path::PathBuf>>,
) -> (Proxy, Arc<Prompts>) {
    let Command::Check { sandbox: args } = Cli::try_parse_from(["sandbox-launch", "check"])
        .unwrap()
        .command
    else {
        unreachable!()
    };
    let mut net = allowing(&[]);
    net.denied_domains.push(Sourced::new(
        "blocked.test".into(),
        Source::Org("/etc/sandbox-launch/settings.json".into()),
    ));
    let cell = DeciderCell::with_source(Decider::from_policy(&net).unwrap(), net);
    let events = Arc::new(EventSink::none());
    let reloader =
        Arc::new(Reloader::new(&args, cell.clone(), events.clone(), false, None).unwrap());
    let prompts = Arc::new(
        Prompts::new(timeout, settings, "/".into(), "/".into(), events, reloader)
            .with_deny_write(deny_write),
    );
    let mut proxy = Proxy::new(
        Decider::default(),
        Resolver::offline(vec![]),
        EventSink::none(),
    );
    proxy.decider = cell;
    proxy.prompts = Some(prompts.clone());
    (proxy, prompts)
}

async fn ask(proxy: &Proxy, host: &str) -> crate::proxy::decide::Decision {
    let rules = proxy.decider.current();
    let d = rules.decide(&Host::parse(host).unwrap(), 443, None, Channel::Tunnel);
    proxy
        .admit(rules, d, None, Channel::Tunnel, "connect")
        .await
        .1
}

#[tokio::test]
async fn an_organization_deny_is_refused_at_once_and_no_answer_allows_it() {
    let (proxy, prompts) = prompting(Duration::from_secs(30));
    let t0 = Instant::now();
    let d = ask(&proxy, "blocked.test").await;
    assert!(t0.elapsed() < Duration::from_secs(1), "not held");
    assert_eq!(d.verdict, Verdict::Deny);
    assert!(d.reason.contains("organization policy"), "{}", d.reason);
    let (open, _) = prompts.subscribe();
    assert_eq!(open[0]["organization"], true);
    assert_eq!(open[0]["offers"].as_array().unwrap().len(), 1);
    for a in [
        Answer::AllowAlways,
        Answer::AllowOnce,
        Answer::RemoveFromDenyList,
    ] {
        let e = prompts.answer(None, a, "test").unwrap_err();
        assert!(e.contains("organization policy"), "{e}");
    }
    prompts.answer(None, Answer::Deny, "test").unwrap();
    assert_eq!(prompts.pending(), (0, 0));
}

#[tokio::test]
async fn a_held_request_goes_through_on_allow_once_and_is_denied_at_the_timeout() {
    let (proxy, prompts) = prompting(Duration::from_millis(300));
    let proxy = Arc::new(proxy);
    let p = proxy.clone();
    let held = tokio::spawn(async move { ask(&p, "a.example.test").await });
    while prompts.pending().1 == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let done = prompts.answer(None, Answer::AllowOnce, "test").unwrap();
    assert_eq!(done["requests"], 1);
    let d = held.await.unwrap();
    assert_eq!(d.verdict, Verdict::Allow);
    assert!(d.explicit, "a person named the host");
    assert!(super::allowed_by_answer(&d));
    // Nothing remembered: the next one asks, and times out.
    let t0 = Instant::now();
    let d = ask(&proxy, "a.example.test").await;
    assert_eq!(d.verdict, Verdict::Deny);
    assert!(d.reason.contains("no answer"), "{}", d.reason);
    assert!(t0.elapsed() >= Duration::from_millis(290));
    assert_eq!(prompts.pending(), (0, 0));
}

fn violation(path: &str) -> Violation {
    Violation {
        path: path.into(),
        operation: "create".into(),
        pid: 7,
        exe: Some("/usr/bin/touch".into()),
        reason: "read-only in the sandbox: outside the writable trees".into(),
    }
}

#[tokio::test]
async fn a_failed_write_asks_once_per_directory_and_allow_always_writes_allow_write() {
    let dir = std::env::temp_dir().join(format!("sl-fs-prompt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let settings = dir.join("sandbox-launch/settings.json");
    let (_proxy, prompts) = prompting_at(Duration::from_secs(30), settings.clone(), Vec::new());
    prompts.filesystem(violation("/srv/data/a"));
    prompts.filesystem(violation("/srv/data/b"));
    let (open, _) = prompts.subscribe();
    assert_eq!(open.len(), 1, "one prompt per directory: {open:?}");
    assert_eq!(open[0]["kind"], "filesystem");
    assert_eq!(open[0]["directory"], "/srv/data");
    assert_eq!(open[0]["requests"], 2);
    assert_eq!(open[0]["program"]["exe"], "/usr/bin/touch");
    // Nothing waits on it: the write has failed already.
    assert_eq!(prompts.pending(), (1, 0));
    let e = prompts.answer(None, Answer::AllowOnce, "test").unwrap_err();
    assert!(e.contains("does not offer allow-once"), "{e}");
    let done = prompts.answer(None, Answer::AllowAlways, "test").unwrap();
    assert!(
        done["did"].as_str().unwrap().contains("next launch"),
        "{done}"
    );
    let frag =
        crate::policy::agent_settings::load(&settings, Source::User(settings.clone()), &dir, &dir)
            .unwrap();
    let written = format!("{frag:?}");
    assert!(written.contains("/srv/data"), "{written}");
    assert_eq!(prompts.pending(), (0, 0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_directory_the_organization_keeps_read_only_is_offered_nothing_but_deny() {
    let org = Source::Org("/etc/sandbox-launch/settings.json".into());
    let (_proxy, prompts) = prompting_at(
        Duration::from_secs(30),
        "/nonexistent/sandbox-launch/settings.json".into(),
        vec![Sourced::new("/srv/locked".into(), org)],
    );
    prompts.filesystem(violation("/srv/locked/sub/x"));
    let (open, _) = prompts.subscribe();
    assert_eq!(open[0]["organization"], true, "{}", open[0]);
    assert_eq!(open[0]["offers"].as_array().unwrap().len(), 1);
    let e = prompts
        .answer(None, Answer::AllowAlways, "test")
        .unwrap_err();
    assert!(e.contains("organization policy"), "{e}");
    prompts.answer(None, Answer::Deny, "test").unwrap();
    assert_eq!(prompts.pending(), (0, 0));
}
