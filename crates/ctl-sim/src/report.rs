//! The harness's figures, as JSON (`--json`) and as a table.

use serde::{Deserialize, Serialize};

use crate::churn::Churn;
use crate::fleet::FleetSpec;

/// The steady state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Steady {
    pub seconds: f64,
    /// etcd's revision growth per second (every write transaction).
    pub etcd_writes_per_s: f64,
    pub etcd_db_bytes: u64,
    /// The leading replica's CPU, in cores.
    pub leader_cpu_cores: f64,
    pub leader_rss_bytes: u64,
    /// What the simulated agents sent the leader.
    pub heartbeats_per_s: f64,
    pub measurements_per_s: f64,
    /// Probe misses the simulated agents discarded because they ran late
    /// themselves (the harness short of CPU: failures are then seen late).
    #[serde(default)]
    pub discarded_per_s: f64,
    /// Their etcd lease renewals.
    pub renewals_per_s: f64,
    pub renewal_failures: u64,
    /// The probe plan: the most probes any host's agent sends per second.
    pub probes_per_host_per_s: f64,
    /// The most probes any agent server sends per second.
    pub probes_per_agent_server_per_s: f64,
    /// The same two as the agents' probers hold them (with `--probes
    /// leader`: the plans the leader pushed).
    #[serde(default)]
    pub held_per_host_per_s: f64,
    #[serde(default)]
    pub held_per_agent_server_per_s: f64,
    /// Verdicts in the window (there should be none).
    pub verdicts: usize,
}

/// The failed hosts' units' takeovers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Takeover {
    /// Units whose `Takeover` command was seen.
    pub commanded: usize,
    /// From the injection to the last one.
    pub to_last_ms: Option<u64>,
    /// From the last verdict to the last one.
    pub after_last_verdict_ms: Option<i64>,
}

/// One injected failure.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// `host`, `rack`, `leader`, `etcd`.
    pub kind: String,
    /// Hosts made to fail, and the units they ran.
    pub hosts: usize,
    pub units: usize,
    /// Host verdicts seen (host or host network).
    pub verdicts: usize,
    pub to_first_verdict_ms: Option<u64>,
    pub to_last_verdict_ms: Option<u64>,
    pub takeovers: Takeover,
    /// Units whose primary or backup changed (read back from etcd).
    pub moved: usize,
    /// What TRIPOD and the naive choice would move (computed).
    pub churn: Option<Churn>,
    /// `leader`: until another replica leads; `etcd`: until etcd has a
    /// leader again.
    pub to_new_leader_ms: Option<u64>,
    /// `leader`: agents attached to the new leader, of those alive.
    pub agents_attached: Option<usize>,
    pub agents_live: Option<usize>,
    pub to_all_attached_ms: Option<u64>,
    /// `etcd`: whether the controllers' leader changed.
    pub leader_changed: Option<bool>,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub spec: FleetSpec,
    /// Host agents and agent servers.
    pub agents: usize,
    pub steady: Steady,
    pub failures: Vec<Failure>,
}

fn ms(v: Option<u64>) -> String {
    v.map_or_else(
        || "-".to_string(),
        |v| format!("{:.2} s", v as f64 / 1000.0),
    )
}

impl Report {
    /// The report as text.
    pub fn table(&self) -> String {
        let s = &self.steady;
        let mut out = format!(
            "holdfast-ctl-sim: {} hosts ({} agents with the agent servers), {} units, probes {:?} (fanout {}), racks of {}\n\n",
            self.spec.hosts, self.agents, self.spec.units, self.spec.probes, self.spec.fanout, self.spec.rack
        );
        out.push_str(&format!(
            "steady state over {:.0} s:\n  etcd writes/s {:.1}, etcd db {:.1} MB\n  leader CPU {:.2} cores, RSS {:.0} MB\n  agents sent {:.0} heartbeats/s, {:.0} measurements/s ({:.0} misses/s discarded: the simulated agents ran late), {:.0} lease renewals/s ({} failed)\n  probes per host's agent {:.0}/s, per agent server {:.0}/s (as the probers hold them: {:.0}/s, {:.0}/s)\n  verdicts {}\n",
            s.seconds,
            s.etcd_writes_per_s,
            s.etcd_db_bytes as f64 / 1e6,
            s.leader_cpu_cores,
            s.leader_rss_bytes as f64 / 1e6,
            s.heartbeats_per_s,
            s.measurements_per_s,
            s.discarded_per_s,
            s.renewals_per_s,
            s.renewal_failures,
            s.probes_per_host_per_s,
            s.probes_per_agent_server_per_s,
            s.held_per_host_per_s,
            s.held_per_agent_server_per_s,
            s.verdicts,
        ));
        for f in &self.failures {
            match f.kind.as_str() {
                "host" | "rack" => {
                    let churn = f.churn.map_or_else(String::new, |c| {
                        format!(
                            "; placement churn: {} moved (TRIPOD computes {}, naive {}, {} must move)",
                            f.moved, c.tripod, c.naive, c.must_move
                        )
                    });
                    out.push_str(&format!(
                        "{}: {} hosts, {} units: verdicts {} of {} (first {}, last {}); takeovers commanded {} of {} (last {}, {} after the last verdict){churn}\n",
                        f.kind,
                        f.hosts,
                        f.units,
                        f.verdicts,
                        f.hosts,
                        ms(f.to_first_verdict_ms),
                        ms(f.to_last_verdict_ms),
                        f.takeovers.commanded,
                        f.units,
                        ms(f.takeovers.to_last_ms),
                        f.takeovers
                            .after_last_verdict_ms
                            .map_or_else(|| "-".to_string(), |v| format!("{:.2} s", v as f64 / 1000.0)),
                    ));
                }
                "leader" => out.push_str(&format!(
                    "leader killed: new leader after {}; {} of {} agents attached to it (all after {})\n",
                    ms(f.to_new_leader_ms),
                    f.agents_attached.unwrap_or(0),
                    f.agents_live.unwrap_or(0),
                    ms(f.to_all_attached_ms),
                )),
                _ => out.push_str(&format!(
                    "etcd leader member killed: etcd leader again after {}; verdicts after it {}; controllers' leader changed: {}\n",
                    ms(f.to_new_leader_ms),
                    f.verdicts,
                    f.leader_changed.unwrap_or(false),
                )),
            }
        }
        out
    }
}
