//! Who is on the other end of this process's TCP connections: OpenPMIx 4 serves its clients
//! over loopback TCP and takes a client's word for its user id, so before a client is accepted
//! the kernel's socket tables say whose socket each accepted connection comes from.

use std::collections::HashMap;

/// One row of `/proc/net/tcp` or `/proc/net/tcp6`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) local: String,
    pub(crate) remote: String,
    pub(crate) state: u8,
    pub(crate) uid: u32,
    pub(crate) inode: u64,
}

const LISTEN: u8 = 0x0A;
const ESTABLISHED: u8 = 0x01;

fn port(addr: &str) -> Option<&str> {
    addr.rsplit_once(':').map(|(_, p)| p)
}

/// Reads a socket table (the header line skipped, odd lines ignored).
pub(crate) fn parse(text: &str) -> Vec<Row> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(Row {
                local: f.get(1)?.to_string(),
                remote: f.get(2)?.to_string(),
                state: u8::from_str_radix(f.get(3)?, 16).ok()?,
                uid: f.get(7)?.parse().ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// The established connections accepted by one of `ours` (socket inode to descriptor) whose
/// other end is not a socket of `me`: (our descriptor, their uid, `None` when no client socket
/// is seen, as from another network namespace or one already gone: refused too).
pub(crate) fn foreign(rows: &[Row], ours: &HashMap<u64, i32>, me: u32) -> Vec<(i32, Option<u32>)> {
    let listening: Vec<&str> =
        rows.iter().filter(|r| r.state == LISTEN && ours.contains_key(&r.inode)).filter_map(|r| port(&r.local)).collect();
    let mut out = Vec::new();
    // A connection already shut down has left ESTABLISHED on our side: it is not counted again.
    for a in rows.iter().filter(|r| r.state == ESTABLISHED && ours.contains_key(&r.inode)) {
        if !port(&a.local).is_some_and(|p| listening.contains(&p)) {
            continue;
        }
        // The client's end: its local address is our remote one and the other way round.
        let client = rows.iter().find(|c| c.inode != a.inode && c.local == a.remote && c.remote == a.local);
        match client {
            Some(c) if c.uid == me => {}
            Some(c) => out.push((ours[&a.inode], Some(c.uid))),
            None => out.push((ours[&a.inode], None)),
        }
    }
    out
}

fn our_sockets() -> HashMap<u64, i32> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return out };
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(link) = std::fs::read_link(e.path()) else { continue };
        let l = link.to_string_lossy();
        if let Some(inode) = l.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')).and_then(|s| s.parse().ok()) {
            out.insert(inode, fd);
        }
    }
    out
}

/// Shuts down every accepted connection whose client is not this user's; their uids (`None`:
/// not seen). The tables unreadable: a refusal with no connection cut.
pub(crate) fn cut_foreign() -> Vec<Option<u32>> {
    let ours = our_sockets();
    let mut rows = Vec::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        match std::fs::read_to_string(f) {
            Ok(t) => rows.extend(parse(&t)),
            Err(_) if f.ends_with('6') => {}
            Err(_) => return vec![None],
        }
    }
    if ours.is_empty() {
        return vec![None];
    }
    let me = nix::unistd::geteuid().as_raw();
    let found = foreign(&rows, &ours, me);
    for (fd, _) in &found {
        let _ = nix::sys::socket::shutdown(*fd, nix::sys::socket::Shutdown::Both);
    }
    let mut uids: Vec<Option<u32>> = found.into_iter().map(|(_, u)| u).collect();
    uids.sort_unstable();
    uids.dedup();
    uids
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:9C40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 100 1 0000000000000000 100 0 0 10 0
   1: 0100007F:9C40 0100007F:D000 01 00000000:00000000 00:00000000 00000000  1001        0 101 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:D000 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1001        0 200 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:9C40 0100007F:D001 01 00000000:00000000 00:00000000 00000000  1001        0 102 1 0000000000000000 20 4 30 10 -1
   4: 0100007F:D001 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1002        0 201 1 0000000000000000 20 4 30 10 -1
   5: 0100007F:1F90 0100007F:D002 01 00000000:00000000 00:00000000 00000000  1001        0 103 1 0000000000000000 20 4 30 10 -1
   6: 0100007F:D002 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1003        0 202 1 0000000000000000 20 4 30 10 -1
garbage line
";

    #[test]
    fn only_another_users_client_of_our_listener_is_foreign() {
        let rows = parse(TABLE);
        assert_eq!(rows.len(), 7);
        // Our listener (100), two accepted connections (101, 102), and a connection of ours to
        // somebody else's port 8080 (103), whose other end is not a client of ours.
        let ours: HashMap<u64, i32> = [(100, 5), (101, 6), (102, 7), (103, 8)].into_iter().collect();
        assert_eq!(foreign(&rows, &ours, 1001), vec![(7, Some(1002))]);
        // An accepted connection whose client socket is not seen is refused too.
        let mut ours2 = ours.clone();
        let mut rows2 = rows.clone();
        rows2.retain(|r| r.inode != 200);
        ours2.remove(&102);
        assert_eq!(foreign(&rows2, &ours2, 1001), vec![(6, None)]);
        assert!(foreign(&rows, &HashMap::new(), 1001).is_empty());
    }
}
