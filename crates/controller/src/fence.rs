//! The fencing token and the agent-side check.
//!
//! A leader's token is the etcd revision at which it created the leader key
//! (the key's `create_revision`). etcd revisions only grow, and every new
//! leader creates the key anew, so a later leader always has a larger token.
//! Every command a leader writes carries its token; the store epoch advances
//! to it on election. An agent remembers the highest token it has seen and
//! refuses a command with an older one ([`accept`]).

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

/// The agent-side check: a command carrying `token` is carried out only if
/// no newer leader has been heard from (`token >= highest_seen`). Equal
/// tokens are the same leader's further commands. The caller then raises
/// `highest_seen` to `token`.
pub fn accept(token: Token, highest_seen: Token) -> bool {
    token >= highest_seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_tokens_are_refused_same_and_newer_accepted() {
        assert!(accept(Token(7), Token(7)));
        assert!(accept(Token(9), Token(7)));
        assert!(!accept(Token(6), Token(7)));
        assert!(accept(Token(1), Token(0)));
    }

    #[test]
    fn an_agent_following_the_rule_never_goes_back() {
        let mut highest = Token(0);
        let mut done = Vec::new();
        for t in [3, 5, 4, 5, 9, 3, 10] {
            if accept(Token(t), highest) {
                highest = Token(t);
                done.push(t);
            }
        }
        assert_eq!(done, vec![3, 5, 5, 9, 10]);
    }
}
