//! Filesystem violations (issue 12): a write outside the writable trees that fails, and one
//! the create guard refuses, are `event: filesystem` records naming the path, the operation,
//! the process and its executable; with `--prompts`, *allow always* for a failed write adds its
//! directory to `allowWrite` in the user's settings — for the next launch, not this one.
//! The directory outside the writable trees is one the sandbox can see (under
//! /var/cache/sandbox-launch-tests/runs; /tmp is private inside), owned by the sandbox's user,
//! so that only the sandbox keeps it read-only. Judged on the host.

use std::time::Duration;

use integration::agents::test_dir;
use integration::live::{ctl, listed, wait_for_file, Running};
use integration::{explain, stdout, TempDir, CALLERS};
use serde_json::Value;

fn filesystem_events(work: &TempDir) -> Vec<Value> {
    integration::net::events(&work.join("events.jsonl"))
        .into_iter()
        .filter(|e| e["event"] == "filesystem")
        .collect()
}

fn field<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
}

#[test]
fn failed_and_refused_writes_are_events_with_path_operation_pid_and_exe() {
    for caller in CALLERS {
        let work = TempDir::new("fsev");
        let other = test_dir("fsev-other");
        let o = other.path.display();
        let script = format!(
            "touch {o}/made 2>/dev/null; echo touch=$?\n\
             mkdir {o}/newdir 2>/dev/null; echo mkdir=$?\n\
             touch .envrc 2>/dev/null; echo envrc=$?\n\
             touch allowed; echo allowed=$?\n"
        );
        let sb = Running::start(
            caller,
            &work.path,
            "fsev",
            &["--events", "events.jsonl"],
            &script,
        );
        let out = sb.finish(Duration::from_secs(60));
        let text = stdout(&out);
        assert_eq!(
            field(&text, "touch"),
            Some("1"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(field(&text, "mkdir"), Some("1"), "{}", explain(&out));
        assert_eq!(field(&text, "envrc"), Some("1"), "{}", explain(&out));
        assert_eq!(field(&text, "allowed"), Some("0"), "{}", explain(&out));
        // On the host: nothing outside the writable trees, nothing at the surface; the allowed
        // twin is there.
        assert!(!other.join("made").exists() && !other.join("newdir").exists());
        assert!(!work.join(".envrc").exists());
        assert!(work.join("allowed").exists());

        let events = filesystem_events(&work);
        let at = |p: &std::path::Path| {
            events
                .iter()
                .find(|e| e["path"] == p.to_str().unwrap())
                .unwrap_or_else(|| panic!("{caller:?}: no event for {}: {events:?}", p.display()))
                .clone()
        };
        let made = at(&other.join("made"));
        assert_eq!(made["operation"], "create", "{made}");
        assert_eq!(made["decision"], "failed", "{made}");
        assert!(
            made["errno"] == "EACCES" || made["errno"] == "EROFS",
            "{made}"
        );
        assert!(
            made["reason"]
                .as_str()
                .unwrap()
                .contains("outside the writable trees"),
            "{made}"
        );
        assert!(made["exe"].as_str().unwrap().ends_with("/touch"), "{made}");
        assert!(made["pid"].as_i64().unwrap() > 1, "{made}");
        let newdir = at(&other.join("newdir"));
        assert_eq!(newdir["operation"], "create a directory", "{newdir}");
        assert!(
            newdir["exe"].as_str().unwrap().ends_with("/mkdir"),
            "{newdir}"
        );
        assert_ne!(newdir["pid"], made["pid"], "two processes");
        let envrc = at(&work.join(".envrc"));
        assert_eq!(envrc["decision"], "refused", "{envrc}");
        assert!(
            envrc["exe"].as_str().unwrap().ends_with("/touch"),
            "{envrc}"
        );
        assert_eq!(envrc["operation"], "create", "{envrc}");
        assert!(
            events
                .iter()
                .all(|e| e["path"] != work.join("allowed").to_str().unwrap()),
            "an allowed write is no violation: {events:?}"
        );
    }
}

#[test]
fn allow_always_for_a_failed_write_adds_its_directory_to_allow_write_for_the_next_launch() {
    for caller in CALLERS {
        let work = TempDir::new("fsprompt");
        let config = TempDir::new("fsprompt-cfg");
        let other = test_dir("fsprompt-other");
        let o = other.path.display();
        let script = format!(
            "touch {o}/first 2>/dev/null; echo first=$?\n\
             while [ ! -e answered ]; do sleep 0.05; done\n\
             touch {o}/again 2>/dev/null; echo again=$?\n"
        );
        let sb = Running::start_env(
            caller,
            &work.path,
            "fsprompt",
            &["--prompts", "--events", "events.jsonl"],
            &script,
            &[("XDG_CONFIG_HOME", Some(&config.path))],
        );
        listed(caller, &work.path, "fsprompt");
        let a = ctl(
            caller,
            &work.path,
            &[
                "prompt",
                "fsprompt",
                "--answer",
                "allow-always",
                "--timeout",
                "30",
                "--json",
            ],
        );
        assert!(a.status.success(), "{caller:?}: {}", explain(&a));
        let reply: Value = serde_json::from_slice(&a.stdout).unwrap();
        assert_eq!(reply["directory"], o.to_string(), "{reply}");
        assert!(
            reply["did"]
                .as_str()
                .unwrap()
                .contains("from the next launch on"),
            "{reply}"
        );
        // `ps` counts the violation.
        let row = listed(caller, &work.path, "fsprompt");
        assert_eq!(row["denied"]["writes"], 1, "{caller:?}: {row}");
        std::fs::write(work.join("answered"), "").unwrap();
        let out = sb.finish(Duration::from_secs(60));
        let text = stdout(&out);
        assert_eq!(
            field(&text, "first"),
            Some("1"),
            "{caller:?}: {}",
            explain(&out)
        );
        // This sandbox is unchanged (Landlock cannot widen it), as the prompt said.
        assert_eq!(field(&text, "again"), Some("1"), "{}", explain(&out));
        assert!(!other.join("first").exists() && !other.join("again").exists());
        let prompt = integration::net::events(&work.join("events.jsonl"))
            .into_iter()
            .find(|e| e["event"] == "prompt")
            .expect("a prompt event")["prompt"]
            .clone();
        assert_eq!(prompt["kind"], "filesystem", "{prompt}");
        assert_eq!(prompt["operation"], "create", "{prompt}");
        let always = prompt["offers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["answer"] == "allow-always")
            .unwrap_or_else(|| panic!("{prompt}"));
        let does = always["does"].as_str().unwrap();
        assert!(
            does.contains("from the next launch on") && does.contains("not in this one"),
            "{does}"
        );
        let file = config.join("sandbox-launch/settings.json");
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(
            written["sandbox"]["filesystem"]["allowWrite"],
            serde_json::json!([o.to_string()]),
            "{caller:?}: {written}"
        );

        // The next launch, with the same user settings, may write there.
        let next_work = TempDir::new("fsprompt-next");
        let next = Running::start_env(
            caller,
            &next_work.path,
            "fsprompt-next",
            &[],
            &format!("touch {o}/next; echo next=$?"),
            &[("XDG_CONFIG_HOME", Some(&config.path))],
        );
        let out = next.finish(Duration::from_secs(60));
        assert_eq!(
            field(&stdout(&out), "next"),
            Some("0"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            other.join("next").exists(),
            "{caller:?}: not written on the host"
        );
        wait_for_file(&other.join("next"));
    }
}

#[test]
fn a_script_answering_allow_once_passes_a_filesystem_prompt_by_for_the_network_one() {
    let server = integration::net::HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("fsonce");
        let config = TempDir::new("fsonce-cfg");
        let other = test_dir("fsonce-other");
        // The failed write comes first: its prompt is open when the request's opens.
        let script = format!(
            "touch {}/x 2>/dev/null; echo touch=$?\n\
             while [ ! -e go ]; do sleep 0.05; done\n\
             echo code=$(curl -s -o /dev/null -w '%{{http_code}}' --max-time 30 http://registry.pkg.test:{}/once)\n",
            other.path.display(),
            server.port
        );
        let sb = Running::start_env(
            caller,
            &work.path,
            "fsonce",
            &[
                "--prompts",
                "--resolve",
                "registry.pkg.test:127.0.0.1",
                "--events",
                "events.jsonl",
            ],
            &script,
            &[("XDG_CONFIG_HOME", Some(&config.path))],
        );
        // The filesystem prompt is open before the request is made.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while listed(caller, &work.path, "fsonce")["prompts"]["pending"] != 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "{caller:?}: no prompt"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::fs::write(work.join("go"), "").unwrap();
        let a = ctl(
            caller,
            &work.path,
            &[
                "prompt",
                "fsonce",
                "--answer",
                "allow-once",
                "--timeout",
                "30",
                "--json",
            ],
        );
        assert!(a.status.success(), "{caller:?}: {}", explain(&a));
        let reply: Value = serde_json::from_slice(&a.stdout).unwrap();
        assert_eq!(reply["host"], "registry.pkg.test", "{reply}");
        let out = sb.finish(Duration::from_secs(60));
        let text = stdout(&out);
        assert_eq!(
            field(&text, "touch"),
            Some("1"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            field(&text, "code"),
            Some("200"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(server.saw("/once"));
        let kinds: Vec<Value> = integration::net::events(&work.join("events.jsonl"))
            .into_iter()
            .filter(|e| e["event"] == "prompt")
            .map(|e| e["prompt"]["kind"].clone())
            .collect();
        assert_eq!(kinds, ["filesystem", "network"], "{caller:?}");
        // Nothing was written to the user's settings.
        assert!(!config.join("sandbox-launch/settings.json").exists());
    }
}

#[test]
fn a_prompt_shows_what_the_program_named_without_its_control_characters() {
    for caller in CALLERS {
        let work = TempDir::new("fsspoof");
        let config = TempDir::new("fsspoof-cfg");
        let other = test_dir("fsspoof-other");
        let o = other.path.display();
        // A file name that would clear the operator's screen, retitle the terminal and draw a
        // prompt of its own under the real one.
        let script = format!(
            "touch \"{o}/$(printf 'x\\033[2J\\033]0;owned\\007\\r\\nprompt #99: npm wants safe.test')\" 2>/dev/null; echo touch=$?\n\
             while [ ! -e answered ]; do sleep 0.05; done\n"
        );
        let sb = Running::start_env(
            caller,
            &work.path,
            "fsspoof",
            &["--prompts", "--events", "events.jsonl"],
            &script,
            &[("XDG_CONFIG_HOME", Some(&config.path))],
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while listed(caller, &work.path, "fsspoof")["prompts"]["pending"] != 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "{caller:?}: no prompt: {}",
                listed(caller, &work.path, "fsspoof")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // What the person answering sees (input ends at once: nothing is answered).
        let shown = integration::command(caller, &work.path, &["prompt", "fsspoof"])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run sandbox-launch prompt");
        std::fs::write(work.join("answered"), "").unwrap();
        let out = sb.finish(Duration::from_secs(60));
        assert_eq!(
            field(&stdout(&out), "touch"),
            Some("1"),
            "{}",
            explain(&out)
        );
        let text = stdout(&shown);
        // The twin: the prompt is shown, naming the path.
        assert!(
            text.contains("could not create") && text.contains("prompt #99"),
            "{caller:?}: {}",
            explain(&shown)
        );
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{caller:?}: {text:?}"
        );
        assert!(
            !text.lines().any(|l| l.starts_with("prompt #99")),
            "{caller:?}: {text}"
        );
    }
}
