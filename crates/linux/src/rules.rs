//! iptables/ip6tables rules for the ACK gate and the rebuild guard.
//!
//! Shells out to `iptables -w` and `ip6tables -w` (the `nft` front end's
//! native `queue` statement is not available everywhere; the xtables
//! `NFQUEUE` target works through nft's compat layer). Every rule carries
//! `-m comment --comment holdfast:<tag>` so it can be found and removed.
//! Rules are inserted at the head of the chain, so that an earlier
//! `ACCEPT` cannot bypass them.
//!
//! The commands run in the network namespace of the *calling thread*.
//!
//! The rebuild guard has two rules per local address and port, whatever the
//! number of peers (it had two per peer and port until 2026-11-29: 2,000
//! rules a family at 1,000 sessions, 42–110 ms to install and 46–318 ms to
//! lift, against 3–14 and 8–52 ms for two). One `iptables` process per rule
//! took seconds of a takeover with hundreds of sessions, so
//! the guard and the gate's rules are installed, and the guard removed, in
//! one `iptables-restore --noflush` transaction per family (one process,
//! atomic), from one listing of the table ([`Listing`]): a takeover runs
//! four processes for its rules. Its rules live in a chain
//! of their own ([`guard_chain`]) that one tagged rule at the head of
//! `INPUT` jumps to: lifting the guard deletes that jump and the chain in
//! one transaction, without listing the table.
//!
//! The `NFQUEUE` rules have no `--queue-bypass`: when no process is bound to
//! the queue (the speaker died), the kernel drops the matching packets. That
//! is deliberate (a dying primary's FIN or RST must not reach the peer), and
//! it also means the rules must be removed ([`remove_all`]) when the gate
//! is shut down on purpose, or all BGP traffic on the host stops.

use std::io;
use std::io::Write as _;
use std::net::IpAddr;
use std::process::{Command, Stdio};

const FAMILIES: [&str; 2] = ["iptables", "ip6tables"];
const TABLE: &str = "filter";

fn comment(tag: &str) -> io::Result<String> {
    let ok = !tag.is_empty()
        && tag.len() <= 200
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b));
    if ok {
        Ok(format!("holdfast:{tag}"))
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("rule tag {tag:?}: use 1-200 of [A-Za-z0-9_.:-]"),
        ))
    }
}

fn run(cmd: &str, args: &[String]) -> io::Result<std::process::Output> {
    Command::new(cmd)
        .arg("-w")
        .args(args)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("{cmd}: {e}")))
}

fn run_ok(cmd: &str, args: &[String]) -> io::Result<()> {
    let out = run(cmd, args)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// A rule word as `iptables-save` writes it (quoted when needed).
fn save_word(w: &str) -> String {
    if !w.is_empty()
        && !w
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '\\')
    {
        return w.to_string();
    }
    let mut q = String::from("\"");
    for c in w.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

/// The `iptables-restore` input that applies `lines` (rule commands in
/// `iptables-save` syntax, e.g. `-I INPUT 1 ...`, `-D INPUT ...`) to the
/// filter table in one transaction.
fn restore_input(lines: &[String]) -> String {
    let mut input = format!("*{TABLE}\n");
    for l in lines {
        input.push_str(l);
        input.push('\n');
    }
    input.push_str("COMMIT\n");
    input
}

/// Applies `lines` with `<cmd>-restore -w --noflush`: one process, all or
/// nothing.
fn restore(cmd: &str, lines: &[String]) -> io::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let prog = format!("{cmd}-restore");
    let mut child = Command::new(&prog)
        .args(["-w", "--noflush"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("{prog}: {e}")))?;
    let written = match child.stdin.take() {
        Some(mut stdin) => stdin.write_all(restore_input(lines).as_bytes()),
        None => Err(io::Error::other("no stdin")),
    };
    let out = child.wait_with_output()?;
    written.map_err(|e| io::Error::new(e.kind(), format!("{prog}: writing the rules: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{prog} ({} rule commands, the first `{}`): {}",
            lines.len(),
            lines[0],
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The `-D` commands for the rules listed by `-S` that carry `comment`
/// (in `only_chain` if given).
fn delete_lines(listed: &[String], comment: &str, only_chain: Option<&str>) -> Vec<String> {
    listed
        .iter()
        .filter(|l| carries(l, comment))
        .filter(|l| only_chain.is_none_or(|ch| split(l).get(1).map(String::as_str) == Some(ch)))
        .filter_map(|l| l.strip_prefix("-A ").map(|rest| format!("-D {rest}")))
        .collect()
}

/// One rule per port and direction: `pre` (e.g. a source address), TCP,
/// the port, `flags` (TCP flag matches), the comment, the target.
fn port_specs(
    ports: &[u16],
    pre: &[&str],
    flags: &[&str],
    comment: &str,
    target: &[&str],
) -> Vec<Vec<String>> {
    let mut specs = Vec::new();
    for &port in ports {
        for dir in ["--sport", "--dport"] {
            let mut s: Vec<String> = pre.iter().map(|s| s.to_string()).collect();
            s.extend(["-p", "tcp", "-m", "tcp", dir].map(String::from));
            s.push(port.to_string());
            s.extend(flags.iter().map(|s| s.to_string()));
            s.extend(["-m", "comment", "--comment", comment].map(String::from));
            s.extend(target.iter().map(|s| s.to_string()));
            specs.push(s);
        }
    }
    specs
}

/// The filter table's rules of both families (the `-A` lines `iptables
/// -S` and `ip6tables -S` print), listed once: a takeover checks them
/// against the namespace's lock and installs its rules from the same
/// listing ([`install`]), two processes instead of one per rule or check.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    v4: Vec<String>,
    v6: Vec<String>,
}

impl Listing {
    /// Lists both families now.
    pub fn read() -> io::Result<Listing> {
        Ok(Listing {
            v4: rules("iptables")?,
            v6: rules("ip6tables")?,
        })
    }

    fn of(&self, cmd: &str) -> &[String] {
        if cmd == "ip6tables" {
            &self.v6
        } else {
            &self.v4
        }
    }

    /// Every Holdfast rule, whatever its tag, prefixed with the command.
    pub fn holdfast(&self) -> Vec<String> {
        FAMILIES
            .iter()
            .flat_map(|cmd| {
                self.of(cmd)
                    .iter()
                    .filter(|l| holdfast_tag(l).is_some())
                    .map(move |l| format!("{cmd} {l}"))
            })
            .collect()
    }
}

/// The ACK gate's rules and, with `guard`, the rebuild guard, installed
/// from `listed` (what the table holds now) in one `iptables-restore
/// --noflush` transaction per family: atomic, never a moment ungated or
/// unguarded, and idempotent (rules of an earlier install of this tag are
/// replaced in the same transaction).
///
/// The gate — OUTPUT: TCP with source or destination port in `ports` and
/// without the SYN flag goes to NFQUEUE `queue_num` (no bypass: dropped
/// while nobody serves the queue), IPv4 and IPv6. SYN and SYN-ACK segments
/// never go through the queue: the gate has nothing to decide for them (no
/// gated connection sends one), and a starved, exiting or taking-over
/// speaker must not make its port look unreachable to the host agents' TCP
/// probes. A connection opened or accepted by a process whose gate drops
/// everything still carries nothing else.
///
/// The guard (`guard`: the sessions' local addresses, or every destination
/// when empty) — INPUT: drop TCP to those addresses with source or
/// destination port in `ports` and without the SYN flag (inbound segments
/// of our sessions), so that nothing is answered with a RST while sockets
/// are being rebuilt, each address in its family. SYNs pass, as they pass
/// the gate: a host agent's TCP probe of the port is answered meanwhile
/// (its handshake's last ACK is dropped; the probe counts the SYN-ACK).
pub fn install(
    tag: &str,
    queue_num: u16,
    ports: &[u16],
    guard: Option<&[IpAddr]>,
    listed: &Listing,
) -> io::Result<()> {
    let c = comment(tag)?;
    for (cmd, v6) in [("iptables", false), ("ip6tables", true)] {
        let mut lines = match guard {
            Some(locals) => guard_lines(cmd, v6, tag, &c, ports, locals, listed),
            None => Vec::new(),
        };
        lines.extend(gate_lines(&c, queue_num, ports, listed.of(cmd)));
        restore(cmd, &lines)?;
    }
    Ok(())
}

/// [`install`] of the gate alone, from a fresh listing.
pub fn install_gate(tag: &str, queue_num: u16, ports: &[u16]) -> io::Result<()> {
    install(tag, queue_num, ports, None, &Listing::read()?)
}

/// The guard alone (see [`install`]), from a fresh listing.
pub fn install_guard(tag: &str, ports: &[u16], locals: &[IpAddr]) -> io::Result<()> {
    let c = comment(tag)?;
    let listed = Listing::read()?;
    for (cmd, v6) in [("iptables", false), ("ip6tables", true)] {
        restore(cmd, &guard_lines(cmd, v6, tag, &c, ports, locals, &listed))?;
    }
    Ok(())
}

/// The gate's rule commands: this tag's OUTPUT rules in `listed` deleted,
/// then one rule per port and direction inserted at the head, in the order
/// of [`port_specs`].
fn gate_lines(comment: &str, queue_num: u16, ports: &[u16], listed: &[String]) -> Vec<String> {
    let q = queue_num.to_string();
    let specs = port_specs(
        ports,
        &[],
        &["!", "--tcp-flags", "SYN", "SYN"],
        comment,
        &["-j", "NFQUEUE", "--queue-num", &q],
    );
    let mut lines = delete_lines(listed, comment, Some("OUTPUT"));
    lines.extend(
        specs
            .iter()
            .rev()
            .map(|spec| spec_line("-I OUTPUT 1", spec)),
    );
    lines
}

/// The guard's rule commands for one family (none when no local address
/// is of that family): its chain created or emptied, an earlier guard of
/// this tag (its jump, or rules of a version without the chain) deleted,
/// the rules appended to the chain, and the jump inserted at the head of
/// INPUT.
fn guard_lines(
    cmd: &str,
    v6: bool,
    tag: &str,
    comment: &str,
    ports: &[u16],
    locals: &[IpAddr],
    listed: &Listing,
) -> Vec<String> {
    let chain = guard_chain(tag);
    let target = ["-j", "DROP"];
    let not_syn = ["!", "--tcp-flags", "SYN", "SYN"];
    let specs = if locals.is_empty() {
        port_specs(ports, &[], &not_syn, comment, &target)
    } else {
        let mut specs = Vec::new();
        let mut mine: Vec<&IpAddr> = locals.iter().filter(|a| a.is_ipv6() == v6).collect();
        mine.sort();
        mine.dedup();
        for a in mine {
            let dst = a.to_string();
            specs.extend(port_specs(ports, &["-d", &dst], &not_syn, comment, &target));
        }
        specs
    };
    let listed = listed.of(cmd);
    if specs.is_empty() {
        // No guard in this family: only what an earlier guard of this tag
        // left here goes (its jump, its chain), so that lifting the guard
        // may leave this family alone.
        let mut lines = delete_lines(listed, comment, Some("INPUT"));
        let prefix = format!("-A {chain} ");
        if listed.iter().any(|l| l.starts_with(&prefix)) {
            lines.extend([format!("-F {chain}"), format!("-X {chain}")]);
        }
        return lines;
    }
    let mut lines = vec![format!(":{chain} - [0:0]"), format!("-F {chain}")];
    lines.extend(delete_lines(listed, comment, Some("INPUT")));
    let append = format!("-A {chain}");
    lines.extend(specs.iter().map(|spec| spec_line(&append, spec)));
    lines.push(format!("-I INPUT 1 {}", jump_spec(comment, &chain)));
    lines
}

/// A rule command in `iptables-save` syntax: `head` (e.g. `-A CHAIN`),
/// then the rule's words, quoted where needed.
fn spec_line(head: &str, spec: &[String]) -> String {
    let words: Vec<String> = spec.iter().map(|w| save_word(w)).collect();
    format!("{head} {}", words.join(" "))
}

/// The chain holding a tag's guard rules: `HF-GUARD-` and 8 hex digits of
/// the tag's FNV-1a hash (chain names are limited to 28 characters; one
/// speaker with NSR per namespace, so one tag).
pub fn guard_chain(tag: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in tag.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("HF-GUARD-{h:08x}")
}

/// The rule that sends `INPUT` to the guard chain.
fn jump_spec(comment: &str, chain: &str) -> String {
    format!("-m comment --comment {} -j {chain}", save_word(comment))
}

/// Removes the guard installed for `locals` (as given to [`install`] or
/// [`install_guard`]): its jump from INPUT and its chain (and any INPUT
/// rule carrying this tag), in each family it was installed in. A family
/// none of the addresses is of has no guard (its install removed what an
/// earlier one left there) and is not touched: that saves the processes
/// of a listing and a failed delete, about 20 ms of a takeover.
pub fn remove_guard(tag: &str, locals: &[IpAddr]) -> io::Result<()> {
    // One transaction, nothing listed: the jump, then the chain.
    in_guard_families(tag, locals, |c, chain| {
        vec![
            format!("-D INPUT {}", jump_spec(c, chain)),
            format!("-F {chain}"),
            format!("-X {chain}"),
        ]
    })
}

/// Lifts the guard installed for `locals` without removing it: a `RETURN`
/// at the head of its chain, in each family it was installed in, lets
/// every packet through. Adding a rule commits in about a millisecond;
/// deleting the jump and the chain waited for the kernel (some 15 ms here,
/// 20–30 ms on a busy host) while every session of a takeover waited for
/// the guard. [`remove_guard`] removes it afterwards. A family whose chain
/// is missing (installed by another version) has it removed at once.
pub fn lift_guard(tag: &str, locals: &[IpAddr]) -> io::Result<()> {
    in_guard_families(tag, locals, |c, chain| {
        vec![format!("-I {chain} 1 {}", lift_spec(c))]
    })
}

/// In each family the guard for `locals` was installed in, the commands
/// `fast(comment, chain)` as one transaction; where that fails (no guard
/// in this family, or not as installed: two jumps, rules of an earlier
/// version), every tagged rule of INPUT and the guard's chain removed.
fn in_guard_families(
    tag: &str,
    locals: &[IpAddr],
    fast: impl Fn(&str, &str) -> Vec<String>,
) -> io::Result<()> {
    let c = comment(tag)?;
    let chain = guard_chain(tag);
    let mut first_err = None;
    for (cmd, v6) in [("iptables", false), ("ip6tables", true)] {
        if !locals.is_empty() && !locals.iter().any(|p| p.is_ipv6() == v6) {
            continue;
        }
        if restore(cmd, &fast(&c, &chain)).is_ok() {
            continue;
        }
        if let Err(e) = remove_family(cmd, &c, Some(&["INPUT", &chain])) {
            first_err.get_or_insert(e);
        }
        drop_chain(cmd, &chain);
    }
    match first_err {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

/// The rule that opens a lifted guard's chain.
fn lift_spec(comment: &str) -> String {
    format!("-m comment --comment {} -j RETURN", save_word(comment))
}

/// Deletes `chain` if it exists and is empty and unreferenced.
fn drop_chain(cmd: &str, chain: &str) {
    let _ = run(cmd, &["-t".into(), TABLE.into(), "-X".into(), chain.into()]);
}

/// Removes every rule carrying this tag (every chain of the filter table,
/// IPv4 and IPv6).
pub fn remove_all(tag: &str) -> io::Result<()> {
    let c = comment(tag)?;
    let mut first_err = None;
    for cmd in FAMILIES {
        if let Err(e) = remove_family(cmd, &c, None) {
            first_err.get_or_insert(e);
        }
        drop_chain(cmd, &guard_chain(tag));
    }
    match first_err {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

/// The rules (as `iptables -S` prints them) carrying this tag.
pub fn list(tag: &str) -> io::Result<Vec<String>> {
    let c = comment(tag)?;
    let mut out = Vec::new();
    for cmd in FAMILIES {
        for line in rules(cmd)? {
            if carries(&line, &c) {
                out.push(format!("{cmd} {line}"));
            }
        }
    }
    Ok(out)
}

/// Every Holdfast rule in this network namespace, whatever its tag (as
/// `iptables -S` prints them, prefixed with the command).
pub fn list_any() -> io::Result<Vec<String>> {
    Listing::read().map(|l| l.holdfast())
}

/// The tag of a Holdfast rule (`--comment holdfast:TAG`), if it is one.
pub fn holdfast_tag(line: &str) -> Option<String> {
    let words = split(line);
    words
        .windows(2)
        .find(|w| w[0] == "--comment" && w[1].starts_with("holdfast:"))
        .map(|w| w[1]["holdfast:".len()..].to_string())
}

/// The queue a rule sends to (`--queue-num N`), if any.
pub fn queue_num(line: &str) -> Option<u16> {
    let words = split(line);
    words
        .windows(2)
        .find(|w| w[0] == "--queue-num")
        .and_then(|w| w[1].parse().ok())
}

fn rules(cmd: &str) -> io::Result<Vec<String>> {
    let out = run(cmd, &["-t".into(), TABLE.into(), "-S".into()])?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{cmd} -S: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("-A "))
        .map(str::to_owned)
        .collect())
}

fn carries(line: &str, comment: &str) -> bool {
    let words = split(line);
    words
        .windows(2)
        .any(|w| w[0] == "--comment" && w[1] == comment)
}

/// Splits an `iptables -S` line into words, honouring double quotes.
fn split(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    let mut chars = line.chars();
    while let Some(ch) = chars.next() {
        match ch {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            '\\' if quoted => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            c if c.is_whitespace() && !quoted => {
                if any || !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// Deletes the rules of `cmd`'s filter table carrying `comment` (in
/// `chains` if given): one transaction, or rule by rule if it fails.
fn remove_family(cmd: &str, comment: &str, chains: Option<&[&str]>) -> io::Result<()> {
    let listed = rules(cmd)?;
    let lines: Vec<String> = match chains {
        None => delete_lines(&listed, comment, None),
        Some(cs) => cs
            .iter()
            .flat_map(|ch| delete_lines(&listed, comment, Some(ch)))
            .collect(),
    };
    if restore(cmd, &lines).is_ok() {
        return Ok(());
    }
    // The transaction failed as a whole (a rule went meanwhile): every
    // rule on its own, so the others still go.
    let mut first_err = None;
    for line in lines {
        let mut args = vec!["-t".into(), TABLE.into()];
        args.extend(split(&line));
        if let Err(e) = run_ok(cmd, &args) {
            first_err.get_or_insert(e);
        }
    }
    match first_err {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_validated() {
        assert_eq!(comment("gate-1").unwrap(), "holdfast:gate-1");
        assert!(comment("").is_err());
        assert!(comment("a b").is_err());
        assert!(comment("a\"b").is_err());
    }

    #[test]
    fn splits_iptables_lines() {
        let l = r#"-A OUTPUT -p tcp -m tcp --sport 179 -m comment --comment "holdfast:x" -j NFQUEUE --queue-num 3"#;
        let w = split(l);
        assert_eq!(w[0], "-A");
        assert_eq!(w[1], "OUTPUT");
        assert!(carries(l, "holdfast:x"));
        assert!(!carries(l, "holdfast:y"));
        let l2 = "-A INPUT -p tcp -m tcp --dport 179 -m comment --comment holdfast:x -j DROP";
        assert!(carries(l2, "holdfast:x"));
        assert!(!carries(l2, "holdfast:x2"));
        assert_eq!(split(r#"a "b c" d"#), vec!["a", "b c", "d"]);
        assert_eq!(split(r#"a "" d"#), vec!["a", "", "d"]);
        assert_eq!(holdfast_tag(l).as_deref(), Some("x"));
        assert_eq!(queue_num(l), Some(3));
        assert_eq!(queue_num(l2), None);
        assert_eq!(holdfast_tag("-A INPUT -j DROP"), None);
        assert_eq!(
            holdfast_tag("-A INPUT -m comment --comment other -j DROP"),
            None
        );
    }

    #[test]
    fn restore_input_deletes_and_inserts_in_one_transaction() {
        let listed = vec![
            r#"-A INPUT -s 192.0.2.1/32 -p tcp -m tcp --sport 179 -m comment --comment "holdfast:x" -j DROP"#.to_string(),
            r#"-A OUTPUT -p tcp -m tcp --sport 179 -m comment --comment "holdfast:x" -j NFQUEUE --queue-num 3"#.to_string(),
            r#"-A INPUT -m comment --comment "holdfast:y" -j DROP"#.to_string(),
        ];
        let d = delete_lines(&listed, "holdfast:x", Some("INPUT"));
        assert_eq!(
            d,
            vec![
                r#"-D INPUT -s 192.0.2.1/32 -p tcp -m tcp --sport 179 -m comment --comment "holdfast:x" -j DROP"#
            ]
        );
        assert_eq!(delete_lines(&listed, "holdfast:x", None).len(), 2);
        assert_eq!(restore_input(&d), format!("*filter\n{}\nCOMMIT\n", d[0]));
        assert_eq!(save_word("holdfast:x"), "holdfast:x");
        assert_eq!(save_word("a b"), "\"a b\"");
        assert_eq!(save_word("").len(), 2);
        assert_eq!(split(&save_word("a \"q\" b")), vec!["a \"q\" b"]);
    }

    #[test]
    fn gate_lines_replace_this_tags_output_rules_in_order() {
        let listed = vec![
            r#"-A OUTPUT -p tcp -m tcp --sport 179 -m comment --comment "holdfast:x" -j NFQUEUE --queue-num 3"#.to_string(),
            r#"-A OUTPUT -p tcp -m tcp --sport 179 -m comment --comment "holdfast:y" -j NFQUEUE --queue-num 4"#.to_string(),
            r#"-A INPUT -p tcp -m tcp --sport 179 -m comment --comment "holdfast:x" -j DROP"#.to_string(),
        ];
        let l = gate_lines("holdfast:x", 5, &[179], &listed);
        assert_eq!(l.len(), 3, "{l:?}");
        assert!(
            l[0].starts_with("-D OUTPUT ") && l[0].contains("--queue-num 3"),
            "{l:?}"
        );
        // Inserted at the head in reverse: --sport first in the chain.
        assert!(
            l[1].starts_with("-I OUTPUT 1 ") && l[1].contains("--dport 179"),
            "{l:?}"
        );
        assert!(
            l[2].contains("--sport 179") && l[2].contains("--queue-num 5"),
            "{l:?}"
        );
        assert!(l[2].contains("! --tcp-flags SYN SYN"), "{l:?}");
    }

    #[test]
    fn guard_chain_names_fit_iptables() {
        let a = guard_chain("edge-1");
        assert!(a.starts_with("HF-GUARD-") && a.len() == 17, "{a}");
        assert_eq!(a, guard_chain("edge-1"));
        assert_ne!(a, guard_chain("edge-2"));
        assert_eq!(
            jump_spec("holdfast:x", &a),
            format!("-m comment --comment holdfast:x -j {a}")
        );
    }

    #[test]
    fn the_guard_is_two_rules_per_local_address_whatever_the_peers() {
        let l = Listing::default();
        let a: IpAddr = "198.18.0.10".parse().unwrap();
        let b: IpAddr = "fd00::10".parse().unwrap();
        let v4 = guard_lines("iptables", false, "t", "holdfast:t", &[179], &[a, b, a], &l);
        // Chain created and flushed, two rules, the jump.
        assert_eq!(v4.len(), 5, "{v4:#?}");
        assert!(v4[2].starts_with("-A HF-GUARD-"), "{v4:#?}");
        assert!(
            v4[2].contains("-d 198.18.0.10 -p tcp -m tcp --sport 179 ! --tcp-flags SYN SYN"),
            "{v4:#?}"
        );
        assert!(
            v4[3].contains("--dport 179 ! --tcp-flags SYN SYN"),
            "{v4:#?}"
        );
        assert!(v4[4].starts_with("-I INPUT 1 "), "{v4:#?}");
        let v6 = guard_lines("ip6tables", true, "t", "holdfast:t", &[179], &[a, b], &l);
        assert!(v6[2].contains("-d fd00::10 "), "{v6:#?}");
        // No address named: every destination, still not SYNs.
        let any = guard_lines("iptables", false, "t", "holdfast:t", &[179], &[], &l);
        assert_eq!(any.len(), 5, "{any:#?}");
        assert!(!any[2].contains("-d "), "{any:#?}");
        assert!(any[2].contains("! --tcp-flags SYN SYN"), "{any:#?}");
        // A family without an address gets none.
        let none = guard_lines("ip6tables", true, "t", "holdfast:t", &[179], &[a], &l);
        assert!(none.is_empty(), "{none:#?}");
    }

    #[test]
    fn specs_cover_both_directions() {
        let s = port_specs(&[179, 1179], &[], &[], "holdfast:t", &["-j", "DROP"]);
        assert_eq!(s.len(), 4);
        assert!(s[0].join(" ").contains("--sport 179"));
        assert!(s[1].join(" ").contains("--dport 179"));
        assert!(s[3].join(" ").ends_with("--comment holdfast:t -j DROP"));
        let g = port_specs(
            &[179],
            &["-s", "192.0.2.1"],
            &["!", "--tcp-flags", "SYN", "SYN"],
            "holdfast:t",
            &["-j", "DROP"],
        );
        assert_eq!(
            g[0].join(" "),
            "-s 192.0.2.1 -p tcp -m tcp --sport 179 ! --tcp-flags SYN SYN -m comment --comment holdfast:t -j DROP"
        );
    }
}
