//! `srun --mpi=pmix`: the hub in `srun` that the tasks' PMIx servers talk to, as a pure state
//! machine (bytes in per rank, [`Reply`]s out), and the messages between them.
//!
//! Each task of a PMIx step runs under `tandem __pmix-task` (the `pmix` crate), and the step's
//! tasks on a node share one OpenPMIx server (`tandem __pmix-node`), as the job's user: the MPI
//! library connects to that server, and the server's host, for everything that crosses nodes
//! (the job's layout, fences with the data they collect, an abort), speaks to this hub through
//! each task's PMI socket, which the agent tunnels to `srun` as for PMI-2. A fence reaches the
//! hub once per participating rank: the node's data with its first local participant, nothing
//! with the others. The data is opaque here: the contributions are concatenated in rank order
//! and sent back to every participant, which is what OpenPMIx's server expects of its host
//! (Slurm's `mpi/pmix` plugin does the same per node).
//!
//! A message is a type byte, a big-endian `u32` length and that many bytes. From a task:
//! - [`HELLO`]: first, empty; answered with [`JOB`], the step as `key=value` lines: `nspace`,
//!   `jobid`, `size`, `rank`, `node` (this rank's node index), `nodes` (host names, comma
//!   separated) and `map` (the ranks of each node, `0,1;2,3`).
//! - [`CONNECTED`]: the task's MPI library connected (from then on, leaving without
//!   [`FINALIZED`] ends the step, as under PMI-2).
//! - [`FENCE`]: `seq` (the server's own count, echoed in the answer), the number of
//!   participants (0: every rank), their ranks, then the data. The n-th fence of a rank over a
//!   set of ranks matches the n-th fence of each other participant over the same set; when all
//!   have entered, each gets [`FENCE_DONE`] with its `seq` and the concatenated data.
//! - [`FINALIZED`] and [`ABORT`] (an `i32` exit code, then the message), and [`NOTICE`], an
//!   error for the user ([`Hub::take_notices`]).
//!
//! Between a task host and its node's server: [`REGISTER`] (the rank), answered with [`ENV`]
//! (the task's variables) or [`REFUSED`]; then the hub's messages pass through the task host.
//!
//! Hostile or broken input (an unknown type, a message over [`Job::max_message`], a rank
//! outside a fence it names, a second hello, data past [`Job::max_kvs_bytes`]) is an
//! [`Error`]; the caller kills the step, as for PMI-2.

use crate::{Abort, Closed, Error, Job, Reply};
use std::collections::{BTreeMap, HashMap};

/// Task to hub: the first message.
pub const HELLO: u8 = 1;
/// Task to hub: the MPI library connected to the task's server.
pub const CONNECTED: u8 = 2;
/// Task to hub: a fence (`seq`, participants, data).
pub const FENCE: u8 = 3;
/// Task to hub: the MPI library called `PMIx_Finalize`.
pub const FINALIZED: u8 = 4;
/// Task to hub: `PMIx_Abort` (exit code, message).
pub const ABORT: u8 = 5;
/// Task host to node server: register this rank (`u32`).
pub const REGISTER: u8 = 32;
/// Node server to task host: the task's variables (`NAME=VALUE` lines).
pub const ENV: u8 = 33;
/// Node server to task host: it cannot serve the rank (text).
pub const REFUSED: u8 = 34;
/// Task (from its node's server) to hub: an error for the user (text), which `srun` prints.
pub const NOTICE: u8 = 6;
/// Hub to task: the step's layout.
pub const JOB: u8 = 16;
/// Hub to task: a fence completed (`seq`, all participants' data).
pub const FENCE_DONE: u8 = 17;

/// The most different participant sets one rank may fence over.
const MAX_SETS: usize = 1024;

/// The subcommand of `tandem` that runs a task of a PMIx step (and relays for it).
pub const TASK_CMD: &str = "__pmix-task";
/// The subcommand of `tandem` that hosts a node's PMIx server for a step.
pub const NODE_CMD: &str = "__pmix-node";

/// One message: its type and body, framed.
pub fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + body.len());
    v.push(kind);
    v.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// Takes one whole message off the front of `buf`, if there is one: `(type, body)`.
/// `Err(len)` when the next message would be longer than `max`.
pub fn unframe(buf: &mut Vec<u8>, max: usize) -> Result<Option<(u8, Vec<u8>)>, usize> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if len > max {
        return Err(len);
    }
    if buf.len() < 5 + len {
        return Ok(None);
    }
    let kind = buf[0];
    let body = buf[5..5 + len].to_vec();
    buf.drain(..5 + len);
    Ok(Some((kind, body)))
}

/// A fence message's body.
pub fn fence_body(seq: u32, ranks: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + 4 * ranks.len() + data.len());
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend_from_slice(&u32::try_from(ranks.len()).unwrap_or(u32::MAX).to_be_bytes());
    for r in ranks {
        v.extend_from_slice(&r.to_be_bytes());
    }
    v.extend_from_slice(data);
    v
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// A [`FENCE_DONE`] body read back: `(seq, data)`.
pub fn fence_done(body: &[u8]) -> Option<(u32, &[u8])> {
    Some((be32(body, 0)?, body.get(4..)?))
}

/// The step as a task's server sees it, read from [`JOB`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The PMIx namespace (`slurm.pmix.JOB.STEP`, as Slurm names it).
    pub nspace: String,
    /// `JOB.STEP`.
    pub jobid: String,
    /// This task's rank.
    pub rank: u32,
    /// Its node's index in `nodes`.
    pub node: u32,
    /// The step's nodes' host names.
    pub nodes: Vec<String>,
    /// The ranks on each node, by node.
    pub map: Vec<Vec<u32>>,
    /// A secret of the step's (32 hex digits), so that its node directories' names cannot be
    /// guessed (and so taken first) by another user.
    pub token: String,
}

impl Layout {
    /// The number of ranks.
    pub fn size(&self) -> u32 {
        self.map.iter().map(|r| r.len() as u32).sum()
    }

    /// The node of `rank`.
    pub fn node_of(&self, rank: u32) -> Option<u32> {
        self.map.iter().position(|rs| rs.contains(&rank)).map(|n| n as u32)
    }

    /// `rank`'s place among its node's ranks (its `PMIX_LOCAL_RANK`).
    pub fn local_rank(&self, rank: u32) -> Option<u16> {
        let n = self.node_of(rank)? as usize;
        self.map[n].iter().position(|r| *r == rank).and_then(|i| u16::try_from(i).ok())
    }

    /// As [`JOB`]'s body.
    pub fn encode(&self) -> Vec<u8> {
        let map: Vec<String> = self.map.iter().map(|rs| rs.iter().map(u32::to_string).collect::<Vec<_>>().join(",")).collect();
        format!(
            "nspace={}\njobid={}\nsize={}\nrank={}\nnode={}\nnodes={}\nmap={}\ntoken={}\n",
            self.nspace,
            self.jobid,
            self.size(),
            self.rank,
            self.node,
            self.nodes.join(","),
            map.join(";"),
            self.token
        )
        .into_bytes()
    }

    /// Reads [`JOB`]'s body, checking that it is whole and consistent.
    pub fn decode(body: &[u8]) -> Result<Layout, String> {
        let text = std::str::from_utf8(body).map_err(|_| "the step's layout is not text".to_string())?;
        let kv: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        let get = |k: &str| kv.get(k).copied().ok_or_else(|| format!("the step's layout has no {k}"));
        let num = |k: &str| get(k)?.parse::<u32>().map_err(|_| format!("the step's layout has a bad {k}"));
        let map: Vec<Vec<u32>> = get("map")?
            .split(';')
            .map(|n| {
                n.split(',')
                    .filter(|r| !r.is_empty())
                    .map(|r| r.parse::<u32>().map_err(|_| "the step's layout has a bad map".to_string()))
                    .collect()
            })
            .collect::<Result<_, _>>()?;
        let l = Layout {
            nspace: get("nspace")?.to_string(),
            jobid: get("jobid")?.to_string(),
            rank: num("rank")?,
            node: num("node")?,
            nodes: get("nodes")?.split(',').map(str::to_string).collect(),
            map,
            token: get("token")?.to_string(),
        };
        if l.token.len() != 32 || !l.token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("the step's layout has a bad token".into());
        }
        if l.size() != num("size")?
            || l.nodes.len() != l.map.len()
            || l.node_of(l.rank) != Some(l.node)
            || l.nspace.is_empty()
            || l.nspace.len() > 255
        {
            return Err("the step's layout does not add up".into());
        }
        Ok(l)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Fresh,
    Hello,
    Connected,
    Finalized,
    Aborted,
    Closed,
}

#[derive(Debug)]
struct Rank {
    buf: Vec<u8>,
    phase: Phase,
    connected: bool,
    /// Fences entered, by participant set.
    rounds: HashMap<Vec<u32>, u32>,
}

/// The hub of one PMIx step.
#[derive(Debug)]
pub struct Hub {
    job: Job,
    nspace: String,
    names: Vec<String>,
    token: String,
    ranks: Vec<Rank>,
    /// Open fences by (participants, round): each participant's `seq` and data.
    fences: BTreeMap<(Vec<u32>, u32), BTreeMap<u32, (u32, Vec<u8>)>>,
    /// Bytes held in open fences.
    held: usize,
    abort: Option<Abort>,
    notices: Vec<String>,
}

fn bad(rank: u32, what: impl Into<String>) -> Error {
    Error::Malformed { rank, why: what.into() }
}

impl Hub {
    /// The hub for `job` (its `kvsname` is `JOB.STEP`), whose node `i` is `names[i]`, with a
    /// secret `token` of 32 hex digits (the caller draws it).
    pub fn new(job: Job, names: Vec<String>, token: String) -> Result<Hub, Error> {
        if token.len() != 32 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::BadJob("the token is not 32 hex digits".into()));
        }
        let nnodes = job.nodes.iter().max().map_or(0, |n| *n as usize + 1);
        if job.nodes.is_empty() || names.len() != nnodes {
            return Err(Error::BadJob(format!("{} ranks on {} nodes, {} names", job.nodes.len(), nnodes, names.len())));
        }
        if let Some(n) = names.iter().find(|n| n.is_empty() || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))) {
            return Err(Error::BadJob(format!("node name {n:?}")));
        }
        if job.kvsname.is_empty()
            || job.kvsname.len() > 200
            || !job.kvsname.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(Error::BadJob(format!("job id {:?}", job.kvsname)));
        }
        let ranks =
            (0..job.nodes.len()).map(|_| Rank { buf: Vec::new(), phase: Phase::Fresh, connected: false, rounds: HashMap::new() }).collect();
        Ok(Hub {
            nspace: format!("slurm.pmix.{}", job.kvsname),
            job,
            names,
            token,
            ranks,
            fences: BTreeMap::new(),
            held: 0,
            abort: None,
            notices: Vec::new(),
        })
    }

    /// The step.
    pub fn job(&self) -> &Job {
        &self.job
    }

    /// The abort a rank asked for, if one did.
    pub fn abort(&self) -> Option<&Abort> {
        self.abort.as_ref()
    }

    /// The errors the nodes' servers reported since the last call (at most 100 kept, each at
    /// most 1000 characters, without control characters).
    pub fn take_notices(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notices)
    }

    /// What rank `rank`'s server is told of the step.
    pub fn layout(&self, rank: u32) -> Layout {
        let mut map = vec![Vec::new(); self.names.len()];
        for (r, n) in self.job.nodes.iter().enumerate() {
            map[*n as usize].push(r as u32);
        }
        Layout {
            nspace: self.nspace.clone(),
            jobid: self.job.kvsname.clone(),
            rank,
            node: self.job.nodes.get(rank as usize).copied().unwrap_or(0),
            nodes: self.names.clone(),
            map,
            token: self.token.clone(),
        }
    }

    fn size(&self) -> u32 {
        self.job.size()
    }

    /// Bytes from rank `rank`'s socket (any split); the replies they complete.
    pub fn feed(&mut self, rank: u32, bytes: &[u8]) -> Result<Vec<Reply>, Error> {
        let size = self.size();
        let r = self.ranks.get_mut(rank as usize).ok_or(Error::NoSuchRank { rank, size })?;
        if matches!(r.phase, Phase::Closed) {
            return Err(bad(rank, "a message after its socket closed"));
        }
        r.buf.extend_from_slice(bytes);
        let max = self.job.max_message;
        let mut out = Vec::new();
        loop {
            let r = &mut self.ranks[rank as usize];
            let msg = unframe(&mut r.buf, max).map_err(|len| bad(rank, format!("a message of {len} bytes (at most {max})")))?;
            let Some((kind, body)) = msg else { break };
            self.message(rank, kind, &body, &mut out)?;
        }
        Ok(out)
    }

    fn message(&mut self, rank: u32, kind: u8, body: &[u8], out: &mut Vec<Reply>) -> Result<(), Error> {
        let size = self.size();
        let phase = self.ranks[rank as usize].phase;
        match (kind, phase) {
            (HELLO, Phase::Fresh) => {
                self.ranks[rank as usize].phase = Phase::Hello;
                out.push(Reply { rank, bytes: frame(JOB, &self.layout(rank).encode()) });
            }
            (HELLO, _) => return Err(bad(rank, "a second hello")),
            (_, Phase::Fresh) => return Err(bad(rank, "a message before its hello")),
            // A task may run several MPI programs in turn (`bash -c "./a; ./b"`): after a
            // finalize its next program connects again.
            (_, Phase::Aborted) => return Err(bad(rank, "a message after abort")),
            (NOTICE, _) => {
                if self.notices.len() < 100 {
                    let t: String = String::from_utf8_lossy(body).chars().filter(|c| !c.is_control()).take(1000).collect();
                    self.notices.push(t);
                }
            }
            (CONNECTED, _) => {
                let r = &mut self.ranks[rank as usize];
                r.phase = Phase::Connected;
                r.connected = true;
            }
            (FINALIZED, _) => self.ranks[rank as usize].phase = Phase::Finalized,
            (ABORT, _) => {
                self.ranks[rank as usize].phase = Phase::Aborted;
                let code = be32(body, 0).map_or(1, |c| c as i32);
                let message = body.get(4..).filter(|m| !m.is_empty()).map(|m| String::from_utf8_lossy(m).into_owned());
                if self.abort.is_none() {
                    self.abort = Some(Abort { rank, exit_code: code, message });
                }
            }
            (FENCE, _) => {
                let (Some(seq), Some(n)) = (be32(body, 0), be32(body, 4)) else {
                    return Err(bad(rank, "a short fence"));
                };
                let n = n as usize;
                if n > size as usize {
                    return Err(bad(rank, format!("a fence over {n} ranks of {size}")));
                }
                let mut set: Vec<u32> =
                    (0..n).map(|i| be32(body, 8 + 4 * i)).collect::<Option<_>>().ok_or_else(|| bad(rank, "a short fence"))?;
                let data = &body[8 + 4 * n..];
                if set.is_empty() {
                    set = (0..size).collect();
                }
                set.sort_unstable();
                set.dedup();
                if set.iter().any(|p| *p >= size) || set.binary_search(&rank).is_err() {
                    return Err(bad(rank, "a fence over ranks outside the step or without itself"));
                }
                if self.held + data.len() > self.job.max_kvs_bytes {
                    return Err(bad(rank, format!("fence data past {} bytes", self.job.max_kvs_bytes)));
                }
                self.held += data.len();
                if self.ranks[rank as usize].rounds.len() >= MAX_SETS && !self.ranks[rank as usize].rounds.contains_key(&set) {
                    return Err(bad(rank, format!("fences over more than {MAX_SETS} sets of ranks")));
                }
                let round = {
                    let c = self.ranks[rank as usize].rounds.entry(set.clone()).or_insert(0);
                    *c += 1;
                    *c - 1
                };
                let key = (set, round);
                let got = self.fences.entry(key.clone()).or_default();
                got.insert(rank, (seq, data.to_vec()));
                if got.len() == key.0.len() {
                    let got = self.fences.remove(&key).unwrap_or_default();
                    let all: Vec<u8> = got.values().flat_map(|(_, d)| d.iter().copied()).collect();
                    self.held -= got.values().map(|(_, d)| d.len()).sum::<usize>();
                    for (r, (seq, _)) in got {
                        let mut b = seq.to_be_bytes().to_vec();
                        b.extend_from_slice(&all);
                        out.push(Reply { rank: r, bytes: frame(FENCE_DONE, &b) });
                    }
                }
            }
            (k, _) => return Err(bad(rank, format!("unknown message type {k}"))),
        }
        Ok(())
    }

    /// Rank `rank`'s socket closed: how it ended ([`Closed::Lost`]: its library connected and
    /// left without finalize, so the others may wait for it for ever and the step should end).
    pub fn closed(&mut self, rank: u32) -> Result<Closed, Error> {
        let size = self.size();
        let r = self.ranks.get_mut(rank as usize).ok_or(Error::NoSuchRank { rank, size })?;
        let how = match r.phase {
            Phase::Finalized => Closed::Finalized,
            Phase::Aborted => Closed::Aborted,
            Phase::Fresh | Phase::Hello => Closed::Unused,
            Phase::Closed if !r.connected => Closed::Unused,
            Phase::Connected | Phase::Closed => Closed::Lost,
        };
        if !matches!(r.phase, Phase::Finalized | Phase::Aborted) {
            r.phase = Phase::Closed;
        }
        r.buf = Vec::new();
        Ok(how)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(per_node: &[u32]) -> Hub {
        let names = (0..per_node.len()).map(|i| format!("n{i}")).collect();
        Hub::new(Job::blocks("7.0", per_node), names, "0123456789abcdef0123456789abcdef".into()).unwrap()
    }

    fn fence(seq: u32, ranks: &[u32], data: &[u8]) -> Vec<u8> {
        frame(FENCE, &fence_body(seq, ranks, data))
    }

    #[test]
    fn hello_gets_the_layout_which_reads_back() {
        let mut h = hub(&[2, 2]);
        let out = h.feed(3, &frame(HELLO, b"")).unwrap();
        assert_eq!(out.len(), 1);
        let mut b = out[0].bytes.clone();
        let (k, body) = unframe(&mut b, 1 << 20).unwrap().unwrap();
        assert_eq!(k, JOB);
        let l = Layout::decode(&body).unwrap();
        assert_eq!(l.nspace, "slurm.pmix.7.0");
        assert_eq!((l.rank, l.node, l.size(), l.local_rank(3)), (3, 1, 4, Some(1)));
        assert_eq!(l.map, vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(l.nodes, vec!["n0", "n1"]);
        assert!(Layout::decode(b"nspace=x\n").is_err());
        let mut broken = l.clone();
        broken.node = 0;
        assert!(Layout::decode(&broken.encode()).is_err());
    }

    #[test]
    fn a_fence_over_all_ranks_answers_each_with_everyones_data_in_rank_order() {
        let mut h = hub(&[1, 2]);
        for r in 0..3 {
            h.feed(r, &frame(HELLO, b"")).unwrap();
            h.feed(r, &frame(CONNECTED, b"")).unwrap();
        }
        assert!(h.feed(2, &fence(9, &[], b"C")).unwrap().is_empty());
        // Split anywhere.
        let m = fence(4, &[], b"A");
        assert!(h.feed(0, &m[..3]).unwrap().is_empty());
        assert!(h.feed(0, &m[3..]).unwrap().is_empty());
        let out = h.feed(1, &fence(1, &[0, 1, 2], b"BB")).unwrap();
        let got: Vec<(u32, u32, Vec<u8>)> = out
            .iter()
            .map(|r| {
                let mut b = r.bytes.clone();
                let (k, body) = unframe(&mut b, 1 << 20).unwrap().unwrap();
                assert_eq!(k, FENCE_DONE);
                let (seq, d) = fence_done(&body).unwrap();
                (r.rank, seq, d.to_vec())
            })
            .collect();
        assert_eq!(got, vec![(0, 4, b"ABBC".to_vec()), (1, 1, b"ABBC".to_vec()), (2, 9, b"ABBC".to_vec())]);
        // The next round starts afresh; a subset fence completes on its own members.
        assert!(h.feed(0, &fence(5, &[0, 2], b"x")).unwrap().is_empty());
        assert_eq!(h.feed(2, &fence(10, &[2, 0], b"y")).unwrap().len(), 2);
        for r in 0..3 {
            h.feed(r, &frame(FINALIZED, b"")).unwrap();
        }
        // A second program of rank 0's task connects, and finalizes again.
        h.feed(0, &frame(CONNECTED, b"")).unwrap();
        assert!(h.feed(0, &fence(6, &[0], b"z")).unwrap().len() == 1);
        h.feed(0, &frame(FINALIZED, b"")).unwrap();
        for r in 0..3 {
            assert_eq!(h.closed(r).unwrap(), Closed::Finalized);
        }
    }

    #[test]
    fn how_a_rank_left() {
        let mut h = hub(&[3]);
        h.feed(0, &frame(HELLO, b"")).unwrap();
        assert_eq!(h.closed(0).unwrap(), Closed::Unused, "not an MPI program");
        h.feed(1, &frame(HELLO, b"")).unwrap();
        h.feed(1, &frame(CONNECTED, b"")).unwrap();
        assert_eq!(h.closed(1).unwrap(), Closed::Lost);
        h.feed(2, &frame(HELLO, b"")).unwrap();
        let mut body = 7i32.to_be_bytes().to_vec();
        body.extend_from_slice(b"bye");
        h.feed(2, &frame(ABORT, &body)).unwrap();
        assert_eq!(h.closed(2).unwrap(), Closed::Aborted);
        assert_eq!(h.abort(), Some(&Abort { rank: 2, exit_code: 7, message: Some("bye".into()) }));
    }

    #[test]
    fn hostile_input_is_an_error_not_a_panic() {
        let mut h = hub(&[2]);
        assert!(h.feed(0, &frame(CONNECTED, b"")).is_err(), "before hello");
        assert!(h.feed(5, &frame(HELLO, b"")).is_err(), "no such rank");
        h.feed(0, &frame(HELLO, b"")).unwrap();
        assert!(h.feed(0, &frame(HELLO, b"")).is_err(), "twice");
        assert!(h.feed(0, &frame(99, b"")).is_err());
        assert!(h.feed(0, &fence(1, &[1], b"")).is_err(), "without itself");
        assert!(h.feed(0, &fence(1, &[0, 7], b"")).is_err(), "outside");
        assert!(h.feed(0, &frame(FENCE, &[0, 0, 0, 1, 0, 0, 0, 9])).is_err(), "more ranks than the step");
        assert!(h.feed(0, &frame(FENCE, &[0, 0])).is_err(), "short");
        let mut big = vec![FENCE];
        big.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(h.feed(1, &frame(HELLO, b"")).is_ok());
        assert!(h.feed(1, &big).is_err(), "a length past the limit is refused before it arrives");
        let mut small = hub(&[2]);
        small.job.max_kvs_bytes = 10;
        small.feed(0, &frame(HELLO, b"")).unwrap();
        assert!(small.feed(0, &fence(1, &[], &[0; 11])).is_err());
        let t = || "0123456789abcdef0123456789abcdef".to_string();
        assert!(Hub::new(Job::blocks("7.0", &[1, 1]), vec!["a".into()], t()).is_err());
        assert!(Hub::new(Job::blocks("7.0", &[1]), vec!["a,b".into()], t()).is_err());
        assert!(Hub::new(Job::blocks("7;0", &[1]), vec!["a".into()], t()).is_err());
        assert!(Hub::new(Job::blocks("7.0", &[1]), vec!["a".into()], "../x".into()).is_err());
    }
}
