//! Failpoints: named places in the controller where a test build can crash it on purpose, so a
//! fault harness (`tandem bench chaos`) can stop it at moments a `kill -9` from outside rarely
//! hits: after a scheduling pass is planned and before its plan is applied, between pieces of
//! an applied plan, with a batch of changes taken for commit but not yet written, and after a
//! commit is on disk but before any request waiting for it is answered.
//!
//! They exist only with the `failpoints` feature, which the `tandem` package turns on for its
//! test builds (a dev-dependency), never for `cargo build --release`. They are armed by the
//! environment: `TANDEM_FAILPOINTS=NAME=N[,NAME=N]` crashes the controller (SIGKILL to itself)
//! the N-th time it passes NAME. Without the feature [`hit`] does nothing.

/// The failpoints, by name.
pub(crate) const NAMES: [&str; 4] = ["pass-planned", "pass-applying", "commit-taken", "commit-written"];

#[cfg(feature = "failpoints")]
mod armed {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    fn table() -> &'static Mutex<HashMap<String, u64>> {
        static T: OnceLock<Mutex<HashMap<String, u64>>> = OnceLock::new();
        T.get_or_init(|| {
            let mut m = HashMap::new();
            for part in std::env::var("TANDEM_FAILPOINTS").unwrap_or_default().split(',') {
                if let Some((name, n)) = part.split_once('=')
                    && let Ok(n) = n.trim().parse::<u64>()
                    && super::NAMES.contains(&name.trim())
                    && n > 0
                {
                    m.insert(name.trim().to_string(), n);
                }
            }
            if !m.is_empty() {
                tracing::info!("failpoints armed: {m:?}");
            }
            Mutex::new(m)
        })
    }

    /// Arms the table (and says so) at start.
    pub(crate) fn init() {
        let _ = table();
    }

    pub(crate) fn hit(name: &str) {
        let mut t = table().lock().expect("failpoint lock");
        if let Some(left) = t.get_mut(name) {
            *left -= 1;
            if *left == 0 {
                tracing::error!("failpoint {name}: crashing");
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

/// Passes failpoint `name`: crashes the controller here if it is armed and due.
#[inline]
pub(crate) fn hit(name: &'static str) {
    debug_assert!(NAMES.contains(&name));
    #[cfg(feature = "failpoints")]
    armed::hit(name);
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

/// Reads `TANDEM_FAILPOINTS` at start (with the feature; a no-op without).
pub(crate) fn init() {
    #[cfg(feature = "failpoints")]
    armed::init();
}
