//! Run-time prediction from history, as EASY++ (Tsafrir, Etsion and Feitelson, "Backfilling
//! using system-generated predictions rather than user runtime estimates", IEEE TPDS 2007).
//!
//! A production scheduler knows the actual run times of its finished jobs and nothing of the
//! current or future jobs'. [`History`] is what it has learned: the caller records each job's
//! actual run time when its completion event is processed ([`History::record`]), never earlier,
//! and hands the history to every pass in the snapshot. A pass predicts a job's run time as the
//! average of its user's last two finished jobs ([`Predict::User`]: EASY++'s rule), optionally
//! from the same user's jobs of the same name or request shape when there are any, capped by the
//! job's requested limit; with no history, the requested limit. A running job that outlives its
//! prediction gets a new one: the next step of [`LADDER`] above its elapsed time, never above its
//! limit (EASY++'s correction). Predictions are only for planning (reservations, shadow times,
//! which jobs end in time to backfill); kills use the requested limit only.

use model::{JobRequest, Time};
use rustc_hash::{FxBuildHasher, FxHashMap};
use serde::{Deserialize, Serialize};

/// Which run time the scheduler plans with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Predict {
    /// The requested time limit (no prediction).
    Limit,
    /// The average of the user's last two finished jobs (EASY++).
    User,
    /// As `User`, from the user's jobs of the same name when there are any.
    UserName,
    /// As `User`, from the user's jobs of the same request shape (nodes, tasks) when there are
    /// any: the default (issue 15, BENCHMARKS.md §2.3).
    #[default]
    UserShape,
}

impl Predict {
    /// Parses `limit` (or `none`), `history` (or `user`), `history-name` or `history-shape`.
    pub fn parse(s: &str) -> Option<Predict> {
        Some(match s {
            "limit" | "none" => Predict::Limit,
            "history" | "user" => Predict::User,
            "history-name" => Predict::UserName,
            "history-shape" => Predict::UserShape,
            _ => return None,
        })
    }

    /// Whether this predicts from history at all.
    pub fn on(self) -> bool {
        self != Predict::Limit
    }
}

/// The prediction ladder (seconds): a running job that outlives its prediction is next expected
/// to run to the first of these above its elapsed time (capped by its limit).
pub const LADDER: [Time; 13] = [60, 300, 900, 1800, 3600, 7200, 18_000, 36_000, 72_000, 180_000, 360_000, 720_000, 1_440_000];

/// The last two actual run times of one key, newest first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Recent {
    last: [Time; 2],
    n: u8,
}

impl Recent {
    fn push(&mut self, ran: Time) {
        self.last = [ran, self.last[0]];
        self.n = (self.n + 1).min(2);
    }

    fn mean(&self) -> Option<Time> {
        match self.n {
            0 => None,
            1 => Some(self.last[0]),
            _ => Some((self.last[0] + self.last[1]).div_euclid(2)),
        }
    }
}

/// What the scheduler has learned from finished jobs: per user, per (user, name) and per (user,
/// shape), the last two actual run times. Updated only by [`History::record`] on completion
/// events; the simulator and the controller do it the same way. Keyed by user first, so a
/// prediction (once per pending job per pass) looks up without building a key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    user: FxHashMap<String, PerUser>,
}

/// One user's recent run times: all jobs, by job name, by request shape (nodes, tasks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct PerUser {
    all: Recent,
    name: FxHashMap<String, Recent>,
    shape: FxHashMap<u64, Recent>,
}

fn shape_key(req: &JobRequest) -> u64 {
    (u64::from(req.shape.nodes_min) << 32) | u64::from(req.shape.ntasks)
}

static EMPTY: History = History { user: FxHashMap::with_hasher(FxBuildHasher) };

impl History {
    /// An empty history, for callers that predict nothing (every prediction is the limit).
    pub fn empty() -> &'static History {
        &EMPTY
    }

    /// Records a finished job's actual run time (call when its completion is processed).
    /// A job without a user (an empty name: a trace that does not say) teaches nothing.
    pub fn record(&mut self, req: &JobRequest, ran: Time) {
        if req.user.is_empty() {
            return;
        }
        let ran = ran.max(1);
        let u = self.user.entry(req.user.clone()).or_default();
        u.all.push(ran);
        if !req.name.is_empty() {
            u.name.entry(req.name.clone()).or_default().push(ran);
        }
        u.shape.entry(shape_key(req)).or_default().push(ran);
    }

    /// Users with history.
    pub fn users(&self) -> usize {
        self.user.len()
    }

    /// The predicted run time of `req` (at least 1 s, at most its limit): the limit itself with
    /// [`Predict::Limit`] or without history.
    pub fn predict(&self, mode: Predict, req: &JobRequest) -> Time {
        let limit = req.time_limit.max(1);
        if mode == Predict::Limit || self.user.is_empty() {
            return limit;
        }
        let Some(u) = self.user.get(&req.user) else { return limit };
        let guess = match mode {
            Predict::Limit | Predict::User => u.all.mean(),
            Predict::UserName => {
                if req.name.is_empty() {
                    u.all.mean()
                } else {
                    u.name.get(&req.name).and_then(Recent::mean).or_else(|| u.all.mean())
                }
            }
            Predict::UserShape => u.shape.get(&shape_key(req)).and_then(Recent::mean).or_else(|| u.all.mean()),
        };
        guess.map_or(limit, |g| g.clamp(1, limit))
    }

    /// When a job that started at `start` is expected to end, seen at `now`: start + prediction
    /// while that is in the future; once the job outlives it, start + the next [`LADDER`] step
    /// above its elapsed time, capped by its limit; `now` once it has overrun its limit.
    pub fn expected_end(&self, mode: Predict, req: &JobRequest, start: Time, now: Time) -> Time {
        let limit = req.time_limit.max(1);
        let p = self.predict(mode, req);
        corrected_end(p, limit, start, now)
    }
}

/// EASY++'s correction, statelessly: the end of a job predicted to run `p` (≤ `limit`).
pub(crate) fn corrected_end(p: Time, limit: Time, start: Time, now: Time) -> Time {
    if start + p > now {
        return start + p;
    }
    let elapsed = now - start;
    let next = LADDER.iter().copied().find(|&l| l > elapsed).unwrap_or(limit);
    (start + next.min(limit)).max(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::Shape;

    fn req(user: &str, name: &str, limit: Time, nodes: u32) -> JobRequest {
        let mut r = JobRequest::new(1, 0, limit, Shape::whole_nodes(nodes));
        r.user = user.into();
        r.name = name.into();
        r
    }

    #[test]
    fn no_history_is_the_limit_and_two_jobs_average() {
        let mut h = History::default();
        let a = req("u1", "x", 1000, 1);
        assert_eq!(h.predict(Predict::User, &a), 1000);
        h.record(&a, 100);
        assert_eq!(h.predict(Predict::User, &a), 100);
        h.record(&a, 300);
        assert_eq!(h.predict(Predict::User, &a), 200);
        h.record(&a, 500);
        assert_eq!(h.predict(Predict::User, &a), 400, "the last two only");
        assert_eq!(h.predict(Predict::Limit, &a), 1000);
        let short = req("u1", "x", 50, 1);
        assert_eq!(h.predict(Predict::User, &short), 50, "capped by the limit");
        assert_eq!(h.predict(Predict::User, &req("u2", "x", 1000, 1)), 1000, "another user has none");
    }

    #[test]
    fn name_and_shape_keys_fall_back_to_the_user() {
        let mut h = History::default();
        h.record(&req("u1", "a", 9000, 1), 100);
        h.record(&req("u1", "b", 9000, 4), 3000);
        let a = req("u1", "a", 9000, 1);
        assert_eq!(h.predict(Predict::User, &a), 1550);
        assert_eq!(h.predict(Predict::UserName, &a), 100);
        assert_eq!(h.predict(Predict::UserShape, &req("u1", "z", 9000, 4)), 3000);
        assert_eq!(h.predict(Predict::UserName, &req("u1", "c", 9000, 2)), 1550, "no such name: the user");
    }

    #[test]
    fn a_job_that_outlives_its_prediction_climbs_the_ladder_to_its_limit() {
        assert_eq!(corrected_end(100, 10_000, 0, 50), 100);
        assert_eq!(corrected_end(100, 10_000, 0, 100), 300, "next step above elapsed time");
        assert_eq!(corrected_end(100, 10_000, 0, 301), 900);
        assert_eq!(corrected_end(100, 10_000, 0, 7300), 10_000, "never above the limit");
        assert_eq!(corrected_end(100, 10_000, 0, 20_000), 20_000, "past the limit: now");
        assert_eq!(corrected_end(100, 10_000, 1000, 1200), 1300);
    }
}
