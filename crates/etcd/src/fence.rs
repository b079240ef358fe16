//! The fencing token and the agent-side check.
//!
//! A leader's token is the etcd revision at which it created the leader key
//! (the key's `create_revision`). etcd revisions only grow, and every new
//! leader creates the key anew, so a later leader always has a larger token.
//! Every command a leader writes carries its token; the store epoch advances
//! to it on election. An agent remembers the highest token it has seen and
//! refuses a command with an older one (`holdfast_control_api::accept_token`,
//! the protocol's rule).

use serde::{Deserialize, Serialize};

/// A leader's fencing token: the `create_revision` of its leader key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Token(pub i64);

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
