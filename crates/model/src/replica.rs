//! The service-replica lifecycle: what a replica is doing from the controller's point of view,
//! beside its job state (which only says whether it holds an allocation).

use serde::{Deserialize, Serialize};

use crate::InvalidTransition;

/// Replica lifecycle.
///
/// ```text
///  Pending ─placed─► Starting ─ready─► Ready ◄─ready/not ready─► NotReady
///                       │  crashed ─► CrashLoop ─ready─► Ready
///   any live state ─drain─► Draining ─stop─► Stopping ─ended─► Gone
///   any placed state ─node lost─► Lost ─ended─► Gone
/// ```
/// Only `Ready` replicas take traffic. `Draining` replicas take no new requests and finish the
/// ones they have; `Lost` ones (their node missed its heartbeats) are replaced at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReplicaState {
    /// Waiting for the scheduler to place it.
    Pending,
    /// Placed and launched; not ready yet.
    Starting,
    /// Passing its readiness probe: in the endpoint set.
    Ready,
    /// Was ready, now failing its readiness probe.
    NotReady,
    /// Exits or fails its liveness probe; its agent restarts it with a growing back-off.
    CrashLoop,
    /// Out of the endpoint set; finishing in-flight requests before it is stopped.
    Draining,
    /// Told to stop.
    Stopping,
    /// Its node stopped heartbeating; replaced, and stopped when the node fences or returns.
    Lost,
    /// Ended.
    Gone,
}

/// Events of the replica lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplicaEvent {
    /// The scheduler placed it and its launch went out.
    Placed,
    /// Its readiness probe passes (or it has none and is running).
    Ready,
    /// Its readiness probe fails.
    NotReady,
    /// It exited or failed liveness, and is waiting to be restarted.
    Crashed,
    /// Take it out of the endpoint set (scale-down, rolling update, preemption, drain).
    Drain,
    /// Stop its process.
    Stop,
    /// Its node missed its heartbeats.
    NodeLost,
    /// Its process is gone (or it never started).
    Ended,
}

impl ReplicaState {
    /// Name as `tandem service show` prints it.
    pub fn name(self) -> &'static str {
        match self {
            ReplicaState::Pending => "Pending",
            ReplicaState::Starting => "Starting",
            ReplicaState::Ready => "Ready",
            ReplicaState::NotReady => "NotReady",
            ReplicaState::CrashLoop => "CrashLoopBackOff",
            ReplicaState::Draining => "Draining",
            ReplicaState::Stopping => "Stopping",
            ReplicaState::Lost => "Lost",
            ReplicaState::Gone => "Gone",
        }
    }

    /// Whether it counts towards the service's replicas (not on its way out).
    pub fn is_active(self) -> bool {
        matches!(
            self,
            ReplicaState::Pending | ReplicaState::Starting | ReplicaState::Ready | ReplicaState::NotReady | ReplicaState::CrashLoop
        )
    }

    /// The one transition function of the replica lifecycle.
    pub fn step(self, event: ReplicaEvent) -> Result<ReplicaState, InvalidTransition> {
        use ReplicaEvent as E;
        use ReplicaState as S;
        let bad = |from: S, ev: &'static str| Err(InvalidTransition::new("replica", from.name(), ev));
        match (self, event) {
            (_, E::Ended) => Ok(S::Gone),
            (S::Gone, e) => bad(S::Gone, event_name(e)),
            (S::Pending, E::Placed) => Ok(S::Starting),
            (S::Pending, E::Drain | E::Stop) => Ok(S::Stopping),
            (S::Pending, e @ (E::Ready | E::NotReady | E::Crashed | E::NodeLost)) => bad(S::Pending, event_name(e)),
            (s @ (S::Starting | S::Ready | S::NotReady | S::CrashLoop), E::Placed) => bad(s, "Placed"),
            (S::Starting | S::Ready | S::NotReady | S::CrashLoop, E::Ready) => Ok(S::Ready),
            (S::Starting, E::NotReady) => Ok(S::Starting),
            (S::Ready | S::NotReady, E::NotReady) => Ok(S::NotReady),
            (S::CrashLoop, E::NotReady) => Ok(S::CrashLoop),
            (S::Starting | S::Ready | S::NotReady | S::CrashLoop, E::Crashed) => Ok(S::CrashLoop),
            (S::Starting | S::Ready | S::NotReady | S::CrashLoop, E::Drain) => Ok(S::Draining),
            (S::Starting | S::NotReady | S::CrashLoop | S::Draining, E::Stop) => Ok(S::Stopping),
            (S::Ready, E::Stop) => bad(S::Ready, "Stop (drain it first)"),
            (S::Starting | S::Ready | S::NotReady | S::CrashLoop | S::Draining | S::Stopping, E::NodeLost) => Ok(S::Lost),
            // Reports that arrive while it is on its way out change nothing.
            (s @ (S::Draining | S::Stopping | S::Lost), E::Ready | E::NotReady | E::Crashed | E::Drain) => Ok(s),
            (s @ (S::Draining | S::Stopping | S::Lost), E::Placed) => bad(s, "Placed"),
            (s @ (S::Stopping | S::Lost), E::Stop) => Ok(s),
            (S::Lost, E::NodeLost) => Ok(S::Lost),
        }
    }
}

fn event_name(e: ReplicaEvent) -> &'static str {
    match e {
        ReplicaEvent::Placed => "Placed",
        ReplicaEvent::Ready => "Ready",
        ReplicaEvent::NotReady => "NotReady",
        ReplicaEvent::Crashed => "Crashed",
        ReplicaEvent::Drain => "Drain",
        ReplicaEvent::Stop => "Stop",
        ReplicaEvent::NodeLost => "NodeLost",
        ReplicaEvent::Ended => "Ended",
    }
}

#[cfg(test)]
mod tests {
    use super::{ReplicaEvent as E, ReplicaState as S};

    #[test]
    fn happy_path_and_exits() {
        let s = S::Pending.step(E::Placed).unwrap();
        assert_eq!(s, S::Starting);
        let s = s.step(E::Ready).unwrap();
        assert_eq!(s, S::Ready);
        assert!(s.step(E::Stop).is_err(), "a ready replica drains before it stops");
        let s = s.step(E::Drain).unwrap().step(E::Ready).unwrap();
        assert_eq!(s, S::Draining, "a late readiness report does not put it back");
        assert_eq!(s.step(E::Stop).unwrap().step(E::Ended).unwrap(), S::Gone);
        assert!(S::Gone.step(E::Ready).is_err());
        assert_eq!(S::Ready.step(E::NodeLost).unwrap(), S::Lost);
        assert!(!S::Lost.is_active() && S::CrashLoop.is_active());
    }

    #[test]
    fn every_pair_is_decided() {
        let states = [S::Pending, S::Starting, S::Ready, S::NotReady, S::CrashLoop, S::Draining, S::Stopping, S::Lost, S::Gone];
        let events = [E::Placed, E::Ready, E::NotReady, E::Crashed, E::Drain, E::Stop, E::NodeLost, E::Ended];
        for s in states {
            for e in events {
                // Either a state or an error naming the transition; never a panic.
                if let Err(x) = s.step(e) {
                    assert!(x.to_string().contains("replica"));
                }
            }
        }
    }
}
