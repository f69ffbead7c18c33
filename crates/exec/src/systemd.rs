//! What a daemon says to, and takes from, systemd: readiness (`Type=notify`: `READY=1` once it
//! serves) and the listening sockets of a `.socket` unit (socket activation, `LISTEN_FDS`).
//! Both do nothing where systemd did not start the process.

use std::net::TcpListener;

/// Tells the service manager the daemon serves (`READY=1` to `$NOTIFY_SOCKET`); nothing where
/// the variable is unset. Called once, when the daemon's listeners are bound and answering.
pub fn notify_ready() -> std::io::Result<()> {
    sd_notify::notify(&[sd_notify::NotifyState::Ready])
}

/// The TCP listening sockets systemd passed to this process (`LISTEN_PID` is this process,
/// `LISTEN_FDS` of them from descriptor 3), each checked as [`crate::inherited_listener`]
/// checks one; empty where none were passed.
pub fn activated_listeners() -> Result<Vec<TcpListener>, crate::HeldError> {
    // No variables, or another process's: nothing was passed to this one (an empty range).
    let fds: Vec<i32> = sd_notify::listen_fds().map_err(|e| crate::HeldError::Activation(e.to_string()))?.collect();
    fds.into_iter().map(crate::inherited_listener).collect()
}
