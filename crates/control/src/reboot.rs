//! `scontrol reboot` and `cancel_reboot`: a node's reboot by the site's `reboot_program`
//! (Slurm's RebootProgram), requested (`REBOOT_REQUESTED`, `@`), issued once the node is idle
//! (`REBOOT_ISSUED`, `^`: the agent runs the program, the node takes no work), and complete
//! when its agent registers again (its state then as `nextstate=` says); a node that does not
//! come back within `resume_timeout` is marked down (`reboot timed out`). `ASAP` drains the
//! node at once, so it empties. Administrators only (Slurm's super users), as Slurm's.

use crate::{Controller, Order, Refused};
use model::{NodeState, Time};
use serde::{Deserialize, Serialize};

/// Where a rebooted node goes (`nextstate=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NextState {
    /// Back to service: its drain and reason cleared.
    Resume,
    /// Down, with `reboot complete` added to its reason.
    Down,
}

/// A reboot asked for and not yet complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reboot {
    /// `ASAP`: drained at the request.
    pub asap: bool,
    /// `nextstate=`, if given (`ASAP` alone means `resume`).
    pub next: Option<NextState>,
    /// The node was drained before the request (its drain outlives the reboot unless resumed).
    pub was_drained: bool,
    /// When the program was ordered run (`REBOOT_ISSUED`).
    pub issued_at: Option<Time>,
}

/// Most nodes one request names (`ALL` aside).
const MAX_NAMES: usize = 100_000;

impl Controller {
    /// `scontrol reboot [ASAP] [nextstate=RESUME|DOWN] [reason=..] NODES|ALL` by `uid`.
    /// Nodes with a reboot already asked for are left as they are, as Slurm's.
    #[allow(clippy::too_many_arguments)]
    pub fn reboot_nodes(
        &mut self,
        uid: u32,
        user: &str,
        names: &[String],
        asap: bool,
        next: Option<NextState>,
        reason: Option<String>,
    ) -> Result<(), Refused> {
        if self.admin_level(uid, user) != model::accounting::AdminLevel::Administrator {
            return Err(Refused::Forbidden("Permission denied".into()));
        }
        if self.settings.reboot_program.is_none() {
            return Err(Refused::Invalid("RebootProgram isn't defined: set reboot_program in the controller's tandem.toml".into()));
        }
        if let Some(r) = &reason {
            if r.is_empty() || r.len() > 1024 || r.chars().any(char::is_control) {
                return Err(Refused::Invalid("invalid reason: 1 to 1024 characters, no control characters".into()));
            }
        }
        let idx = self.node_indices(names)?;
        for i in idx {
            let rec = &mut self.nodes[i];
            if rec.reboot.is_some() {
                continue;
            }
            let was_drained = rec.node.state == NodeState::Drain;
            if let Some(r) = &reason {
                rec.reason = Some(r.clone());
            }
            if asap {
                if rec.node.state == NodeState::Up {
                    rec.node.state = NodeState::Drain;
                }
                if rec.reason.is_none() {
                    rec.reason = Some("Reboot ASAP".into());
                }
            }
            if rec.reason.is_none() {
                rec.reason = Some("reboot requested".into());
            }
            rec.reboot = Some(Reboot { asap, next: next.or(asap.then_some(NextState::Resume)), was_drained, issued_at: None });
            self.dirty_nodes.insert(i);
        }
        self.nodes_changed();
        Ok(())
    }

    /// `scontrol cancel_reboot NODES`: a reboot not yet issued is forgotten; an `ASAP` one's
    /// drain is undone (unless the node was drained before it).
    pub fn cancel_reboot(&mut self, uid: u32, user: &str, names: &[String]) -> Result<(), Refused> {
        if self.admin_level(uid, user) != model::accounting::AdminLevel::Administrator {
            return Err(Refused::Forbidden("Permission denied".into()));
        }
        let idx = self.node_indices(names)?;
        let mut issued = Vec::new();
        for i in idx {
            let rec = &mut self.nodes[i];
            let Some(r) = rec.reboot.clone() else { continue };
            if r.issued_at.is_some() {
                issued.push(rec.node.name.clone());
                continue;
            }
            rec.reboot = None;
            if r.asap && !r.was_drained && rec.node.state == NodeState::Drain {
                rec.node.state = NodeState::Up;
                rec.reason = None;
            } else if rec.reason.as_deref() == Some("reboot requested") {
                rec.reason = None;
            }
            self.dirty_nodes.insert(i);
        }
        self.nodes_changed();
        if !issued.is_empty() {
            return Err(Refused::Conflict(format!(
                "Reboot already issued on node {}: it cannot be cancelled (any other reboot named was)",
                issued.join(",")
            )));
        }
        Ok(())
    }

    /// Node indices of `names` (a hostlist's names, or `ALL`).
    fn node_indices(&self, names: &[String]) -> Result<Vec<usize>, Refused> {
        if names.len() == 1 && names[0].eq_ignore_ascii_case("ALL") {
            return Ok((0..self.nodes.len()).filter(|&i| !self.nodes[i].deleted).collect());
        }
        if names.is_empty() || names.len() > MAX_NAMES {
            return Err(Refused::Invalid("Missing node list. Specify ALL|<NodeList>".into()));
        }
        names
            .iter()
            .map(|n| {
                self.node_index
                    .get(n)
                    .copied()
                    .filter(|&i| !self.nodes[i].deleted)
                    .ok_or_else(|| Refused::NotFound("Invalid node name specified".into()))
            })
            .collect()
    }

    /// At each tick: issues the reboots of nodes that are empty now and whose agent answers
    /// (a down node's too, as Slurm's), and marks down, to stay down, the nodes whose reboot did
    /// not bring their agent back within `resume_timeout`.
    pub(crate) fn reboots(&mut self, now: Time) {
        let program = self.settings.reboot_program.clone();
        let timeout = self.settings.resume_timeout;
        let mut changed = false;
        for i in 0..self.nodes.len() {
            let rec = &mut self.nodes[i];
            let Some(issued) = rec.reboot.as_ref().map(|r| r.issued_at) else { continue };
            match (issued, &program) {
                (None, Some(program)) if rec.usage.jobs == 0 && rec.runs.is_empty() && rec.lease_until >= now && !rec.deleted => {
                    if let Some(r) = rec.reboot.as_mut() {
                        r.issued_at = Some(now);
                    }
                    // No work lands on it, and nothing but its agent's registration resumes it.
                    if rec.node.state == NodeState::Up {
                        rec.node.state = NodeState::Drain;
                    }
                    (rec.health_drained, rec.self_drained) = (false, false);
                    rec.reason = Some(format!("{} : reboot issued", rec.reason.as_deref().unwrap_or("reboot requested")));
                    rec.push(Order::Reboot { program: program.clone() });
                    self.dirty_nodes.insert(i);
                    changed = true;
                }
                (Some(t), _) if now >= t + timeout => {
                    rec.reboot = None;
                    rec.orders.retain(|(_, o)| !matches!(o, Order::Reboot { .. }));
                    rec.node.state = NodeState::Down;
                    rec.reboot_down = true;
                    rec.reason = Some("reboot timed out".into());
                    self.dirty_nodes.insert(i);
                    changed = true;
                }
                _ => {}
            }
        }
        if changed {
            self.nodes_changed();
        }
    }

    /// Node `i`'s agent registered: a reboot issued to it is complete.
    pub(crate) fn rebooted(&mut self, i: usize) {
        let rec = &mut self.nodes[i];
        let Some(r) = rec.reboot.clone().filter(|r| r.issued_at.is_some()) else { return };
        rec.reboot = None;
        // Never again: the agent after the reboot starts its acknowledgements afresh.
        rec.orders.retain(|(_, o)| !matches!(o, Order::Reboot { .. }));
        match r.next {
            Some(NextState::Down) => {
                rec.node.state = NodeState::Down;
                rec.reboot_down = true;
                rec.reason = Some(format!("{} : reboot complete", rec.reason.as_deref().unwrap_or("reboot requested")));
            }
            Some(NextState::Resume) => {
                rec.node.state = NodeState::Up;
                (rec.reason, rec.reboot_down, rec.health_down) = (None, false, false);
            }
            None if r.was_drained => {
                rec.node.state = NodeState::Drain;
                rec.reason = rec.reason.as_deref().map(|s| s.trim_end_matches(" : reboot issued").to_string());
            }
            // A node its health check (or an earlier reboot) keeps down stays down.
            None if rec.health_down || rec.reboot_down => rec.node.state = NodeState::Down,
            None => {
                rec.node.state = NodeState::Up;
                rec.reason = None;
            }
        }
        self.dirty_nodes.insert(i);
    }
}
