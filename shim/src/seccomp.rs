//! seccomp-bpf: compile a seccompiler JSON policy and install it.

use std::collections::HashMap;
use std::convert::TryInto;

use anyhow::{anyhow, Context, Result};
use seccompiler::BpfProgram;

use crate::spec::SeccompSpec;

pub fn compile(spec: &SeccompSpec) -> Result<BpfProgram> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| anyhow!("seccomp: unsupported architecture: {e:?}"))?;
    let mut filters: HashMap<String, BpfProgram> =
        seccompiler::compile_from_json(spec.json.as_bytes(), arch)
            .with_context(|| format!("seccomp policy '{}'", spec.name))?;
    filters.remove("main").ok_or_else(|| {
        anyhow!(
            "seccomp policy '{}' has no filter named \"main\"",
            spec.name
        )
    })
}

pub fn install(prog: &BpfProgram) -> Result<()> {
    seccompiler::apply_filter(prog).context("install the seccomp filter")
}
