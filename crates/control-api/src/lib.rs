//! The control plane's wire protocol (issue 11): `holdfast.control.v1`,
//! compiled from `proto/holdfast/control/v1/control.proto` (read it for
//! the semantics). Host agents are gRPC clients of the leading controller
//! replica's `Controller` service; each keeps one `Attach` stream open.
//!
//! [`accept_token`] is the agents' fencing rule, kept here so that every
//! side reads it the same way.
//!
//! [`tls`] is the mutual TLS of these services (who a certificate names,
//! what it may claim, the `--tls-*` files), and [`certs`] what
//! `holdfast ctl certs init` makes (issue 30; docs/security.md).

#![forbid(unsafe_code)]

pub mod certs;
pub mod tls;

/// Generated from `control.proto`.
pub mod v1 {
    tonic::include_proto!("holdfast.control.v1");
}

/// How a command's error starts when it can never succeed as asked (an
/// upgrade between builds that cannot read each other's records): the
/// controller drops the migration instead of asking again.
pub const REFUSED: &str = "refused: ";

/// Version of the protocol this build speaks (`Hello.schema`). Fields
/// added since (`Hello.reports_refused`, `Measurement.refused`) are
/// optional: an older peer reads them as absent.
pub const SCHEMA: u32 = 1;

/// Whether an agent that has accepted commands up to `highest` may carry
/// out a command with `token`: only the current leader's (same token) or a
/// newer leader's. Returns the new highest token when accepted.
pub fn accept_token(token: u64, highest: u64) -> Option<u64> {
    (token != 0 && token >= highest).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::v1::{agent_report, command, AgentReport, Command, FenceUnit, Hello};
    use super::*;
    use prost::Message;

    #[test]
    fn tokens_never_go_back() {
        assert_eq!(accept_token(7, 0), Some(7));
        assert_eq!(accept_token(7, 7), Some(7));
        assert_eq!(accept_token(9, 7), Some(9));
        assert_eq!(accept_token(6, 7), None, "a deposed leader's command");
        assert_eq!(accept_token(0, 0), None, "no token");
    }

    #[test]
    fn an_agent_following_the_rule_never_goes_back() {
        let mut highest = 0;
        let mut done = Vec::new();
        for t in [3, 5, 4, 5, 9, 3, 10] {
            if let Some(h) = accept_token(t, highest) {
                highest = h;
                done.push(t);
            }
        }
        assert_eq!(done, vec![3, 5, 5, 9, 10]);
    }

    #[test]
    fn messages_round_trip() {
        let r = AgentReport {
            body: Some(agent_report::Body::Hello(Hello {
                host: "b".into(),
                agent_server: false,
                units: Vec::new(),
                highest_token: 42,
                schema: SCHEMA,
                version: "0.1.0 (v0.1.0-3-g1a2b3c4)".into(),
                reports_refused: true,
                probe_plans: true,
            })),
        };
        assert_eq!(AgentReport::decode(&*r.encode_to_vec()).unwrap(), r);
        let c = Command {
            token: 43,
            id: 1,
            body: Some(command::Body::FenceUnit(FenceUnit {
                unit: "edge-1".into(),
            })),
        };
        assert_eq!(Command::decode(&*c.encode_to_vec()).unwrap(), c);
    }
}
