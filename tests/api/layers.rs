//! The crates' layering, read from `cargo metadata`: each depends only on
//! those below it, and the layers under the server reach no HTTP server or
//! GraphQL-over-HTTP crate, so that the compiler keeps them apart.

use std::collections::BTreeMap;

use serde_json::Value;

/// The layers, lowest first.
const LAYERS: [&str; 4] = [
    "votegraph-domain",
    "votegraph-store",
    "votegraph-api",
    "votegraph",
];

/// What each layer must not depend on, and whether an optional dependency
/// is allowed (the domain's GraphQL feature).
const FORBIDDEN: [(&str, &[&str], bool); 3] = [
    (
        "votegraph-domain",
        &["poem", "hyper", "async-graphql", "async-graphql-poem"],
        true,
    ),
    (
        "votegraph-store",
        &["poem", "hyper", "async-graphql", "async-graphql-poem"],
        false,
    ),
    (
        "votegraph-api",
        &["poem", "hyper", "async-graphql-poem"],
        false,
    ),
];

/// Each workspace package's dependencies, as `cargo metadata` lists them.
fn dependencies() -> BTreeMap<String, Vec<Value>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let name = p["name"].as_str().expect("name").to_owned();
            (
                name,
                p["dependencies"].as_array().cloned().unwrap_or_default(),
            )
        })
        .collect()
}

fn layer(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == name)
}

#[test]
fn each_crate_depends_only_on_the_layers_below_it() {
    let packages = dependencies();
    let mut broken = Vec::new();
    for (package, deps) in &packages {
        let Some(at) = layer(package) else {
            continue;
        };
        for dep in deps {
            let name = dep["name"].as_str().unwrap_or_default();
            if layer(name).is_some_and(|below| below >= at) {
                broken.push(format!("{package} depends on {name}"));
            }
        }
    }
    for (package, names, optional_allowed) in FORBIDDEN {
        let deps = packages.get(package).expect("every layer is a package");
        for dep in deps {
            let name = dep["name"].as_str().unwrap_or_default();
            let optional = dep["optional"].as_bool().unwrap_or(false);
            if names.contains(&name) && !(optional && optional_allowed) {
                broken.push(format!("{package} depends on {name}"));
            }
        }
    }
    // The store takes the domain without its GraphQL side.
    for dep in &packages["votegraph-store"] {
        let graphql = dep["features"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "graphql"));
        if dep["name"] == "votegraph-domain" && graphql {
            broken.push("votegraph-store enables votegraph-domain/graphql".into());
        }
    }
    assert!(broken.is_empty(), "layering broken:\n{}", broken.join("\n"));
}
