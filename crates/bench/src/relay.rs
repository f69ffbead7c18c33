//! A TCP relay on loopback that can stall: how `tandem bench chaos` cuts one controller off from
//! etcd while the other still reaches it. Each controller reaches each etcd member through a
//! relay of its own; a cut stops every byte both ways on that controller's relays (and holds
//! new connections unanswered), as a network partition does, without resetting anything; a
//! heal lets the bytes through again. TLS passes through it untouched (the relay's address is
//! on loopback, which the members' certificates name).

use anyhow::Result;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Relays that share one switch.
pub(crate) struct Relays {
    /// Runs the relays (stopped with them).
    _rt: tokio::runtime::Runtime,
    cut: Arc<AtomicBool>,
    /// The relays' addresses, in the order of the targets given.
    pub(crate) addrs: Vec<String>,
}

/// Waits while the switch is off.
async fn open(cut: &AtomicBool) {
    while cut.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Copies `from` to `to` while the switch lets it: a read's bytes wait for the switch before
/// they are written.
async fn pipe(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, cut: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        open(&cut).await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        open(&cut).await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Relays {
    /// One relay per target (`host:port`), each on a free loopback port.
    pub(crate) fn start(targets: &[String]) -> Result<Relays> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        let cut = Arc::new(AtomicBool::new(false));
        let mut addrs = Vec::new();
        for t in targets {
            let l = rt.block_on(TcpListener::bind("127.0.0.1:0"))?;
            addrs.push(l.local_addr()?.to_string());
            let (t, cut) = (t.clone(), cut.clone());
            rt.spawn(async move {
                while let Ok((s, _)) = l.accept().await {
                    let (t, cut) = (t.clone(), cut.clone());
                    tokio::spawn(async move {
                        // A connection made while cut is held until the heal, as a SYN that
                        // went unanswered would be retried.
                        open(&cut).await;
                        let Ok(up) = TcpStream::connect(&t).await else { return };
                        let _ = (s.set_nodelay(true), up.set_nodelay(true));
                        let ((sr, sw), (ur, uw)) = (s.into_split(), up.into_split());
                        tokio::spawn(pipe(sr, uw, cut.clone()));
                        pipe(ur, sw, cut).await;
                    });
                }
            });
        }
        Ok(Relays { _rt: rt, cut, addrs })
    }

    /// Stops (`true`) or lets through (`false`) every byte of these relays.
    pub(crate) fn cut(&self, on: bool) {
        self.cut.store(on, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_cut_stalls_bytes_both_ways_and_a_heal_lets_them_through() {
        let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = echo.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for s in echo.incoming() {
                let mut s = s.unwrap();
                std::thread::spawn(move || {
                    let mut b = [0u8; 64];
                    while let Ok(n) = s.read(&mut b) {
                        if n == 0 || s.write_all(&b[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let r = Relays::start(&[at]).unwrap();
        let mut c = std::net::TcpStream::connect(&r.addrs[0]).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let mut b = [0u8; 5];
        c.write_all(b"hello").unwrap();
        c.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"hello");
        r.cut(true);
        c.write_all(b"again").unwrap();
        assert!(c.read(&mut b).is_err(), "nothing comes back while cut");
        r.cut(false);
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"again");
    }
}
