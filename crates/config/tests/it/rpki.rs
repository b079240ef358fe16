//! `[[rpki]]` caches and the `match.rpki` policy condition.

use holdfast_config::{diff, parse, RpkiState};

const GLOBAL: &str = "[global]\nasn = 65000\nrouter_id = \"192.0.2.1\"\n";

const POLICY: &str = r#"
[[policy]]
name = "rov"
default = "accept"
[[policy.term]]
name = "drop-invalid"
match = { rpki = "invalid" }
action = "reject"
[[policy.term]]
name = "prefer-valid"
match = { rpki = ["valid", "not-found"] }
set = { local_pref = 200 }
"#;

#[test]
fn caches_parse_with_rfc_8210_defaults() {
    let text = format!(
        "{GLOBAL}[[rpki]]\naddress = \"10.0.0.9:8282\"\n[[rpki]]\naddress = \"[2001:db8::9]:323\"\npreference = 1\nrefresh_secs = 60\nretry_secs = 5\nexpire_secs = 600\n"
    );
    let (c, w) = parse(&text).unwrap();
    assert!(w.is_empty());
    assert_eq!(c.rpki.len(), 2);
    let a = &c.rpki[0];
    assert_eq!(
        (a.preference, a.refresh_secs, a.retry_secs, a.expire_secs),
        (100, 3600, 600, 7200)
    );
    assert_eq!(c.rpki[1].preference, 1);
    // Serialised and parsed again: equal.
    let again = parse(&toml::to_string(&c).unwrap()).unwrap().0;
    assert_eq!(again, c);
}

#[test]
fn policy_match_takes_one_or_many_states() {
    let text = format!(
        "{GLOBAL}[[rpki]]\naddress = \"10.0.0.9:8282\"\n{POLICY}[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 65001\nimport = \"rov\"\nexport = \"all\"\n"
    );
    let (c, w) = parse(&text).unwrap();
    assert!(w.is_empty(), "{w:?}");
    let p = c.policy("rov").unwrap();
    assert_eq!(p.terms[0].matches.rpki, vec![RpkiState::Invalid]);
    assert_eq!(
        p.terms[1].matches.rpki,
        vec![RpkiState::Valid, RpkiState::NotFound]
    );
}

#[test]
fn rpki_without_cache_warns() {
    let text = format!(
        "{GLOBAL}{POLICY}[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 65001\nimport = \"rov\"\nexport = \"all\"\n"
    );
    let (_, w) = parse(&text).unwrap();
    assert!(w.iter().any(|w| w.contains("no [[rpki]] cache")), "{w:?}");
}

#[test]
fn errors_name_the_key() {
    let cases = [
        (format!("{GLOBAL}[[rpki]]\naddress = \"10.0.0.9\"\n"), "rpki[0].address"),
        (format!("{GLOBAL}[[rpki]]\naddress = \"10.0.0.9:0\"\n"), "rpki[0].address"),
        (
            format!("{GLOBAL}[[rpki]]\naddress = \"10.0.0.9:1\"\n[[rpki]]\naddress = \"10.0.0.9:1\"\n"),
            "rpki[1].address",
        ),
        (format!("{GLOBAL}[[rpki]]\naddress = \"10.0.0.9:1\"\nrefresh_secs = 0\n"), "rpki[0].refresh_secs"),
        (format!("{GLOBAL}[[rpki]]\naddress = \"10.0.0.9:1\"\nretry_secs = 9000\n"), "rpki[0].retry_secs"),
        (format!("{GLOBAL}[[rpki]]\naddress = \"10.0.0.9:1\"\nexpire_secs = 10\n"), "rpki[0].expire_secs"),
        (
            format!("{GLOBAL}[[rpki]]\naddress = \"10.0.0.9:1\"\nrefresh_secs = 7000\nexpire_secs = 700\n"),
            "rpki[0].expire_secs",
        ),
        (format!("{GLOBAL}[[rpki]]\naddress = \"10.0.0.9:1\"\npreference = 300\n"), "rpki[0].preference"),
        (format!("{GLOBAL}[[rpki]]\naddress = \"10.0.0.9:1\"\nport = 1\n"), "rpki[0]"),
        (
            format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nmatch = {{ rpki = \"unknown\" }}\n"),
            "policy[0].term[0].match.rpki",
        ),
        (
            format!("{GLOBAL}{POLICY}[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 65001\nimport = \"all\"\nexport = \"rov\"\n"),
            "neighbor[0].export",
        ),
    ];
    for (text, key) in cases {
        let e = parse(&text).expect_err(&text);
        let k = e.key().unwrap_or_default().to_string();
        assert!(
            k.starts_with(key),
            "{text}\nwanted key {key}, got {k:?}: {e}"
        );
    }
}

#[test]
fn diff_sees_cache_changes() {
    let a = parse(&format!("{GLOBAL}[[rpki]]\naddress = \"10.0.0.9:8282\"\n"))
        .unwrap()
        .0;
    let b = parse(&format!("{GLOBAL}[[rpki]]\naddress = \"10.0.0.9:323\"\n"))
        .unwrap()
        .0;
    assert!(diff(&a, &b).rpki_changed);
    assert!(!diff(&a, &a).rpki_changed);
}
