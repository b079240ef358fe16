//! `holdfast config check FILE [--json]`, run as an operator would.

use std::process::Command;

fn check(text: &str, json: bool) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("holdfast-config-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("c{}.toml", text.len()));
    std::fs::write(&file, text).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_holdfast"));
    if json {
        cmd.arg("--json");
    }
    let out = cmd.arg("config").arg("check").arg(&file).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

const GOOD: &str = "[global]\nasn = 65000\nrouter_id = \"192.0.2.1\"\n\n[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 65001\nimport = \"all\"\nexport = \"all\"\n";

#[test]
fn a_good_file_passes_and_a_bad_one_names_its_key() {
    let (ok, out) = check(GOOD, false);
    assert!(ok, "{out}");
    assert!(out.contains("OK (1 instance(s), 1 neighbour(s)"), "{out}");

    let (ok, out) = check(GOOD, true);
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["ok"].as_bool(), v["neighbors"].as_u64()),
        (Some(true), Some(1)),
        "{v}"
    );

    let bad = GOOD.replace("remote_asn = 65001", "remote_asn = 0");
    let (ok, out) = check(&bad, false);
    assert!(!ok, "remote_asn = 0 must be refused: {out}");
    assert!(
        out.contains("neighbor[0].remote_asn"),
        "the error names the key: {out}"
    );
    assert!(
        !out.contains("Stack backtrace"),
        "no stack trace for an operator: {out}"
    );

    let (ok, out) = check(&bad, true);
    assert!(!ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], false, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or("")
            .contains("neighbor[0].remote_asn"),
        "{v}"
    );
}
