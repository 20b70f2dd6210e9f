//! What a confinement around the launcher refuses — a container runtime's seccomp profile, its
//! masked `/proc`, a security module — and the flags that lift it. One text per cause, used by
//! the shim's errors, the launcher's and `doctor`'s, so that a refused launch and `doctor` name
//! the same fix (README: Containers).

/// The podman/docker flags of the container recipe.
pub const CONTAINER_FLAGS: &str =
    "--security-opt seccomp=unconfined --security-opt systempaths=unconfined";

/// Whether this process runs under a seccomp filter it did not install (the shim's own are
/// installed after everything that could be refused).
pub fn under_seccomp() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Seccomp:").map(|v| v.trim() == "2"))
        })
        .unwrap_or(false)
}

/// `what` (a syscall the sandbox needs in namespaces it owns) failed with EPERM: the kernel
/// allows it there, so something around this process refused it.
pub fn refused(what: &str) -> String {
    if under_seccomp() {
        format!(
            "{what} is refused by a seccomp filter around this process (a container's default \
             profile; the sandbox installs its own filter later): run the container with \
             {CONTAINER_FLAGS} (podman, docker), or with securityContext.seccompProfile.type: \
             Unconfined and procMount: Unmasked (Kubernetes); see README, Containers, and \
             `sandbox-launch doctor`"
        )
    } else {
        format!(
            "{what} is refused although the sandbox owns its namespaces: a security module \
             (AppArmor, SELinux) forbids it here; in a container add --security-opt \
             apparmor=unconfined (docker, podman) or securityContext.appArmorProfile.type: \
             Unconfined (Kubernetes); see README, Containers, and `sandbox-launch doctor`"
        )
    }
}

/// A fresh `/proc` was refused with EPERM (mounting as such works: the mounts before it did).
pub fn proc_refused() -> String {
    format!(
        "the kernel mounts a fresh /proc (the sandbox's PID namespace needs one) only where no \
         part of the existing /proc is covered, and container runtimes cover parts of it \
         (/proc/kcore, /proc/sys, ...): run the container with {CONTAINER_FLAGS} (podman, \
         docker; systempaths=unconfined is the one for /proc), or with \
         securityContext.procMount: Unmasked (Kubernetes); outside a container, unmount what \
         covers parts of /proc; see README, Containers, and `sandbox-launch doctor`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_text_names_the_flags_to_add() {
        for text in [refused("sethostname"), proc_refused()] {
            assert!(text.contains("README, Containers"), "{text}");
            assert!(text.contains("sandbox-launch doctor"), "{text}");
        }
        assert!(proc_refused().contains("systempaths=unconfined"));
        assert!(proc_refused().contains("procMount: Unmasked"));
    }
}
