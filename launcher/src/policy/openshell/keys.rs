//! Every key of the OpenShell policy format, where it may appear. A key outside this shape stops
//! the load (with its line); a key in it that sandbox-launch does not implement is refused by the
//! reader with a reason, so that nothing a policy says is silently dropped.

use crate::policy::shape::{Field, Shape};

pub static POLICY: Shape = Shape::Fields(&[
    Field::value("version"),
    Field::new("filesystem_policy", FILESYSTEM),
    Field::new("landlock", Shape::Fields(&[Field::value("compatibility")])),
    Field::new(
        "process",
        Shape::Fields(&[Field::value("run_as_user"), Field::value("run_as_group")]),
    ),
    Field::new("network_policies", Shape::Named(&NETWORK_RULE)),
    Field::new("environment", ENVIRONMENT),
    Field::new("limits", crate::policy::runtime::LIMITS_YAML),
    Field::new("credentials", Shape::Named(&Shape::Value)),
    // sandbox-launch's own: mounts placed by name (`--bind` and the like).
    Field::new("mounts", Shape::List(&crate::policy::mounts::ENTRY_SNAKE)),
    // OpenShell's request middlewares: known, refused (see `mod.rs`).
    Field::value("network_middlewares"),
]);

const FILESYSTEM: Shape = Shape::Fields(&[
    Field::value("include_workdir"),
    Field::value("read_only"),
    Field::value("read_write"),
]);

static NETWORK_RULE: Shape = Shape::Fields(&[
    Field::value("name"),
    Field::new("endpoints", Shape::List(&ENDPOINT)),
    Field::new(
        "binaries",
        Shape::List(&Shape::Fields(&[
            Field::value("path"),
            Field::value("harness"),
        ])),
    ),
]);

static ENDPOINT: Shape = Shape::Fields(&[
    Field::value("host"),
    Field::value("port"),
    Field::value("ports"),
    Field::value("protocol"),
    Field::value("tls"),
    Field::value("enforcement"),
    Field::value("access"),
    Field::new("rules", Shape::List(&ALLOW_RULE)),
    Field::new("deny_rules", Shape::List(&REQUEST)),
    Field::value("path"),
    Field::value("allow_encoded_slash"),
    // Known to OpenShell, not implemented here; refused unless left at their defaults.
    Field::value("allowed_ips"),
    Field::value("websocket_credential_rewrite"),
    Field::value("request_body_credential_rewrite"),
    Field::value("allow_uninspected_credentials"),
    Field::value("persisted_queries"),
    Field::value("graphql_persisted_queries"),
    Field::value("graphql_max_body_bytes"),
    Field::value("credential_signing"),
    Field::value("signing_service"),
    Field::value("signing_region"),
    Field::value("credential_binding"),
    Field::value("json_rpc"),
    Field::value("mcp"),
]);

static ALLOW_RULE: Shape = Shape::Fields(&[Field::new("allow", REQUEST)]);

/// What an `allow` or a `deny_rules` entry may say about a request.
const REQUEST: Shape = Shape::Fields(&[
    Field::value("method"),
    Field::value("path"),
    Field::new("query", Shape::Named(&QUERY_MATCHER)),
    // GraphQL, SQL, JSON-RPC and MCP selectors: refused with their protocols.
    Field::value("command"),
    Field::value("operation_type"),
    Field::value("operation_name"),
    Field::value("fields"),
    Field::value("tool"),
    Field::value("params"),
]);

/// `"glob"` or `{any: [globs]}`.
static QUERY_MATCHER: Shape = Shape::Fields(&[Field::value("any")]);

/// `environment` (read by `policy::runtime`).
pub const ENVIRONMENT: Shape = Shape::Fields(&[
    Field::value("pass"),
    Field::value("set"),
    Field::value("all"),
]);
