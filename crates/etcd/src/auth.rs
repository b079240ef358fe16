//! etcd's users and roles for the control plane (issue 30,
//! `holdfast ctl etcd-auth init`): who may read and write which keys of
//! the layout ([`crate::state`]) once etcd runs with `--client-cert-auth`
//! and authentication on. etcd then takes a client certificate's common
//! name as its user, so the users are named as `holdfast ctl certs init`
//! names its subjects (`ROLE:NAME`).
//!
//! | role | user(s) | keys |
//! |---|---|---|
//! | `holdfast-controller` | `controller:NAME` | read and write `/holdfast/` (every cluster's keys) |
//! | `holdfast-operator` | `operator:NAME` | read `/holdfast/`; write `requests/` and `units/` of the cluster |
//! | `holdfast-agent-HOST` | `agent:HOST` | read `leader` and `agents/`; write its own `agents/HOST` and `agent-servers/HOST` (exact keys) |
//! | `root` (etcd's) | `root` | everything, and the users and roles themselves |
//!
//! [`plan`] is pure (what should exist); [`apply`] makes etcd match it,
//! idempotently: roles and users are created when missing, permissions
//! and `holdfast-*` roles no longer planned are revoked, then
//! authentication is enabled. Before authentication is on anyone may run
//! it; afterwards only `root` (its certificate, CN `root`).
//!
//! # Known issues
//! - Users and roles of hosts or controllers no longer named are left in
//!   etcd (with their roles); delete them with `etcdctl user delete`.
//! - Leases are not keys: etcd 3.4 lets any authenticated user grant one
//!   and renew any lease whose id it knows (a revoke needs write access to
//!   the lease's keys).

use etcd_client::{Client, Permission, PermissionType, UserAddOptions};

use crate::state::Keys;
use crate::store::{Store, StoreError};

/// The role of every controller replica.
pub const CONTROLLER_ROLE: &str = "holdfast-controller";
/// The role of every operator (`holdfast ctl`).
pub const OPERATOR_ROLE: &str = "holdfast-operator";
/// etcd's own administrator (user and role).
pub const ROOT: &str = "root";
/// The prefix of every Holdfast key.
pub const ALL_CLUSTERS: &str = "/holdfast/";

/// The role of host `host`'s agent.
pub fn agent_role(host: &str) -> String {
    format!("holdfast-agent-{host}")
}

/// What a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

impl Access {
    fn kind(self) -> PermissionType {
        match self {
            Access::Read => PermissionType::Read,
            Access::Write => PermissionType::Write,
            Access::ReadWrite => PermissionType::Readwrite,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::ReadWrite => "readwrite",
        }
    }
}

/// One permission of a role: a key, or every key under a prefix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub key: String,
    pub prefix: bool,
    pub access: Access,
}

impl Grant {
    fn key(key: String, access: Access) -> Grant {
        Grant {
            key,
            prefix: false,
            access,
        }
    }

    fn prefix(key: String, access: Access) -> Grant {
        Grant {
            key,
            prefix: true,
            access,
        }
    }

    /// The key range's end as etcd stores it (empty: the one key).
    pub fn range_end(&self) -> Vec<u8> {
        if !self.prefix {
            return Vec::new();
        }
        let mut end = self.key.as_bytes().to_vec();
        while let Some(last) = end.pop() {
            if last < 0xff {
                end.push(last + 1);
                return end;
            }
        }
        vec![0]
    }

    fn permission(&self) -> Permission {
        let p = Permission::new(self.access.kind(), self.key.clone());
        if self.prefix {
            p.with_prefix()
        } else {
            p
        }
    }
}

/// A role and its permissions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleSpec {
    pub name: String,
    pub grants: Vec<Grant>,
}

/// A user (a certificate's common name) and its roles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSpec {
    pub name: String,
    pub roles: Vec<String>,
}

/// Every role and user of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthPlan {
    pub roles: Vec<RoleSpec>,
    pub users: Vec<UserSpec>,
}

/// The roles and users for `controllers`, `hosts` (the agent server's
/// host among them) and `operators` of the cluster of `keys`, and `root`.
pub fn plan(
    keys: &Keys,
    controllers: &[String],
    hosts: &[String],
    operators: &[String],
) -> AuthPlan {
    let p = keys.prefix();
    let mut roles = vec![
        RoleSpec {
            name: CONTROLLER_ROLE.into(),
            grants: vec![Grant::prefix(ALL_CLUSTERS.into(), Access::ReadWrite)],
        },
        RoleSpec {
            name: OPERATOR_ROLE.into(),
            grants: vec![
                Grant::prefix(ALL_CLUSTERS.into(), Access::Read),
                Grant::prefix(format!("{p}requests/"), Access::ReadWrite),
                Grant::prefix(format!("{p}units/"), Access::ReadWrite),
            ],
        },
    ];
    let mut users = vec![UserSpec {
        name: ROOT.into(),
        roles: vec![ROOT.into()],
    }];
    for c in controllers {
        users.push(UserSpec {
            name: format!("controller:{c}"),
            roles: vec![CONTROLLER_ROLE.into()],
        });
    }
    for o in operators {
        users.push(UserSpec {
            name: format!("operator:{o}"),
            roles: vec![OPERATOR_ROLE.into()],
        });
    }
    for h in hosts {
        let role = agent_role(h);
        roles.push(RoleSpec {
            name: role.clone(),
            grants: vec![
                Grant::key(keys.leader(), Access::Read),
                Grant::prefix(keys.agent(""), Access::Read),
                Grant::key(keys.agent(h), Access::ReadWrite),
                Grant::key(keys.agent_server(h), Access::ReadWrite),
            ],
        });
        users.push(UserSpec {
            name: format!("agent:{h}"),
            roles: vec![role],
        });
    }
    users.dedup_by(|a, b| a.name == b.name);
    AuthPlan { roles, users }
}

/// What [`apply`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// One line per change (`role add holdfast-controller`, ...); empty
    /// when etcd already matched the plan (`auth enable`, which etcd 3.4
    /// answers the same whether it was on or not, is not listed).
    pub changes: Vec<String>,
}

fn exists(e: &etcd_client::Error) -> bool {
    e.to_string().contains("already exists")
}

/// Makes etcd's roles and users those of `plan` and enables
/// authentication.
pub async fn apply(store: &mut Store, plan: &AuthPlan) -> Result<Applied, StoreError> {
    let plan = plan.clone();
    store
        .call(move |c| {
            let plan = plan.clone();
            async move { apply_on(c, &plan).await }
        })
        .await
}

async fn apply_on(mut c: Client, plan: &AuthPlan) -> Result<Applied, etcd_client::Error> {
    let mut out = Applied::default();
    for r in &plan.roles {
        match c.role_add(r.name.as_str()).await {
            Ok(_) => out.changes.push(format!("role add {}", r.name)),
            Err(e) if exists(&e) => {}
            Err(e) => return Err(e),
        }
        let have = c.role_get(r.name.as_str()).await?.permissions();
        for p in &have {
            let keep = r.grants.iter().any(|g| {
                g.key.as_bytes() == p.key()
                    && g.range_end() == p.range_end()
                    && g.access.kind() as i32 == p.get_type()
            });
            if !keep {
                let opts = etcd_client::RoleRevokePermissionOptions::new()
                    .with_range_end(p.range_end().to_vec());
                c.role_revoke_permission(r.name.as_str(), p.key().to_vec(), Some(opts))
                    .await?;
                out.changes.push(format!(
                    "role revoke-permission {} {}",
                    r.name,
                    String::from_utf8_lossy(p.key())
                ));
            }
        }
        for g in &r.grants {
            let there = have.iter().any(|p| {
                g.key.as_bytes() == p.key()
                    && g.range_end() == p.range_end()
                    && g.access.kind() as i32 == p.get_type()
            });
            if !there {
                c.role_grant_permission(r.name.as_str(), g.permission())
                    .await?;
                out.changes.push(format!(
                    "role grant-permission {} {} {}{}",
                    r.name,
                    g.access.as_str(),
                    g.key,
                    if g.prefix { " --prefix" } else { "" }
                ));
            }
        }
    }
    for u in &plan.users {
        match c
            .user_add(
                u.name.as_str(),
                "",
                Some(UserAddOptions::new().with_no_pwd()),
            )
            .await
        {
            Ok(_) => out
                .changes
                .push(format!("user add {} --no-password", u.name)),
            Err(e) if exists(&e) => {}
            Err(e) => return Err(e),
        }
        let have: Vec<String> = c.user_get(u.name.as_str()).await?.roles().to_vec();
        for r in have
            .iter()
            .filter(|r| r.starts_with("holdfast-") && !u.roles.contains(r))
        {
            c.user_revoke_role(u.name.as_str(), r.as_str()).await?;
            out.changes.push(format!("user revoke-role {} {r}", u.name));
        }
        for r in u.roles.iter().filter(|r| !have.contains(r)) {
            c.user_grant_role(u.name.as_str(), r.as_str()).await?;
            out.changes.push(format!("user grant-role {} {r}", u.name));
        }
    }
    // etcd 3.4 has no `auth status`; enabling twice is no error.
    c.auth_enable().await?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_agent_writes_only_its_own_keys() {
        let p = plan(
            &Keys::new("default"),
            &names(&["c1"]),
            &names(&["a", "b"]),
            &names(&["admin"]),
        );
        let role = p
            .roles
            .iter()
            .find(|r| r.name == "holdfast-agent-a")
            .unwrap();
        let writes: Vec<&str> = role
            .grants
            .iter()
            .filter(|g| g.access != Access::Read)
            .map(|g| {
                assert!(
                    !g.prefix,
                    "{g:?}: one key, not a prefix (agents/a is one of agents/ab)"
                );
                g.key.as_str()
            })
            .collect();
        assert_eq!(
            writes,
            [
                "/holdfast/default/agents/a",
                "/holdfast/default/agent-servers/a"
            ]
        );
        let users: Vec<&str> = p.users.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(
            users,
            [
                "root",
                "controller:c1",
                "operator:admin",
                "agent:a",
                "agent:b"
            ]
        );
        assert_eq!(p.users[0].roles, ["root"]);
    }

    #[test]
    fn a_prefix_ends_after_its_last_byte() {
        let g = Grant::prefix("/holdfast/".into(), Access::Read);
        assert_eq!(g.range_end(), b"/holdfast0");
        assert!(Grant::key("/k".into(), Access::Read).range_end().is_empty());
        assert_eq!(
            Grant::prefix("a\u{ff}".into(), Access::Read).range_end(),
            b"a\xc3\xc0"
        );
    }
}
