//! seccomp filters as data: seccompiler JSON files under `policies/`, embedded at build time.

/// The embedded policies, by name.
pub const POLICIES: &[(&str, &str)] = &[("default", include_str!("../policies/default.json"))];

/// The JSON of the embedded policy called `name`.
pub fn get(name: &str) -> Option<&'static str> {
    POLICIES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, json)| *json)
}
