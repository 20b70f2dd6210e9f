//! The policy formats, end to end: an OpenShell policy YAML makes everything outside its
//! allow-list disappear; an agent's settings JSON keeps the host readable with its denies.

use integration::*;

const SYSTEM: &str = "[/usr, /lib, /lib64, /bin, /sbin, /etc]";

#[test]
fn openshell_filesystem_policy_shows_only_what_it_lists() {
    for caller in CALLERS {
        let work = TempDir::new("openshell");
        let rw = work.mkdir("rw");
        let ro = work.mkdir("ro");
        work.write("ro/readme", "readable\n");
        let secret = TempDir::new("openshell-outside");
        secret.write("secret", "s3cret\n");
        let policy = work.write(
            "policy.yaml",
            &format!(
                "version: 1\nfilesystem_policy:\n  include_workdir: false\n  read_only: {SYSTEM_RO}\n  read_write: [{rw}]\n",
                SYSTEM_RO = SYSTEM.replace(']', &format!(", {}]", ro.display())),
                rw = rw.display()
            ),
        );
        let script = format!(
            r#"cd {rw}
echo inside > {rw}/w && echo rw-ok
cat {ro}/readme
echo x > {ro}/new 2>/dev/null || echo ro-refused
ls -d /root /home {secret} 2>/dev/null || echo others-absent
echo x > /etc/new 2>/dev/null || echo etc-refused
ls / | tr '\n' ' '; echo
"#,
            rw = rw.display(),
            ro = ro.display(),
            secret = secret.path.display()
        );
        let out = sh(
            caller,
            &rw,
            &["--policy", policy.to_str().unwrap()],
            &script,
        );
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{caller:?}: {}", explain(&out));
        for want in [
            "rw-ok",
            "readable",
            "ro-refused",
            "others-absent",
            "etc-refused",
        ] {
            assert!(text.contains(want), "{caller:?}: {want}: {}", explain(&out));
        }
        assert!(!text.contains("s3cret"));
        assert_eq!(std::fs::read_to_string(rw.join("w")).unwrap(), "inside\n");
        assert!(!ro.join("new").exists());
    }
}

#[test]
fn openshell_include_workdir_decides_whether_the_workdir_is_writable() {
    for caller in CALLERS {
        let work = TempDir::new("workdir");
        let policy_with = |include: bool| {
            work.write(
                &format!("p-{include}.yaml"),
                &format!(
                    "version: 1\nfilesystem_policy:\n  include_workdir: {include}\n  read_only: {SYSTEM}\n"
                ),
            )
        };
        let p = policy_with(true);
        let out = sh(
            caller,
            &work.path,
            &["--policy", p.to_str().unwrap()],
            "echo ok > here && cat here",
        );
        assert_eq!(stdout(&out).trim(), "ok", "{caller:?}: {}", explain(&out));
        let p = policy_with(false);
        let out = sh(
            caller,
            &work.path,
            &["--policy", p.to_str().unwrap()],
            "echo ok > here2 2>/dev/null && echo WROTE; true",
        );
        assert!(
            !stdout(&out).contains("WROTE"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!work.join("here2").exists());
    }
}

#[test]
fn agent_settings_json_with_comments_denies_and_allows() {
    for caller in CALLERS {
        let work = TempDir::new("settings");
        let extra = TempDir::new("settings-extra");
        let secret = work.write("secret.txt", "s3cret\n");
        work.write("public.txt", "public\n");
        let settings = work.write(
            "settings.json",
            &format!(
                r#"{{
  // the agent's settings; only `sandbox` matters here
  "model": "whatever",
  "sandbox": {{
    "filesystem": {{
      "denyRead": ["{secret}"],
      "allowWrite": ["{extra}"],
    }},
  }},
}}"#,
                secret = secret.display(),
                extra = extra.path.display()
            ),
        );
        let script = format!(
            "cat public.txt; cat secret.txt 2>/dev/null || echo secret-refused; echo x > {}/w && echo extra-ok",
            extra.path.display()
        );
        let out = sh(
            caller,
            &work.path,
            &["--settings", settings.to_str().unwrap()],
            &script,
        );
        let text = stdout(&out);
        assert!(text.contains("public"), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains("secret-refused") && !text.contains("s3cret"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(text.contains("extra-ok"), "{caller:?}: {}", explain(&out));
    }
}

#[test]
fn a_misspelt_deny_key_is_an_error_not_a_silent_allow() {
    let work = TempDir::new("misspelt");
    let settings = work.write(
        "settings.json",
        r#"{"sandbox": {"filesystem": {"denyReed": ["/etc/shadow"]}}}"#,
    );
    let out = sh(
        Caller::Invoker,
        &work.path,
        &["--settings", settings.to_str().unwrap()],
        "echo ran > marker",
    );
    assert_eq!(out.status.code(), Some(111), "{}", explain(&out));
    assert!(stderr(&out).contains("denyRead"), "{}", explain(&out));
    assert!(!work.join("marker").exists());
}

#[test]
fn check_prints_the_effective_policy_and_where_it_came_from() {
    let work = TempDir::new("check");
    let out = command(
        Caller::Invoker,
        &work.path,
        &[
            "check",
            "--deny-read",
            "/etc/shadow",
            "--allow-write",
            "/var/tmp",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let text = stdout(&out);
    assert!(
        text.contains("/etc/shadow") && text.contains("/var/tmp"),
        "{text}"
    );
    assert!(
        text.contains("command line") || text.contains("flag"),
        "{text}"
    );
}

/// Launches with `opts` must be refused (111) before the program runs, naming `names` on stderr.
fn refused_before_the_program_runs(caller: Caller, work: &TempDir, opts: &[&str], names: &[&str]) {
    let out = sh(caller, &work.path, opts, "echo ran > marker");
    assert_eq!(
        out.status.code(),
        Some(111),
        "{caller:?}: {}",
        explain(&out)
    );
    for n in names {
        assert!(
            stderr(&out).contains(n),
            "{caller:?}: {n}: {}",
            explain(&out)
        );
    }
    assert!(!work.join("marker").exists(), "{caller:?}: the program ran");
}

#[test]
fn a_misspelt_top_level_settings_key_refuses_the_launch() {
    for caller in CALLERS {
        let work = TempDir::new("sandbx");
        let settings = work.write(
            "settings.json",
            r#"{"sandbx": {"filesystem": {"denyRead": ["/etc/shadow"]}}}"#,
        );
        refused_before_the_program_runs(
            caller,
            &work,
            &["--settings", settings.to_str().unwrap()],
            &["`sandbx` looks like a misspelt `sandbox`"],
        );
        // Next to the right key, a misspelt twin would take its denies with it.
        let both = work.write(
            "both.json",
            r#"{"sandbox": {"network": {"allowedDomains": ["example.com"]}},
                "Sandbox": {"filesystem": {"denyRead": ["./secret"]}}}"#,
        );
        refused_before_the_program_runs(
            caller,
            &work,
            &["--settings", both.to_str().unwrap()],
            &["`Sandbox` looks like a misspelt `sandbox`"],
        );
        // The allowed twin: spelt right, the same file launches.
        let good = work.write(
            "good.json",
            r#"{"sandbox": {"filesystem": {"denyRead": ["/etc/shadow"]}}}"#,
        );
        let out = sh(
            caller,
            &work.path,
            &["--settings", good.to_str().unwrap()],
            "echo ran",
        );
        assert_eq!(stdout(&out).trim(), "ran", "{caller:?}: {}", explain(&out));
    }
}

#[test]
fn an_unknown_policy_key_refuses_the_launch_naming_key_and_line() {
    for caller in CALLERS {
        let work = TempDir::new("unknown-key");
        let policy = work.write(
            "policy.yaml",
            "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: api.test\n        port: 80\n        protocol: rest\n        access: read-only\n        deny_rule:\n          - {method: GET, path: /secret}\n    binaries: [{path: /usr/bin/curl}]\n",
        );
        refused_before_the_program_runs(
            caller,
            &work,
            &["--policy", policy.to_str().unwrap()],
            &[
                "network_policies.api.endpoints[0].deny_rule: unknown key (did you mean `deny_rules`?",
                "line 10",
            ],
        );
        let top = work.write("top.yaml", "version: 1\nnetwork_polices: {}\n");
        refused_before_the_program_runs(
            caller,
            &work,
            &["--policy", top.to_str().unwrap()],
            &["network_polices: unknown key", "line 2"],
        );
    }
}

#[test]
fn sandbox_runtime_settings_are_enforced() {
    for caller in CALLERS {
        let work = TempDir::new("srt");
        work.write("secret.txt", "s3cret\n");
        work.write("public.txt", "public\n");
        let out_dir = TempDir::new("srt-out");
        let settings = work.write(
            "srt.json",
            &format!(
                r#"{{
  "network": {{"allowedDomains": [], "deniedDomains": [], "allowLocalBinding": false}},
  "filesystem": {{
    "denyRead": ["{secret}"],
    "allowWrite": ["{out}"],
    "denyWrite": []
  }},
  "ignoreViolations": {{"*": ["/usr/bin"]}}
}}"#,
                secret = work.join("secret.txt").display(),
                out = out_dir.path.display()
            ),
        );
        let script = format!(
            "cat public.txt; cat secret.txt 2>/dev/null || echo secret-refused; echo x > {}/w && echo out-ok",
            out_dir.path.display()
        );
        let out = sh(
            caller,
            &work.path,
            &["--settings", settings.to_str().unwrap()],
            &script,
        );
        let text = stdout(&out);
        assert!(text.contains("public"), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains("secret-refused") && !text.contains("s3cret"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(text.contains("out-ok"), "{caller:?}: {}", explain(&out));
        // A setting that would widen the sandbox refuses the launch instead of being dropped.
        let wide = work.write(
            "wide.json",
            r#"{"network": {"allowedDomains": [], "deniedDomains": [], "allowAllUnixSockets": true},
 "filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []}}"#,
        );
        refused_before_the_program_runs(
            caller,
            &work,
            &["--settings", wide.to_str().unwrap()],
            &["network.allowAllUnixSockets: not supported"],
        );
    }
}
