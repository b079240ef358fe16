//! `[bfd]` and the neighbours' `bfd`: defaults, overrides, validation
//! errors that name the key, and the reload diff.

use holdfast_config::*;

const GLOBAL: &str = "[global]\nasn = 65000\nrouter_id = \"192.0.2.1\"\n";

fn ok(text: &str) -> Config {
    match parse(text) {
        Ok((c, _)) => c,
        Err(e) => panic!("config rejected: {e}\n---\n{text}"),
    }
}

fn nb(extra: &str) -> String {
    format!("{GLOBAL}[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 65001\nimport = \"all\"\nexport = \"all\"\n{extra}\n")
}

fn key() -> NeighborKey {
    NeighborKey {
        instance: "default".into(),
        address: "192.0.2.2".parse().unwrap(),
    }
}

#[test]
fn defaults_and_bfd_true() {
    let c = ok(&nb(""));
    assert_eq!(c.bfd, BfdDefaults::default());
    assert_eq!(
        (
            c.bfd.min_rx_ms,
            c.bfd.min_tx_ms,
            c.bfd.multiplier,
            c.bfd.multihop,
            c.bfd.realtime_priority
        ),
        (300, 300, 3, false, 10)
    );
    assert_eq!(c.neighbors[0].bfd, None);
    assert_eq!(ok(&nb("bfd = false")).neighbors[0].bfd, None);
    let b = ok(&nb("bfd = true")).neighbors[0].bfd.clone().unwrap();
    assert_eq!(
        b,
        BfdSettings {
            min_rx_ms: 300,
            min_tx_ms: 300,
            multiplier: 3,
            multihop: false,
            auth: None
        }
    );
}

#[test]
fn global_table_and_neighbor_table_override() {
    let text = format!(
        "{GLOBAL}[bfd]\nmin_rx_ms = 100\nmin_tx_ms = 150\nmultiplier = 5\nmultihop = true\n\
         [[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 65001\nbfd = true\n\
         [[neighbor]]\naddress = \"192.0.2.3\"\nremote_asn = 65001\n\
         [neighbor.bfd]\nmin_tx_ms = 50\nmultihop = false\nauth = \"meticulous-sha1\"\nkey_id = 7\npassword = \"secret\"\n"
    );
    let c = ok(&text);
    let a = c.neighbors[0].bfd.clone().unwrap();
    assert_eq!(
        (a.min_rx_ms, a.min_tx_ms, a.multiplier, a.multihop),
        (100, 150, 5, true)
    );
    let b = c.neighbors[1].bfd.clone().unwrap();
    assert_eq!(
        (b.min_rx_ms, b.min_tx_ms, b.multiplier, b.multihop),
        (100, 50, 5, false)
    );
    let auth = b.auth.unwrap();
    assert_eq!(auth.auth_type, BfdAuthType::MeticulousSha1);
    assert_eq!(auth.key_id, 7);
    assert_eq!(auth.password.0, "secret");
    assert!(!format!("{auth:?}").contains("secret"), "Debug redacts");
    for (name, t) in [
        ("simple", BfdAuthType::Simple),
        ("keyed-md5", BfdAuthType::KeyedMd5),
        ("meticulous-md5", BfdAuthType::MeticulousMd5),
        ("keyed-sha1", BfdAuthType::KeyedSha1),
    ] {
        let c = ok(&nb(&format!(
            "[neighbor.bfd]\nauth = \"{name}\"\npassword = \"p\""
        )));
        let auth = c.neighbors[0].bfd.clone().unwrap().auth.unwrap();
        assert_eq!((auth.auth_type, auth.key_id), (t, 1), "{name}");
    }
}

#[test]
fn serialized_config_round_trips() {
    let text = format!(
        "{GLOBAL}[bfd]\nmin_rx_ms = 100\n[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 65001\n\
         import = \"all\"\nexport = \"all\"\n[neighbor.bfd]\nauth = \"keyed-md5\"\npassword = \"k\"\n"
    );
    let c = ok(&text);
    let again = ok(&toml::to_string(&c).unwrap());
    assert_eq!(c, again);
}

#[test]
fn validation_errors_name_the_key() {
    let g = |extra: &str| format!("{GLOBAL}[bfd]\n{extra}\n");
    let t = |extra: &str| nb(&format!("[neighbor.bfd]\n{extra}"));
    let cases: Vec<(String, &str, &str)> = vec![
        (g("min_rx_ms = 0"), "bfd.min_rx_ms", "1..=60000"),
        (g("min_tx_ms = 60001"), "bfd.min_tx_ms", "1..=60000"),
        (g("multiplier = 0"), "bfd.multiplier", "1..=255"),
        (g("multiplier = 256"), "bfd.multiplier", ""),
        (g("multihop = 1"), "bfd.multihop", ""),
        (
            g("realtime_priority = 100"),
            "bfd.realtime_priority",
            "1..=99",
        ),
        (
            t("realtime_priority = 5"),
            "neighbor[0].bfd.realtime_priority",
            "unknown field",
        ),
        (nb("bfd = 3"), "neighbor[0].bfd", "boolean or a table"),
        (
            t("min_rx_ms = 0"),
            "neighbor[0].bfd.min_rx_ms",
            "milliseconds",
        ),
        (t("min_tx_ms = 100000"), "neighbor[0].bfd.min_tx_ms", ""),
        (t("multiplier = 0"), "neighbor[0].bfd.multiplier", ""),
        (
            t("auth = \"md5\"\npassword = \"x\""),
            "neighbor[0].bfd.auth",
            "md5",
        ),
        (
            t("auth = \"simple\""),
            "neighbor[0].bfd.password",
            "required",
        ),
        (
            t("password = \"x\""),
            "neighbor[0].bfd.password",
            "requires auth",
        ),
        (t("key_id = 3"), "neighbor[0].bfd.key_id", "requires auth"),
        (
            t("auth = \"simple\"\npassword = \"\""),
            "neighbor[0].bfd.password",
            "1..=16",
        ),
        (
            t(&format!(
                "auth = \"keyed-md5\"\npassword = \"{}\"",
                "x".repeat(17)
            )),
            "neighbor[0].bfd.password",
            "1..=16",
        ),
        (
            t(&format!(
                "auth = \"keyed-sha1\"\npassword = \"{}\"",
                "x".repeat(21)
            )),
            "neighbor[0].bfd.password",
            "1..=20",
        ),
        (
            t("key_id = 256\nauth = \"simple\"\npassword = \"x\""),
            "neighbor[0].bfd.key_id",
            "",
        ),
    ];
    let mut failures = Vec::new();
    for (text, want_key, fragment) in &cases {
        let e = match parse(text) {
            Ok(_) => {
                failures.push(format!("accepted: {text}"));
                continue;
            }
            Err(e) => e,
        };
        let msg = e.to_string();
        if e.key() != Some(*want_key) || !msg.starts_with(want_key) || !msg.contains(fragment) {
            failures.push(format!(
                "want key {want_key:?} and {fragment:?}, got {:?}: {msg}",
                e.key()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let sha = ok(&t(&format!(
        "auth = \"keyed-sha1\"\npassword = \"{}\"",
        "x".repeat(20)
    )));
    assert!(sha.neighbors[0].bfd.is_some());
}

#[test]
fn unknown_fields_are_rejected_with_their_name() {
    for (text, field) in [
        (format!("{GLOBAL}[bfd]\ninterval = 5\n"), "interval"),
        (nb("[neighbor.bfd]\nmin_rx = 5"), "min_rx"),
    ] {
        let msg = parse(&text).unwrap_err().to_string();
        assert!(msg.contains(&format!("unknown field `{field}`")), "{msg}");
    }
}

#[test]
fn diff_bfd_changes_never_reset_bgp() {
    let base = nb("bfd = true");
    let cases = [
        (nb(""), "disabled"),
        (nb("[neighbor.bfd]\nmin_tx_ms = 100"), "timer"),
        (nb("[neighbor.bfd]\nmultiplier = 5"), "multiplier"),
        (nb("[neighbor.bfd]\nmultihop = true"), "multihop"),
        (
            nb("[neighbor.bfd]\nauth = \"simple\"\npassword = \"x\""),
            "auth",
        ),
        (
            format!(
                "{GLOBAL}[bfd]\nmin_rx_ms = 50\n{}",
                &nb("bfd = true")[GLOBAL.len()..]
            ),
            "global default",
        ),
    ];
    for (new, what) in cases {
        let d = diff(&ok(&base), &ok(&new));
        assert_eq!(d.bfd_changed, vec![key()], "{what}");
        assert!(
            d.reset_required.is_empty() && d.policy_changed.is_empty(),
            "{what}: {d:?}"
        );
        assert!(d.settings_changed.is_empty(), "{what}: {d:?}");
        assert!(!d.global_changed, "{what}");
    }
    let d = diff(&ok(&nb("")), &ok(&nb("bfd = true")));
    assert_eq!(d.bfd_changed, vec![key()]);
    let both = nb("bfd = true\nhold_time = 30");
    let d = diff(&ok(&base), &ok(&both));
    assert_eq!(
        (d.reset_required.clone(), d.bfd_changed.clone()),
        (vec![key()], vec![])
    );
    assert!(diff(&ok(&base), &ok(&base)).is_empty());
}

#[test]
fn timer_change_keeps_the_session_new_transport_does_not() {
    let a = ok(&nb("bfd = true")).neighbors[0].bfd.clone().unwrap();
    let timers = ok(&nb("[neighbor.bfd]\nmin_tx_ms = 100\nmultiplier = 4")).neighbors[0]
        .bfd
        .clone()
        .unwrap();
    let hop = ok(&nb("[neighbor.bfd]\nmultihop = true")).neighbors[0]
        .bfd
        .clone()
        .unwrap();
    assert!(!a.needs_new_session(&timers));
    assert!(a.needs_new_session(&hop));
}
