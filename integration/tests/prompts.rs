//! Prompts (issue 12): a sandbox with `--prompts` runs curl against a server on the host's
//! 127.0.0.1 (named `registry.pkg.test` through `--resolve`), and a scripted client answers
//! with `sandbox-launch prompt NAME --answer …`. Judged on what the server received and what
//! the program got; the user's settings live in a temporary `XDG_CONFIG_HOME` of each test.

use std::path::Path;
use std::time::Duration;

use integration::live::{ctl, listed, wait_for_file, Running};
use integration::net::HostServer;
use integration::{explain, is_root, stdout, Caller, TempDir, CALLERS};
use serde_json::Value;

const HOST: &str = "registry.pkg.test";

/// `curl` of `http://registry.pkg.test:PORT/PATH` for each path, one after the other, each
/// printing `CODE PATH MILLISECONDS`, then `done`.
fn curl_loop(port: u16, paths: &[&str]) -> String {
    let mut s = String::new();
    for p in paths {
        s.push_str(&format!(
            "s=$(date +%s%N); c=$(curl -s -o /dev/null -w '%{{http_code}}' --max-time 60 http://{HOST}:{port}/{p}); \
             e=$(date +%s%N); echo \"$c /{p} $(( (e - s) / 1000000 ))\"\n"
        ));
    }
    s.push_str("echo done\n");
    s
}

/// The code and the milliseconds curl took for `path`.
fn result(out: &str, path: &str) -> (String, u64) {
    let line = out
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(path))
        .unwrap_or_else(|| panic!("no result for {path}: {out}"));
    let mut w = line.split(' ');
    let code = w.next().unwrap().to_string();
    let ms = w.nth(1).unwrap().parse().unwrap();
    (code, ms)
}

/// A sandbox with prompts, its user settings in `config`.
fn start(
    caller: Caller,
    work: &TempDir,
    config: &Path,
    name: &str,
    extra: &[&str],
    script: &str,
) -> Running {
    let resolve = format!("{HOST}:127.0.0.1");
    let mut opts = vec!["--resolve", resolve.as_str(), "--events", "events.jsonl"];
    opts.extend_from_slice(extra);
    Running::start_env(
        caller,
        &work.path,
        name,
        &opts,
        script,
        &[("XDG_CONFIG_HOME", Some(config))],
    )
}

/// `prompt NAME --answer ANSWER --timeout 30` as `caller`.
fn answer(caller: Caller, work: &TempDir, name: &str, answer: &str) -> std::process::Output {
    listed(caller, &work.path, name);
    ctl(
        caller,
        &work.path,
        &[
            "prompt",
            name,
            "--answer",
            answer,
            "--timeout",
            "30",
            "--json",
        ],
    )
}

fn events(work: &TempDir) -> Vec<Value> {
    integration::net::events(&work.join("events.jsonl"))
}

fn prompts_opened(work: &TempDir) -> Vec<Value> {
    events(work)
        .into_iter()
        .filter(|e| e["event"] == "prompt")
        .map(|e| e["prompt"].clone())
        .collect()
}

#[test]
fn allow_once_lets_the_waiting_request_through_and_the_next_asks_again() {
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("prompt-once");
        let config = TempDir::new("prompt-once-cfg");
        let script = curl_loop(server.port, &["one", "two", "three"]);
        let sb = start(caller, &work, &config.path, "once", &["--prompts"], &script);
        let a = answer(caller, &work, "once", "allow-once");
        assert!(a.status.success(), "{caller:?}: {}", explain(&a));
        let d = answer(caller, &work, "once", "deny");
        assert!(d.status.success(), "{caller:?}: {}", explain(&d));
        let t = answer(caller, &work, "once", "allow-once");
        assert!(t.status.success(), "{caller:?}: {}", explain(&t));
        let out = sb.finish(Duration::from_secs(60));
        let text = stdout(&out);
        assert_eq!(
            result(&text, "/one").0,
            "200",
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            result(&text, "/two").0,
            "403",
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            result(&text, "/three").0,
            "200",
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(server.saw("/one") && server.saw("/three") && !server.saw("/two"));
        // What the prompt showed: the host, the port, the program and its pid, the reason,
        // and what each answer does.
        let shown = prompts_opened(&work);
        assert_eq!(
            shown.len(),
            3,
            "{caller:?}: one prompt per request: {shown:?}"
        );
        let p = &shown[0];
        assert_eq!(p["host"], HOST, "{p}");
        assert_eq!(p["ports"][0], server.port, "{p}");
        assert!(
            p["program"]["exe"].as_str().unwrap().ends_with("/curl"),
            "{p}"
        );
        assert!(p["program"]["pid"].as_u64().unwrap() > 1, "{p}");
        assert_eq!(p["reason"], format!("no rule allows {HOST}"), "{p}");
        let offers: Vec<&str> = p["offers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["answer"].as_str().unwrap())
            .collect();
        assert_eq!(offers, ["allow-once", "allow-always", "deny"], "{p}");
        assert!(
            p["offers"][1]["does"]
                .as_str()
                .unwrap()
                .contains("`*.pkg.test`"),
            "{p}"
        );
        assert!(!config.join("sandbox-launch/settings.json").exists());
    }
}

#[test]
fn allow_always_writes_the_wildcard_and_holds_for_this_sandbox_and_the_next() {
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("prompt-always");
        let config = TempDir::new("prompt-always-cfg");
        let script = curl_loop(server.port, &["first", "second"]);
        let sb = start(
            caller,
            &work,
            &config.path,
            "always",
            &["--prompts"],
            &script,
        );
        let a = answer(caller, &work, "always", "allow-always");
        assert!(a.status.success(), "{caller:?}: {}", explain(&a));
        let out = sb.finish(Duration::from_secs(60));
        let text = stdout(&out);
        assert_eq!(
            result(&text, "/first").0,
            "200",
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            result(&text, "/second").0,
            "200",
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(server.saw("/second"));
        assert_eq!(
            prompts_opened(&work).len(),
            1,
            "the second request asked nobody"
        );
        let file = config.join("sandbox-launch/settings.json");
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(
            written["sandbox"]["network"]["allowedDomains"],
            serde_json::json!(["*.pkg.test"]),
            "{caller:?}"
        );

        // A new sandbox (no prompts) reads the rule from the user's settings. The server is on
        // loopback, which a wildcard never reaches (only a rule naming the host does), so the
        // request is refused for that reason, by that rule, not for want of a rule.
        let next_work = TempDir::new("prompt-always-next");
        let probe = format!("curl -s --max-time 10 http://{HOST}:{}/third", server.port);
        let next = start(caller, &next_work, &config.path, "next", &[], &probe);
        let out = next.finish(Duration::from_secs(30));
        let decided = events(&next_work)
            .into_iter()
            .find(|e| e["event"] == "network" && e["host"] == HOST)
            .unwrap_or_else(|| panic!("{caller:?}: no decision: {}", explain(&out)));
        let rule = decided["rule"].as_str().unwrap_or_default();
        assert!(
            rule.contains("*.pkg.test") && rule.contains(file.to_str().unwrap()),
            "{caller:?}: {decided}"
        );
        assert!(
            decided["reason"].as_str().unwrap().contains("loopback"),
            "{decided}"
        );
        // The twin: without the settings file, no rule allows it.
        let bare = TempDir::new("prompt-always-bare");
        let bare_work = TempDir::new("prompt-always-bare-work");
        let out = start(caller, &bare_work, &bare.path, "bare", &[], &probe)
            .finish(Duration::from_secs(30));
        let decided = events(&bare_work)
            .into_iter()
            .find(|e| e["event"] == "network" && e["host"] == HOST)
            .unwrap_or_else(|| panic!("{caller:?}: no decision: {}", explain(&out)));
        assert_eq!(
            decided["reason"],
            format!("no rule allows {HOST}"),
            "{decided}"
        );
        assert!(!server.saw("/third"));
    }
}

#[test]
fn allow_always_for_a_site_at_a_shared_hosting_service_names_that_site_only() {
    // `*.github.io` for one site would allow every GitHub Pages site, an attacker's included,
    // in every later sandbox: the site's own name is written.
    let server = HostServer::start();
    let site = "my-docs.github.io";
    for caller in CALLERS {
        let work = TempDir::new("prompt-hosted");
        let config = TempDir::new("prompt-hosted-cfg");
        let script = format!(
            "curl -s -o /dev/null -w '%{{http_code}}\\n' --max-time 60 http://{site}:{}/hosted",
            server.port
        );
        let resolve = format!("{site}:127.0.0.1");
        let sb = Running::start_env(
            caller,
            &work.path,
            "hosted",
            &[
                "--prompts",
                "--resolve",
                &resolve,
                "--events",
                "events.jsonl",
            ],
            &script,
            &[("XDG_CONFIG_HOME", Some(&config.path))],
        );
        let a = answer(caller, &work, "hosted", "allow-always");
        assert!(a.status.success(), "{caller:?}: {}", explain(&a));
        let out = sb.finish(Duration::from_secs(60));
        assert!(has_200(&out), "{caller:?}: {}", explain(&out));
        assert!(server.saw("/hosted"));
        let offered = prompts_opened(&work);
        let does = offered[0]["offers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["answer"] == "allow-always")
            .unwrap_or_else(|| panic!("{:?}", offered))["does"]
            .to_string();
        assert!(
            does.contains(&format!("add `{site}`")) && !does.contains("*.github.io"),
            "{caller:?}: {does}"
        );
        let file = config.join("sandbox-launch/settings.json");
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(
            written["sandbox"]["network"]["allowedDomains"],
            serde_json::json!([site]),
            "{caller:?}"
        );
    }
}

fn has_200(out: &std::process::Output) -> bool {
    stdout(out).lines().any(|l| l == "200")
}

#[test]
fn concurrent_requests_for_one_host_make_one_prompt() {
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("prompt-many");
        let config = TempDir::new("prompt-many-cfg");
        let p = server.port;
        let script = format!(
            "for i in 1 2 3; do curl -s -o /dev/null -w \"%{{http_code}} /many$i 0\\n\" --max-time 60 http://{HOST}:{p}/many$i & done; wait; echo done"
        );
        let sb = start(caller, &work, &config.path, "many", &["--prompts"], &script);
        // Until the three wait on the one prompt.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let row = listed(caller, &work.path, "many");
            if row["prompts"]["pending"] == 1 && row["prompts"]["waiting"] == 3 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{caller:?}: never 3 waiting"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let a = answer(caller, &work, "many", "allow-once");
        assert!(a.status.success(), "{caller:?}: {}", explain(&a));
        let out = sb.finish(Duration::from_secs(60));
        let text = stdout(&out);
        for i in 1..=3 {
            assert_eq!(
                result(&text, &format!("/many{i}")).0,
                "200",
                "{}",
                explain(&out)
            );
        }
        assert_eq!(prompts_opened(&work).len(), 1, "{caller:?}");
        let reply: Value = serde_json::from_slice(&a.stdout).unwrap();
        assert_eq!(reply["requests"], 3, "{reply}");
    }
}

#[test]
fn deny_and_timeout_refuse_and_non_interactive_refuses_at_once() {
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("prompt-deny");
        let config = TempDir::new("prompt-deny-cfg");
        // Asked and denied; unanswered until the timeout.
        let script = curl_loop(server.port, &["denied", "unanswered"]);
        let sb = start(
            caller,
            &work,
            &config.path,
            "deny",
            &["--prompts", "--prompt-timeout", "1.5"],
            &script,
        );
        let d = answer(caller, &work, "deny", "deny");
        assert!(d.status.success(), "{caller:?}: {}", explain(&d));
        let out = sb.finish(Duration::from_secs(60));
        let text = stdout(&out);
        assert_eq!(
            result(&text, "/denied").0,
            "403",
            "{caller:?}: {}",
            explain(&out)
        );
        let (code, ms) = result(&text, "/unanswered");
        assert_eq!(code, "403", "{caller:?}: {}", explain(&out));
        assert!(
            (1400..15_000).contains(&ms),
            "{caller:?}: denied after {ms} ms"
        );
        eprintln!("{caller:?}: an unanswered prompt (--prompt-timeout 1.5) denied after {ms} ms");
        assert!(!server.saw("/denied") && !server.saw("/unanswered"));

        // --non-interactive (even with --prompts), and no --prompts at all: denied at once.
        for (opts, path) in [
            (vec!["--prompts", "--non-interactive"], "noninteractive"),
            (vec![], "noprompts"),
        ] {
            let script = curl_loop(server.port, &[path]);
            let sb = start(caller, &work, &config.path, path, &opts, &script);
            let out = sb.finish(Duration::from_secs(30));
            let (code, ms) = result(&stdout(&out), &format!("/{path}"));
            assert_eq!(code, "403", "{caller:?}: {}", explain(&out));
            eprintln!("{caller:?} {opts:?}: denied in {ms} ms (curl's whole request)");
            assert!(ms < 1_000, "{caller:?} {opts:?}: took {ms} ms");
        }
    }
}

/// The organisation's deny list, in an `/etc/sandbox-launch/settings.json` that exists only in
/// a mount namespace of this test (an overlay on the host's /etc): the host's /etc is not
/// touched. Needs root (to mount).
#[test]
fn an_organization_deny_offers_no_allow_and_refuses_allow_always() {
    if !is_root() {
        eprintln!(
            "the organisation's files need root to be put in place; unit-tested in prompt::tests"
        );
        return;
    }
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("prompt-org");
        let config = TempDir::new("prompt-org-cfg");
        let overlay = TempDir::new("prompt-org-etc");
        let upper = overlay.join("upper");
        std::fs::create_dir_all(upper.join("sandbox-launch")).unwrap();
        std::fs::create_dir_all(overlay.join("work")).unwrap();
        std::fs::write(
            upper.join("sandbox-launch/settings.json"),
            format!("{{\"sandbox\": {{\"network\": {{\"deniedDomains\": [\"{HOST}\"]}}}}}}"),
        )
        .unwrap();
        // The user's own settings allow it: the org's deny still wins.
        std::fs::create_dir_all(config.join("sandbox-launch")).unwrap();
        std::fs::write(
            config.join("sandbox-launch/settings.json"),
            format!("{{\"sandbox\": {{\"network\": {{\"allowedDomains\": [\"{HOST}\"]}}}}}}"),
        )
        .unwrap();
        config.give_to_sandbox_user(&config.path);
        // The program stays until the test is done asking.
        let script = format!(
            "{}while [ ! -e go ]; do sleep 0.05; done",
            curl_loop(server.port, &["org"])
        );
        let mount = format!(
            "mount -t overlay overlay -o lowerdir=/etc,upperdir={},workdir={} /etc && exec \"$@\"",
            upper.display(),
            overlay.join("work").display()
        );
        let launcher = integration::launcher().to_str().unwrap().to_string();
        let resolve = format!("{HOST}:127.0.0.1");
        let mut inner: Vec<String> = Vec::new();
        if caller == Caller::Unprivileged {
            inner.extend(
                [
                    "setpriv",
                    "--reuid",
                    "65534",
                    "--regid",
                    "65534",
                    "--clear-groups",
                    "--",
                ]
                .map(String::from),
            );
        }
        inner.extend(
            [
                launcher.as_str(),
                "whole-process",
                "--name",
                "org",
                "--prompts",
                "--resolve",
                &resolve,
                "--events",
                "events.jsonl",
                "--",
                "/bin/sh",
                "-c",
                &script,
            ]
            .map(String::from),
        );
        let child = std::process::Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                &mount,
                "sh",
            ])
            .args(&inner)
            .current_dir(&work.path)
            .env("HOME", &work.path)
            .env("XDG_RUNTIME_DIR", integration::runtime_dir(caller))
            .env("XDG_CONFIG_HOME", &config.path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let sb = Running {
            child,
            name: "org".into(),
        };
        wait_for_file(&work.join("events.jsonl"));
        let a = answer(caller, &work, "org", "allow-always");
        std::fs::write(work.join("go"), "").unwrap();
        assert!(!a.status.success(), "{caller:?}: {}", explain(&a));
        assert!(
            integration::stderr(&a).contains("organization policy"),
            "{caller:?}: {}",
            explain(&a)
        );
        let out = sb.finish(Duration::from_secs(30));
        let (code, ms) = result(&stdout(&out), "/org");
        assert_eq!(code, "403", "{caller:?}: {}", explain(&out));
        assert!(ms < 2_000, "{caller:?}: an org deny is not held ({ms} ms)");
        assert!(!server.saw("/org"));
        let shown = prompts_opened(&work);
        let p = shown
            .first()
            .unwrap_or_else(|| panic!("{caller:?}: no prompt"));
        assert_eq!(p["organization"], true, "{p}");
        assert_eq!(p["offers"].as_array().unwrap().len(), 1, "{p}");
        assert_eq!(p["offers"][0]["answer"], "deny", "{p}");
        assert!(
            p["denied_by"][0]
                .as_str()
                .unwrap()
                .contains("(organization policy)"),
            "{p}"
        );
    }
}

#[test]
fn remove_from_deny_list_edits_the_users_settings_and_keeps_their_comments() {
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("prompt-undeny");
        let config = TempDir::new("prompt-undeny-cfg");
        let file = config.join("sandbox-launch/settings.json");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(
            &file,
            format!(
                "{{\n  // mine\n  \"sandbox\": {{\n    \"network\": {{\n      \"allowedDomains\": [\"{HOST}\"],\n      \"deniedDomains\": [\n        \"{HOST}\", // for now\n        \"evil.test\"\n      ]\n    }}\n  }}\n}}\n"
            ),
        )
        .unwrap();
        config.give_to_sandbox_user(&config.path);
        let script = curl_loop(server.port, &["undenied", "again"]);
        let sb = start(
            caller,
            &work,
            &config.path,
            "undeny",
            &["--prompts"],
            &script,
        );
        let a = answer(caller, &work, "undeny", "remove-from-deny-list");
        assert!(a.status.success(), "{caller:?}: {}", explain(&a));
        let out = sb.finish(Duration::from_secs(60));
        let text = stdout(&out);
        assert_eq!(
            result(&text, "/undenied").0,
            "200",
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            result(&text, "/again").0,
            "200",
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(prompts_opened(&work).len(), 1, "{caller:?}");
        let p = &prompts_opened(&work)[0];
        let offers: Vec<&str> = p["offers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["answer"].as_str().unwrap())
            .collect();
        assert_eq!(
            offers,
            ["allow-once", "remove-from-deny-list", "deny"],
            "{p}"
        );
        let after = std::fs::read_to_string(&file).unwrap();
        assert!(after.contains("// mine"), "{after}");
        assert!(after.contains("\"evil.test\""), "{after}");
        let denied = after.split("deniedDomains").nth(1).unwrap();
        assert!(!denied.contains(HOST), "{caller:?}: still denied: {after}");
    }
}
