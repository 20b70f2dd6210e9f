//! The release builds place the code a launch runs together, ahead of the rest (`.text.launch`,
//! from launcher/hot-code.ld, which launcher/build.rs gives them): each process of a launch
//! then faults fewer than half as many 64 KiB groups of code in. Checked on the two builds
//! users get (scripts/build.sh and `cargo install --path launcher`), and the script against the
//! code it names: functions renamed or gone since it was written match nothing.

use std::path::Path;

use integration::elf::{glob_matches, Elf};
use integration::{installed_launcher, static_launcher};

/// Functions every launch runs, by the end of their v0-mangled names (`shim::run::main`,
/// `sandbox_launch::sandbox::run`), and functions no launch runs (the doctor's, the worktrees').
const RUN_BY_EVERY_LAUNCH: &[&str] = &["4shim3run4main", "14sandbox_launch7sandbox3run"];
const RUN_BY_NO_LAUNCH: &[&str] = &[
    "14sandbox_launch6doctor5probe",
    "14sandbox_launch8worktree5apply9conflicts",
];

fn function<'a>(elf: &'a Elf, bin: &Path, ending: &str) -> &'a integration::elf::Symbol {
    elf.functions
        .iter()
        .find(|f| f.name.starts_with("_R") && f.name.ends_with(ending))
        .unwrap_or_else(|| {
            panic!(
                "{} has no v0-mangled function ending in {ending} (built without \
                 -C symbol-mangling-version=v0, or the function was renamed)",
                bin.display()
            )
        })
}

#[test]
fn the_launch_code_is_placed_together_in_both_release_builds() {
    for bin in [static_launcher(), installed_launcher()] {
        let elf = Elf::read(bin);
        let launch = elf.section(".text.launch").unwrap_or_else(|| {
            panic!(
                "{} has no .text.launch: launcher/hot-code.ld was not applied (launcher/build.rs)",
                bin.display()
            )
        });
        let text = elf.section(".text").expect(".text");
        assert!(
            launch.addr + launch.size <= text.addr,
            "the launch's code comes before the rest"
        );
        let inside = |f: &integration::elf::Symbol| {
            f.addr >= launch.addr && f.addr + f.size <= launch.addr + launch.size
        };
        for ending in RUN_BY_EVERY_LAUNCH {
            let f = function(&elf, bin, ending);
            assert!(
                inside(f),
                "{}: {} is not in .text.launch",
                bin.display(),
                f.name
            );
        }
        // The twin: what no launch runs stays out, so the section is not all of the code.
        for ending in RUN_BY_NO_LAUNCH {
            let f = function(&elf, bin, ending);
            assert!(
                !inside(f),
                "{}: {} is in .text.launch",
                bin.display(),
                f.name
            );
        }
        let code: u64 = launch.size + text.size;
        assert!(
            launch.size * 3 < code,
            "{}: .text.launch holds {} of {} bytes of code",
            bin.display(),
            launch.size,
            code
        );
    }
}

#[test]
fn the_hot_code_script_still_names_the_functions_of_the_build() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../launcher/hot-code.ld");
    let text = std::fs::read_to_string(&script).expect("read launcher/hot-code.ld");
    // `*(.text.NAME)`: a function by its name (archive members are named otherwise).
    let patterns: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("*(.text.")?.strip_suffix(')'))
        .collect();
    assert!(
        patterns.len() > 100,
        "launcher/hot-code.ld names {} functions",
        patterns.len()
    );
    let elf = Elf::read(static_launcher());
    let unmatched: Vec<&&str> = patterns
        .iter()
        .filter(|p| !elf.functions.iter().any(|f| glob_matches(p, &f.name)))
        .collect();
    // Renamed or removed functions match nothing, and their replacements are not placed:
    // launches get slower, never wrong. Past a tenth, write the script again.
    assert!(
        unmatched.len() * 10 <= patterns.len(),
        "{} of the {} functions launcher/hot-code.ld names are not in the build; run \
         `sudo scripts/hot-code.py` to write it again. The first of them: {:?}",
        unmatched.len(),
        patterns.len(),
        &unmatched[..unmatched.len().min(5)]
    );
}
