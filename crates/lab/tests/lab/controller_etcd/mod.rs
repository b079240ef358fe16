//! The control plane on a real etcd: three `holdfast-controller` replicas
//! electing a leader on an etcd lease, a migration carried on across a
//! leader's death, fencing of a deposed leader, and etcd member and quorum
//! loss.
//!
//! ```text
//!   host c1                  host c2                  host c3
//!   etcd-c1 + replica c1     etcd-c2 + replica c2     etcd-c3 + replica c3
//!   192.0.2.1                192.0.2.2                192.0.2.3
//!        \______________________|_______________________/
//!                        bridge "ctl" (own namespace)
//! ```
//!
//! Checked, in order (lease TTL 3 s, one migration step = 1 s of work):
//! 1. exactly one leader, the same seen by `etcdctl` (the leader key's value
//!    and `create_revision`, the token) and by the replicas' status files;
//!    the store epoch is the leader's token;
//! 2. the leader is SIGKILLed after two of five steps: another replica leads
//!    within about the TTL and completes the migration; every step's command
//!    exists exactly once, the later ones with the new leader's larger token;
//!    the unit's placement is written;
//! 3. the leader is SIGSTOPped at the start of a step; another replica takes
//!    over and completes the migration; on SIGCONT the old leader's commit
//!    is refused by etcd (its fenced-rejection count rises) and it demotes
//!    itself; each step still exactly once;
//! 4. one etcd member (not etcd's raft leader) killed: the leader (token) is unchanged, with no
//!    demotion, and a migration completes;
//! 5. a second member killed (quorum lost): within about the TTL no replica
//!    leads and the store revision does not move; with quorum back a leader
//!    resumes and a migration completes;
//! 6. negative control: replicas started `--unfenced` (no leader compare,
//!    no compare-and-swap of step records) in the same SIGSTOP scenario
//!    write a step twice, so the exactly-once check of 2 and 3 fails.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use holdfast_lab::{
    find_binary, hold_for, skip, skip_unless_ready, skip_unless_tools, wait_for, wait_for_every,
    Etcd, HostId, IfAddr, Lab, ProcId, Signal,
};
use serde_json::Value;

const TTL_MS: u64 = 3000;
const STEP_MS: u64 = 1000;
const REPLICAS: usize = 3;

struct Ctl {
    lab: Lab,
    etcd: Etcd,
    bin: PathBuf,
    hosts: Vec<HostId>,
}

struct Replica {
    name: String,
    proc: ProcId,
    status: PathBuf,
}

impl Ctl {
    fn start_replica(&mut self, i: usize, cluster: &str, extra: &[&str]) -> Replica {
        let name = format!("{cluster}-c{}", i + 1);
        let status = self.lab.work_dir().join(format!("{name}.status.json"));
        let _ = std::fs::remove_file(&status);
        let (eps, ttl, step) = (
            self.etcd.endpoints(),
            TTL_MS.to_string(),
            STEP_MS.to_string(),
        );
        let (bin, st) = (self.bin.to_string_lossy(), status.to_string_lossy());
        let mut cmd = vec![
            bin.as_ref(),
            "--etcd",
            &eps,
            "--name",
            &name,
            "--cluster",
            cluster,
            "--lease-ttl-ms",
            &ttl,
            "--step-ms",
            &step,
            "--status-file",
            st.as_ref(),
        ];
        cmd.extend_from_slice(extra);
        let proc = self
            .lab
            .spawn(self.hosts[i], &name, &cmd, &[("HOLDFAST_LOG", "info")])
            .expect("spawn controller");
        Replica { name, proc, status }
    }

    fn ctl(&mut self, args: &[&str]) -> String {
        self.etcd.ctl(&mut self.lab, args).expect("etcdctl")
    }

    /// `etcdctl put`, retried for a few seconds (a put can time out while
    /// etcd elects a leader; writing the same value again is harmless).
    fn put(&mut self, key: &str, value: &Value) {
        let v = value.to_string();
        wait_for(
            &format!("etcdctl put {key}"),
            Duration::from_secs(10),
            || {
                self.etcd
                    .ctl(&mut self.lab, &["put", key, &v])
                    .map(|_| Some(()))
            },
        )
        .expect("etcdctl put");
    }

    /// The value (as JSON) and `create_revision` of a key, read with etcdctl.
    fn get(&mut self, key: &str) -> Option<(Value, i64)> {
        let out = self
            .etcd
            .ctl(&mut self.lab, &["get", key, "-w", "json"])
            .ok()?;
        let v: Value = serde_json::from_str(&out).ok()?;
        let kv = v.get("kvs")?.get(0)?;
        let rev = kv.get("create_revision")?.as_i64()?;
        let text = self.ctl(&["get", key, "--print-value-only"]);
        Some((serde_json::from_str(text.trim()).ok()?, rev))
    }

    fn keys(&mut self, prefix: &str) -> Vec<String> {
        self.ctl(&["get", prefix, "--prefix", "--keys-only"])
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.trim().to_string())
            .collect()
    }
}

fn status(r: &Replica) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(&r.status).ok()?).ok()
}

fn num(v: &Value, f: &str) -> u64 {
    v.get(f).and_then(Value::as_u64).unwrap_or(0)
}

/// The replicas (among `live`) whose fresh status says they lead, with their tokens.
fn leaders(rs: &[&Replica]) -> Vec<(String, i64)> {
    rs.iter()
        .filter_map(|r| status(r))
        .filter(|s| s["role"] == "leader")
        .map(|s| {
            (
                s["name"].as_str().unwrap_or_default().to_string(),
                s["token"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

fn migration(id: &str, to: &str, steps: &[&str]) -> Value {
    serde_json::json!({
        "schema": 1, "id": id, "unit": "u1", "from": "hostA", "to": to,
        "steps": steps, "state": "pending"
    })
}

/// Commands per step of migration `id` to agent `to`: step -> tokens.
fn commands(c: &mut Ctl, cluster: &str, to: &str, id: &str) -> BTreeMap<String, Vec<i64>> {
    let prefix = format!("/holdfast/{cluster}/commands/{to}/{id}/");
    let mut m: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for k in c.keys(&prefix) {
        let rest = k.strip_prefix(&prefix).expect("under prefix");
        let (step, token) = rest.split_once('/').expect("step/token");
        m.entry(step.to_string())
            .or_default()
            .push(token.parse().expect("token"));
    }
    m
}

/// Each of `steps` has exactly one command and there is nothing else.
fn exactly_once(cmds: &BTreeMap<String, Vec<i64>>, steps: &[&str]) -> Result<(), String> {
    if cmds.len() != steps.len() || steps.iter().any(|s| cmds.get(*s).map(Vec::len) != Some(1)) {
        return Err(format!("commands per step: {cmds:?}"));
    }
    Ok(())
}

fn wait_done(c: &mut Ctl, cluster: &str, timeout: Duration) -> Value {
    let key = format!("/holdfast/{cluster}/migration");
    wait_for("the migration to be done", timeout, || {
        Ok(c.get(&key).map(|(v, _)| v).filter(|v| v["state"] == "done"))
    })
    .expect("migration done")
}

/// Waits until `r`'s worker starts a new step (its phase changes to `step X`), so a
/// signal sent now lands in the step's work, before its commit.
fn wait_step_start(r: &Replica) -> String {
    let first = status(r).map(|s| s["phase"].clone()).unwrap_or_default();
    wait_for_every(
        "the leader to start a step",
        Duration::from_secs(10),
        Duration::from_millis(5),
        || {
            let p = status(r).map(|s| s["phase"].clone()).unwrap_or_default();
            Ok(
                (p != first && p.as_str().is_some_and(|p| p.starts_with("step")))
                    .then(|| p.to_string()),
            )
        },
    )
    .expect("step start")
}

fn wait_leader_among(rs: &[&Replica], not: Option<&str>, timeout: Duration) -> (String, i64) {
    wait_for("one replica to lead", timeout, || {
        let l = leaders(rs);
        Ok((l.len() == 1 && not.is_none_or(|n| l[0].0 != n)).then(|| l[0].clone()))
    })
    .expect("a leader")
}

fn setup() -> Option<Ctl> {
    if skip_unless_ready(&[]) || skip_unless_tools(&["etcd", "etcdctl"]) {
        return None;
    }
    let bin = match find_binary("holdfast-controller", "HOLDFAST_CONTROLLER_BIN") {
        Ok(b) => b,
        Err(e) => {
            skip(&format!("{e}"));
            return None;
        }
    };
    let mut lab = Lab::new("controller_etcd").expect("lab");
    let mut hosts = Vec::new();
    let mut members = Vec::new();
    for i in 0..REPLICAS {
        hosts.push(lab.host(&format!("c{}", i + 1)).expect("host"));
    }
    let ports: Vec<(HostId, Vec<IfAddr>)> = hosts
        .iter()
        .enumerate()
        .map(|(i, &h)| {
            let a: IpAddr = [192, 0, 2, i as u8 + 1].into();
            members.push((h, a));
            (h, vec![IfAddr::new(a, 24)])
        })
        .collect();
    lab.bridge("ctl", &ports).expect("bridge");
    let etcd = Etcd::start(&mut lab, &members).expect("etcd cluster");
    Some(Ctl {
        lab,
        etcd,
        bin,
        hosts,
    })
}

fn all(rs: &[Replica]) -> Vec<&Replica> {
    rs.iter().collect()
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

#[test]
fn controller_leads_fences_and_migrates_exactly_once() {
    let Some(mut c) = setup() else { return };
    let ttl = Duration::from_millis(TTL_MS);
    let t0 = Instant::now();
    let mut rs: Vec<Replica> = (0..REPLICAS)
        .map(|i| c.start_replica(i, "main", &[]))
        .collect();

    // 1. Exactly one leader, the same in etcd and in the replicas.
    let (leader, token) = wait_leader_among(&all(&rs), None, Duration::from_secs(15));
    let election = t0.elapsed();
    let (rec, rev) = c.get("/holdfast/main/leader").expect("leader key");
    assert_eq!(
        rec["name"],
        leader.as_str(),
        "etcd's leader key names the leader"
    );
    assert_eq!(rev, token, "the token is the leader key's create_revision");
    let epoch = wait_for("the epoch to advance", Duration::from_secs(5), || {
        Ok(c.get("/holdfast/main/epoch")
            .filter(|(e, _)| e["epoch"] == token))
    })
    .expect("epoch");
    assert_eq!(epoch.0["leader"], leader.as_str());
    hold_for(Duration::from_millis(600), || {
        assert_eq!(leaders(&all(&rs)).len(), 1, "exactly one leader");
    });
    eprintln!(
        "election: {} ms from start to one leader ({leader}, token {token})",
        ms(election)
    );

    // 2. SIGKILL the leader after two of five steps.
    let steps = ["s1", "s2", "s3", "s4", "s5"];
    c.put(
        "/holdfast/main/migration",
        &migration("m1", "hostB", &steps),
    );
    wait_for("two steps recorded", Duration::from_secs(15), || {
        Ok((c.keys("/holdfast/main/steps/m1/").len() >= 2).then_some(()))
    })
    .expect("two steps");
    let li = rs
        .iter()
        .position(|r| r.name == leader)
        .expect("leader replica");
    let killed = Instant::now();
    c.lab.kill(rs[li].proc, Signal::Kill);
    let others: Vec<&Replica> = rs.iter().filter(|r| r.name != leader).collect();
    let (leader2, token2) = wait_leader_among(&others, Some(&leader), ttl * 3);
    let failover = killed.elapsed();
    eprintln!(
        "failover: {} ms from SIGKILL of {leader} to {leader2} leading (token {token2})",
        ms(failover)
    );
    assert!(token2 > token, "a new leader has a larger token");
    assert!(
        failover < ttl * 2,
        "failover {failover:?} within about the TTL"
    );
    let done = wait_done(&mut c, "main", Duration::from_secs(20));
    assert_eq!(done["finished_by"], token2);
    let cmds = commands(&mut c, "main", "hostB", "m1");
    exactly_once(&cmds, &steps).expect("each step exactly once");
    let tokens: Vec<i64> = steps.iter().map(|s| cmds[*s][0]).collect();
    assert!(
        tokens.contains(&token) && tokens.contains(&token2),
        "{tokens:?}"
    );
    assert!(
        tokens.windows(2).all(|w| w[0] <= w[1]),
        "tokens never go back: {tokens:?}"
    );
    assert_eq!(c.keys("/holdfast/main/steps/m1/").len(), steps.len());
    let (unit, _) = c.get("/holdfast/main/units/u1").expect("unit placement");
    assert_eq!(unit["primary"], "hostB");
    assert_eq!(unit["epoch"], token2);
    rs[li] = c.start_replica(li, "main", &[]);

    // 3. SIGSTOP the leader at the start of a step; SIGCONT after the takeover.
    let steps3 = ["t1", "t2", "t3"];
    c.put(
        "/holdfast/main/migration",
        &migration("m2", "hostC", &steps3),
    );
    let li = rs
        .iter()
        .position(|r| r.name == leader2)
        .expect("leader replica");
    let step = wait_step_start(&rs[li]);
    let before = status(&rs[li]).expect("status");
    c.lab.kill(rs[li].proc, Signal::Stop);
    let others: Vec<&Replica> = rs.iter().filter(|r| r.name != leader2).collect();
    let (leader3, token3) = wait_leader_among(&others, Some(&leader2), ttl * 3);
    eprintln!("SIGSTOP of {leader2} in {step}: {leader3} leads with token {token3}");
    wait_done(&mut c, "main", Duration::from_secs(20));
    c.lab.kill(rs[li].proc, Signal::Cont);
    let after = wait_for(
        "the deposed leader to be refused and demote",
        Duration::from_secs(10),
        || {
            Ok(status(&rs[li]).filter(|s| {
                num(s, "fenced_rejections") > num(&before, "fenced_rejections")
                    && num(s, "demotions") > num(&before, "demotions")
                    && s["role"] == "follower"
                    && num(s, "updated_unix_ms") > num(&before, "updated_unix_ms")
            }))
        },
    )
    .expect("fenced and demoted");
    assert_eq!(
        num(&after, "steps_committed"),
        num(&before, "steps_committed")
    );
    exactly_once(&commands(&mut c, "main", "hostC", "m2"), &steps3)
        .expect("each step exactly once");
    assert_eq!(
        c.get("/holdfast/main/epoch").expect("epoch").0["epoch"],
        token3
    );

    // 4. One etcd member down: no effect.
    let (leader4, token4) = wait_leader_among(&all(&rs), None, ttl * 3);
    let li = rs
        .iter()
        .position(|r| r.name == leader4)
        .expect("leader replica");
    let demotions = num(&status(&rs[li]).expect("status"), "demotions");
    // A follower of etcd's own election: "one member down" without an etcd
    // leader change (which extends leases, see docs/control-plane.md).
    let el = c.etcd.wait_leader(&mut c.lab, ttl).expect("etcd leader");
    let victim = (0..REPLICAS).find(|&i| i != el).expect("another member");
    c.etcd.kill(&mut c.lab, victim).expect("kill member");
    c.put(
        "/holdfast/main/migration",
        &migration("m3", "hostD", &["u1", "u2"]),
    );
    wait_done(&mut c, "main", Duration::from_secs(15));
    exactly_once(&commands(&mut c, "main", "hostD", "m3"), &["u1", "u2"]).expect("exactly once");
    let s = status(&rs[li]).expect("status");
    assert_eq!(
        (s["role"].as_str(), s["token"].as_i64()),
        (Some("leader"), Some(token4))
    );
    assert_eq!(
        num(&s, "demotions"),
        demotions,
        "no demotion with one member down"
    );

    // 5. Quorum lost: nobody acts, nothing is written; back: a leader resumes.
    let second = (0..REPLICAS)
        .find(|&i| i != victim && i != el)
        .expect("a third member");
    let lost = Instant::now();
    c.etcd.kill(&mut c.lab, second).expect("kill second member");
    // The etcd member left is etcd's leader: it answers lease renewals until
    // it steps down (its election timeout, 1 s), and the controller leader
    // acts until TTL − margin after the last renewal: about 3 s at most.
    wait_for("no replica to lead", ttl + Duration::from_secs(2), || {
        Ok(leaders(&all(&rs)).is_empty().then_some(()))
    })
    .expect("no leader without quorum");
    eprintln!("quorum lost: no leader after {} ms", ms(lost.elapsed()));
    let alive = c.etcd.members()[el].clone();
    let rev = |c: &mut Ctl| -> i64 {
        let ep = format!("--endpoints={}", alive.client_url());
        let out = c
            .lab
            .exec_ok(
                alive.host,
                &["etcdctl", &ep, "get", "x", "--consistency=s", "-w", "json"],
            )
            .expect("serializable read");
        serde_json::from_str::<Value>(&out).expect("json")["header"]["revision"]
            .as_i64()
            .expect("revision")
    };
    let r0 = rev(&mut c);
    hold_for(ttl, || {
        assert!(
            leaders(&all(&rs)).is_empty(),
            "no leader acts without quorum"
        );
    });
    assert_eq!(rev(&mut c), r0, "nothing written without quorum");
    let back = Instant::now();
    c.etcd.restart(&mut c.lab, victim).expect("restart member");
    c.etcd.restart(&mut c.lab, second).expect("restart member");
    c.etcd
        .wait_leader(&mut c.lab, Duration::from_secs(20))
        .expect("etcd leader");
    let (leader5, _) = wait_leader_among(&all(&rs), None, Duration::from_secs(20));
    eprintln!(
        "quorum back: {leader5} leads {} ms after the restarts",
        ms(back.elapsed())
    );
    c.put(
        "/holdfast/main/migration",
        &migration("m4", "hostE", &["v1"]),
    );
    wait_done(&mut c, "main", Duration::from_secs(15));
    exactly_once(&commands(&mut c, "main", "hostE", "m4"), &["v1"]).expect("exactly once");
    for r in &rs {
        c.lab.stop_proc(r.proc);
    }

    // 6. Negative control: unfenced replicas write a step twice.
    let neg: Vec<Replica> = (0..2)
        .map(|i| c.start_replica(i, "neg", &["--unfenced"]))
        .collect();
    let negs: Vec<&Replica> = neg.iter().collect();
    let (nl, _) = wait_leader_among(&negs, None, Duration::from_secs(15));
    let steps6 = ["n1", "n2", "n3"];
    c.put(
        "/holdfast/neg/migration",
        &migration("m6", "hostF", &steps6),
    );
    let ni = neg.iter().position(|r| r.name == nl).expect("leader");
    wait_step_start(&neg[ni]);
    c.lab.kill(neg[ni].proc, Signal::Stop);
    wait_leader_among(&[&neg[1 - ni]], None, ttl * 3);
    wait_done(&mut c, "neg", Duration::from_secs(20));
    c.lab.kill(neg[ni].proc, Signal::Cont);
    let dup = wait_for(
        "the unfenced deposed leader to write",
        Duration::from_secs(10),
        || Ok(exactly_once(&commands(&mut c, "neg", "hostF", "m6"), &steps6).err()),
    )
    .expect("a duplicate write");
    eprintln!("negative control: without the fence, {dup}");
    c.etcd.stop(&mut c.lab);
}
