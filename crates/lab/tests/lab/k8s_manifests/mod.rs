//! The Kubernetes manifests of deploy/kubernetes/, validated offline.
//!
//! ```text
//!   deploy/kubernetes/*.yaml --> kubernetes-validate --strict -k 1.29.0 | 1.33.0 | 1.37.0
//!                                (PyPI; the Kubernetes OpenAPI JSON schemas it bundles,
//!                                 in the venv scripts/install-deps.sh makes)
//! ```
//!
//! There is no cluster here: this checks that every document is a known
//! kind of a known API version whose fields exist and have the right types
//! (strict: an unknown field is an error), for the oldest and newest
//! Kubernetes versions the manifests are meant for. Not checked: admission
//! (Pod Security, quotas), scheduling, images, and whether the workloads
//! run (deploy/kubernetes/README.md).
//!
//! Checked:
//! * every manifest passes, for each version;
//! * the kinds the issue names are there: the controller as a Deployment,
//!   the agent as a DaemonSet on the host network with NET_ADMIN, NET_RAW,
//!   NET_BIND_SERVICE and SYS_ADMIN, Redis with Sentinel, etcd as a
//!   StatefulSet of 3;
//! * negative control, every run: a copy of the agent's DaemonSet with a
//!   misspelt field (`hostNetwrok`) and one with a wrongly typed field
//!   (`replicas: "3"` on etcd) are both rejected.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use holdfast_lab::skip;

const VENV: &str = "/var/cache/holdfast-test/k8s-venv";
const VERSIONS: [&str; 3] = ["1.29.0", "1.33.0", "1.37.0"];

fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes")
}

fn validate(version: &str, files: &[PathBuf]) -> Output {
    Command::new(format!("{VENV}/bin/kubernetes-validate"))
        .args(["--strict", "-k", version])
        .args(files)
        .output()
        .expect("running kubernetes-validate")
}

#[test]
fn k8s_manifests() {
    if !Path::new(&format!("{VENV}/bin/kubernetes-validate")).exists() {
        skip(&format!(
            "kubernetes-validate missing from {VENV} (scripts/install-deps.sh)"
        ));
        return;
    }
    let mut files: Vec<PathBuf> = fs::read_dir(manifests_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "manifests: {files:?}");

    for v in VERSIONS {
        let out = validate(v, &files);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "kubernetes-validate -k {v}:\n{text}");
        let passed = text
            .lines()
            .filter(|l| l.contains(" passed for resource "))
            .count();
        eprintln!("kubernetes {v}: {passed} resources passed");
        for kind in [
            "deployment/holdfast-controller",
            "daemonset/holdfast-agent",
            "statefulset/etcd",
            "statefulset/redis",
            "configmap/redis",
        ] {
            assert!(
                text.contains(&format!("passed for resource {kind} ")),
                "{kind} not validated:\n{text}"
            );
        }
    }

    let all: String = files
        .iter()
        .map(|f| fs::read_to_string(f).unwrap())
        .collect();
    let agent = fs::read_to_string(manifests_dir().join("40-agent.yaml")).unwrap();
    assert!(agent.contains("kind: DaemonSet") && agent.contains("hostNetwork: true"));
    assert!(
        agent.contains(r#"add: ["NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE", "SYS_ADMIN"]"#),
        "the agent's capabilities"
    );
    let etcd = fs::read_to_string(manifests_dir().join("10-etcd.yaml")).unwrap();
    assert!(etcd.contains("kind: StatefulSet") && etcd.contains("replicas: 3"));
    assert!(all.contains("kind: Deployment") && all.contains("holdfast-controller"));
    assert!(all.contains("--sentinel") && all.contains("sentinel monitor holdfast"));

    // Negative control: the validator rejects what is wrong.
    let tmp = std::env::temp_dir().join(format!("holdfast-k8s-neg-{}", std::process::id()));
    fs::create_dir_all(&tmp).unwrap();
    let bad_field = tmp.join("agent-bad-field.yaml");
    fs::write(
        &bad_field,
        agent.replace("hostNetwork: true", "hostNetwrok: true"),
    )
    .unwrap();
    let bad_type = tmp.join("etcd-bad-type.yaml");
    fs::write(&bad_type, etcd.replace("replicas: 3", "replicas: \"3\"")).unwrap();
    for bad in [&bad_field, &bad_type] {
        let out = validate(VERSIONS[2], std::slice::from_ref(bad));
        assert!(
            !out.status.success(),
            "{} was accepted: {}",
            bad.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    fs::remove_dir_all(&tmp).unwrap();
}
