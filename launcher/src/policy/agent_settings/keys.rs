//! Every key of the two settings formats, where it may appear: an agent's settings file (its
//! `sandbox` object; the file's other keys belong to the agent) and Anthropic sandbox-runtime's
//! settings (`network` and `filesystem` at the top). A key outside these shapes stops the load
//! with its line. Which known keys are honoured, ignored or refused is `sandbox.rs`'s business.

use crate::policy::shape::{Field, Shape};

/// `{"sandbox": {...}, <the agent's own keys>}`.
pub static AGENT: Shape = Shape::Open(&[Field::new("sandbox", SANDBOX)]);

/// sandbox-runtime's settings file.
pub static RUNTIME: Shape = Shape::Fields(&[
    Field::new("network", NETWORK),
    Field::new("filesystem", FILESYSTEM),
    Field::new("credentials", CREDENTIALS),
    Field::value("ignoreViolations"),
    Field::value("enableWeakerNestedSandbox"),
    Field::value("enableWeakerNetworkIsolation"),
    Field::value("allowAppleEvents"),
    Field::value("allowPty"),
    Field::value("ripgrep"),
    Field::value("mandatoryDenySearchDepth"),
    Field::value("seccomp"),
    Field::value("bwrapPath"),
    Field::value("socatPath"),
    Field::value("javaAgentJarPath"),
    Field::value("windows"),
    Field::value("git"),
]);

const SANDBOX: Shape = Shape::Fields(&[
    Field::value("enabled"),
    Field::value("mode"),
    Field::new("filesystem", FILESYSTEM),
    Field::new("network", NETWORK),
    Field::new("environment", crate::policy::openshell::ENVIRONMENT),
    // sandbox-launch's own: hold denied requests for an answer (`--prompts`).
    Field::value("prompts"),
    Field::new("limits", crate::policy::runtime::LIMITS_JSON),
    Field::new("credentials", Shape::Named(&Shape::Value)),
    // What Claude Code's `sandbox` object adds (it drives sandbox-runtime with them).
    Field::value("excludedCommands"),
    Field::value("allowUnsandboxedCommands"),
    Field::value("autoAllowBashIfSandboxed"),
    Field::value("ignoreViolations"),
    Field::value("enableWeakerNestedSandbox"),
    Field::value("enableWeakerNetworkIsolation"),
]);

const FILESYSTEM: Shape = Shape::Fields(&[
    Field::value("allowWrite"),
    Field::value("denyWrite"),
    Field::value("denyRead"),
    Field::value("allowRead"),
    Field::value("allowGitConfig"),
    Field::value("disabled"),
    // sandbox-launch's own: mounts placed by name (`--bind` and the like).
    Field::new("mounts", Shape::List(&crate::policy::mounts::ENTRY_CAMEL)),
]);

const NETWORK: Shape = Shape::Fields(&[
    Field::value("allowedDomains"),
    Field::value("deniedDomains"),
    Field::value("allowUnixSockets"),
    // sandbox-launch's own: none | restricted | full.
    Field::value("mode"),
    Field::value("deniedDomainReasons"),
    Field::value("strictAllowlist"),
    Field::value("allowAllDomains"),
    Field::value("allowAllUnixSockets"),
    Field::value("allowLocalBinding"),
    Field::value("allowMachLookup"),
    Field::value("httpProxyDualStack"),
    Field::value("httpProxyPort"),
    Field::value("socksProxyPort"),
    Field::value("mitmProxy"),
    Field::value("filterRequest"),
    Field::value("tlsTerminate"),
    Field::value("parentProxy"),
]);

const CREDENTIALS: Shape = Shape::Fields(&[
    Field::new(
        "files",
        Shape::List(&Shape::Fields(&[
            Field::value("path"),
            Field::value("mode"),
            Field::value("extract"),
            Field::value("onExtractNoMatch"),
            Field::value("decode"),
            Field::value("maskClaims"),
            Field::value("maskDuplicates"),
            Field::value("injectHosts"),
        ])),
    ),
    Field::value("envVars"),
    Field::value("allowPlaintextInject"),
    Field::value("awsPairs"),
    Field::value("sigv4"),
]);
