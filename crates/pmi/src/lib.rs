//! The server side of PMI, the process-management interface MPI libraries use to start: the
//! PMI-1 "simple" wire protocol and the PMI-2 wire protocol, for one job step of N ranks, as a
//! pure state machine. Each task gets a socket (its `PMI_FD`); whatever arrives on rank `r`'s
//! socket goes to [`Server::feed`] as bytes, split anywhere or several commands at once, and
//! the [`Reply`]s it returns go back to the ranks they name: usually one to `r`, and at the end
//! of a barrier (PMI-1 `barrier_in`) or fence (PMI-2 `kvs-fence`) one to every rank. Nothing
//! here does IO, reads a clock or spawns anything; `srun` carries the bytes.
//!
//! What a task needs in its environment is [`Job::task_env`]: `PMI_FD`, `PMI_RANK`,
//! `PMI_SIZE` (read by MPICH's PMI-1 client; its PMI-2 client reads `PMI_FD` and `PMI_ID` or
//! `PMI_RANK`, and sends `PMI_JOBID` if set, as Slurm's PMI-2 plugin sets it). The server needs
//! no protocol choice: a rank's first message, `cmd=init pmi_version=1|2 ...`, decides; the
//! first rank to init fixes the step's protocol and a rank speaking the other one is an error.
//! Which one MPICH speaks is fixed when it is built up to 4.1 (`--with-pmi`; Debian 12's 4.0.2
//! has only PMI-1); from 4.2 `MPIR_CVAR_PMI_VERSION` chooses, and its default picks PMI-1
//! whenever `PMI_SIZE` is set.
//!
//! The protocol, as MPICH's clients speak it (src/pmi in MPICH 4.0's `simple` and `pmi2`
//! clients, MPICH 4.1+'s `pmi_v1.c`/`pmi_v2.c`/`pmi_wire.c`, and Slurm's mpi/pmi2 plugin):
//! - PMI-1 (MPICH sends `init pmi_version=1 pmi_subversion=1`): `get_maxes`, `get_appnum`,
//!   `get_universe_size`, `get_my_kvsname`, `put`, `get` (a missing key answers `rc=-1`),
//!   `getbyidx`, `barrier_in` (answered `barrier_out` to every rank once all entered),
//!   `finalize`, `abort`. The server says `pmi_subversion=1`, so MPICH 4.1+ never sends the
//!   PMI-1.2 group barriers. `mcmd=spawn` and the name service are answered with a failure.
//! - PMI-2 (MPICH sends `init pmi_version=2 pmi_subversion=0` in v1 framing, then `fullinit`
//!   in v2 framing): `job-getid`, `info-getjobattr` (`PMI_process_mapping`, `universeSize`),
//!   `info-putnodeattr`/`info-getnodeattr` (per node, visible at once; `wait=TRUE` is answered
//!   when the key is put), `kvs-put`, `kvs-fence`, `kvs-get`, `finalize`, `abort`. Replies echo
//!   a request's `thrid` (multithreaded clients route replies by it). `spawn`, `job-connect`
//!   and the name service are answered with a failure. `fullinit-response` carries no
//!   `spawner-jobid`: its presence alone tells MPICH it was spawned by a parent job.
//!
//! Puts become visible to `get`/`kvs-get` at the end of the next barrier or fence (both
//! protocols). The built-in key `PMI_process_mapping` (see [`process_mapping`]) is there from
//! the start, as Slurm and Hydra put it there; a mapping too long for the client's buffer
//! (673 bytes for PMI-1, 1023 for PMI-2: only irregular placements of hundreds of ranks) is
//! left out, and MPICH then exchanges host names (PMI-1) or fails `MPI_Init` (PMI-2).
//!
//! Hostile input does not panic: garbage, a message over [`Job::max_message`], a rank outside
//! the step, a second `barrier_in` before the first ends, a command before `init` or after
//! `finalize`, and a key-value space over [`Job::max_kvs_bytes`] are [`Error`]s. After an
//! error the step cannot be trusted to complete: the caller kills it. Mistakes a well-behaved
//! client can make (a key not found, a key or value too long for the protocol) are answered in
//! the protocol with a non-zero `rc`.

mod mapping;
pub mod pmix;
mod wire;

use std::collections::{BTreeMap, HashMap};

pub use mapping::process_mapping;
use wire::{Cmd, Wire};

/// The default cap on one message from a rank, in bytes.
pub const DEFAULT_MAX_MESSAGE: usize = 64 * 1024;
/// The default cap on the step's key-value data (keys plus values, node attributes included).
pub const DEFAULT_MAX_KVS_BYTES: usize = 64 * 1024 * 1024;

/// The `get_maxes` answer (Hydra's and Slurm's numbers). MPICH's PMI-1 client fits
/// `kvsname_max + keylen_max + vallen_max + 30` into its 1024-byte line by shrinking the value
/// length it uses to 674.
const KVSNAME_MAX: usize = 256;
const KEYLEN_MAX: usize = 64;
const VALLEN_MAX: usize = 1024;
/// The longest PMI-1 value kept, so that `cmd=get_result rc=0 value=...\n` fits MPICH's
/// 1024-byte line (with its NUL).
const V1_VALUE_MAX: usize = 1024 - 1 - "cmd=get_result rc=0 value=".len() - 1;
/// The longest `PMI_process_mapping` MPICH 4.0's PMI-1 client reads whole (674 bytes with NUL).
const V1_MAPPING_MAX: usize = 673;
/// PMI-2 limits (`PMI2_MAX_KEYLEN`, `PMI2_MAX_VALLEN`; MPICH's buffer holds a NUL too).
const V2_KEY_MAX: usize = 64;
const V2_VALUE_MAX: usize = 1024;
const V2_MAPPING_MAX: usize = 1023;

/// One job step as PMI sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// The key-value space's name (PMI-1 `kvsname`) and the PMI-2 job id, e.g. `"1234.0"`:
    /// 1 to 255 characters, none of them space, `;`, `=`, `\` or a control character.
    pub kvsname: String,
    /// The node of each rank, by rank (its length is the step's size): node indices count the
    /// step's nodes from 0. Ranks on one node share node attributes (PMI-2) and MPICH lets them
    /// talk through shared memory.
    pub nodes: Vec<u32>,
    /// The application number (`appnum`): 0 for a single program.
    pub appnum: i32,
    /// The universe size MPICH reads (`MPI_UNIVERSE_SIZE`): usually the step's size.
    pub universe_size: u32,
    /// The longest message accepted from a rank, in bytes.
    pub max_message: usize,
    /// The most key-value data (keys plus values) the step may hold.
    pub max_kvs_bytes: usize,
}

impl Job {
    /// A step with `nodes[r]` the node of rank `r`, application number 0, universe size the
    /// step's size and the default limits.
    pub fn new(kvsname: impl Into<String>, nodes: Vec<u32>) -> Job {
        let universe_size = u32::try_from(nodes.len()).unwrap_or(u32::MAX);
        Job {
            kvsname: kvsname.into(),
            nodes,
            appnum: 0,
            universe_size,
            max_message: DEFAULT_MAX_MESSAGE,
            max_kvs_bytes: DEFAULT_MAX_KVS_BYTES,
        }
    }

    /// A step placed in blocks: `tasks_per_node[i]` consecutive ranks on node `i`, so `[2, 2]`
    /// is ranks 0 and 1 on node 0, ranks 2 and 3 on node 1.
    pub fn blocks(kvsname: impl Into<String>, tasks_per_node: &[u32]) -> Job {
        let nodes = tasks_per_node.iter().zip(0u32..).flat_map(|(&n, node)| std::iter::repeat_n(node, n as usize)).collect();
        Job::new(kvsname, nodes)
    }

    /// The number of ranks.
    pub fn size(&self) -> u32 {
        u32::try_from(self.nodes.len()).unwrap_or(u32::MAX)
    }

    /// The environment rank `rank` needs, its PMI socket being descriptor `fd` in the task:
    /// `PMI_FD`, `PMI_RANK`, `PMI_SIZE` (MPICH's PMI-1 client reads all three; its PMI-2
    /// client `PMI_FD` and `PMI_RANK`) and `PMI_JOBID` (sent by PMI-2 clients in `fullinit`,
    /// as under Slurm). Which protocol MPICH then speaks is its own choice (fixed when it was
    /// built up to 4.1; `MPIR_CVAR_PMI_VERSION` from 4.2, PMI-1 by default when `PMI_SIZE` is
    /// set); the server follows.
    pub fn task_env(&self, rank: u32, fd: i32) -> Vec<(&'static str, String)> {
        vec![
            ("PMI_FD", fd.to_string()),
            ("PMI_RANK", rank.to_string()),
            ("PMI_SIZE", self.size().to_string()),
            ("PMI_JOBID", self.kvsname.clone()),
        ]
    }
}

/// The protocol a step speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// PMI-1, the "simple" protocol (`pmi_version=1`).
    Pmi1,
    /// PMI-2 (`pmi_version=2`).
    Pmi2,
}

impl Protocol {
    fn number(self) -> u8 {
        match self {
            Protocol::Pmi1 => 1,
            Protocol::Pmi2 => 2,
        }
    }
}

/// Bytes to write to one rank's PMI socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The rank whose socket they go to.
    pub rank: u32,
    /// The bytes, one whole message.
    pub bytes: Vec<u8>,
}

/// A rank's call to abort (`MPI_Abort`, or MPICH giving up): the step should be killed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Abort {
    /// The rank that aborted.
    pub rank: u32,
    /// The exit code it asked for (PMI-1 `exitcode`; PMI-2 MPICH 4.1+ sends one, older clients
    /// none, which reads as 1).
    pub exit_code: i32,
    /// Its message, if it sent one.
    pub message: Option<String>,
}

/// How a rank's PMI socket ended, from [`Server::closed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// It never sent a byte: not an MPI program, or one that never called `MPI_Init`.
    Unused,
    /// After `finalize`: a normal end.
    Finalized,
    /// After `abort` (see [`Server::abort`]).
    Aborted,
    /// It started PMI and went away without `finalize` (or after an error): the other ranks
    /// may wait for it for ever, so the step should be killed.
    Lost,
}

/// What went wrong with a rank's input. Each names the rank it came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The step description cannot be served.
    #[error("bad job step: {0}")]
    BadJob(String),
    /// A rank number outside the step.
    #[error("rank {rank} is not in the step's {size} ranks")]
    NoSuchRank {
        /// The rank given.
        rank: u32,
        /// The step's size.
        size: u32,
    },
    /// A message longer than the limit, or a PMI-2 length field announcing one.
    #[error("rank {rank} sent a message longer than {limit} bytes")]
    TooLong {
        /// The rank.
        rank: u32,
        /// [`Job::max_message`].
        limit: usize,
    },
    /// Bytes that are not a message of the rank's wire format.
    #[error("rank {rank} sent a malformed message: {why}")]
    Malformed {
        /// The rank.
        rank: u32,
        /// What is wrong.
        why: String,
    },
    /// A command this server does not know.
    #[error("rank {rank} sent an unknown PMI-{protocol} command `{cmd}`")]
    UnknownCommand {
        /// The rank.
        rank: u32,
        /// 1 or 2.
        protocol: u8,
        /// The command name.
        cmd: String,
    },
    /// A command other than `init` (or `fullinit`, for PMI-2) before initialisation.
    #[error("rank {rank} sent `{cmd}` before initialising PMI")]
    NotInitialized {
        /// The rank.
        rank: u32,
        /// The command name.
        cmd: String,
    },
    /// A rank initialised with the other protocol than the step's first rank.
    #[error("rank {rank} speaks PMI-{got}, but the step speaks PMI-{step}")]
    MixedProtocols {
        /// The rank.
        rank: u32,
        /// The step's protocol, 1 or 2.
        step: u8,
        /// The rank's, 1 or 2.
        got: u8,
    },
    /// A second `init` (or `fullinit`) from a rank.
    #[error("rank {rank} initialised PMI twice")]
    InitTwice {
        /// The rank.
        rank: u32,
    },
    /// A PMI-2 `fullinit` naming another rank than the socket's.
    #[error("rank {rank} says it is rank {claimed}")]
    RankMismatch {
        /// The socket's rank.
        rank: u32,
        /// The `pmirank` it sent.
        claimed: String,
    },
    /// A `barrier_in` or `kvs-fence` from a rank already waiting in one.
    #[error("rank {rank} entered the barrier twice")]
    DuplicateBarrier {
        /// The rank.
        rank: u32,
    },
    /// A put that would take the step's key-value data over its limit.
    #[error("rank {rank}'s put takes the step's key-value space over {limit} bytes")]
    KvsFull {
        /// The rank.
        rank: u32,
        /// [`Job::max_kvs_bytes`].
        limit: usize,
    },
    /// Input from a rank that has finalized, aborted, closed or failed.
    #[error("rank {rank} sent bytes after it {after}")]
    AfterEnd {
        /// The rank.
        rank: u32,
        /// "finalized", "aborted", "closed" or "failed".
        after: &'static str,
    },
}

/// Where a rank is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Nothing yet, or a PMI-1 `init` refused for its version.
    Fresh,
    /// PMI-2 `init` answered; `fullinit` next.
    Init2,
    /// Initialised.
    Ready,
    Finalized,
    Aborted,
    Closed,
    Failed,
}

#[derive(Debug)]
struct Rank {
    buf: Vec<u8>,
    wire: Wire,
    phase: Phase,
    /// Whether it sent any byte.
    spoke: bool,
    /// In the barrier/fence, with the `thrid` to echo.
    waiting: Option<Option<String>>,
    /// PMI-1 spawn subcommands seen of `totspawns`.
    spawns_seen: u32,
}

/// The PMI server of one job step: see the crate documentation.
#[derive(Debug)]
pub struct Server {
    job: Job,
    protocol: Option<Protocol>,
    ranks: Vec<Rank>,
    /// Visible keys (node attributes are apart).
    kvs: BTreeMap<String, String>,
    /// Puts since the last barrier or fence.
    pending: BTreeMap<String, String>,
    /// Node attributes, per node.
    node_attrs: HashMap<u32, BTreeMap<String, String>>,
    /// `info-getnodeattr wait=TRUE` requests waiting for their key: node, key, rank, thrid.
    node_waits: Vec<(u32, String, u32, Option<String>)>,
    /// Bytes of keys and values held (kvs, pending, node attributes).
    bytes: usize,
    in_barrier: u32,
    abort: Option<Abort>,
    mapping: String,
}

/// What handling one command gives.
type Out = Vec<Reply>;

impl Server {
    /// A server for `job`. The job must have at least one rank and a usable `kvsname` (see
    /// [`Job::kvsname`]); limits below 1 KiB are raised to 1 KiB (MPICH's own line length).
    pub fn new(mut job: Job) -> Result<Server, Error> {
        if job.nodes.is_empty() {
            return Err(Error::BadJob("no ranks".into()));
        }
        if u32::try_from(job.nodes.len()).is_err() {
            return Err(Error::BadJob("more ranks than a u32 counts".into()));
        }
        let k = &job.kvsname;
        if k.is_empty() || k.len() >= KVSNAME_MAX || k.chars().any(|c| c.is_control() || " ;=\\".contains(c)) {
            return Err(Error::BadJob(format!("kvsname {k:?}: 1 to 255 characters, no space, `;`, `=`, `\\` or control")));
        }
        job.max_message = job.max_message.max(1024);
        job.max_kvs_bytes = job.max_kvs_bytes.max(1024);
        let ranks = (0..job.nodes.len())
            .map(|_| Rank { buf: Vec::new(), wire: Wire::V1, phase: Phase::Fresh, spoke: false, waiting: None, spawns_seen: 0 })
            .collect();
        let mapping = process_mapping(&job.nodes);
        Ok(Server {
            job,
            protocol: None,
            ranks,
            kvs: BTreeMap::new(),
            pending: BTreeMap::new(),
            node_attrs: HashMap::new(),
            node_waits: Vec::new(),
            bytes: 0,
            in_barrier: 0,
            abort: None,
            mapping,
        })
    }

    /// The step.
    pub fn job(&self) -> &Job {
        &self.job
    }

    /// The step's protocol, once a rank has initialised.
    pub fn protocol(&self) -> Option<Protocol> {
        self.protocol
    }

    /// The first abort any rank sent, if one did: the caller kills the step.
    pub fn abort(&self) -> Option<&Abort> {
        self.abort.as_ref()
    }

    /// Whether every rank has finalized: the step's PMI work is done.
    pub fn finished(&self) -> bool {
        self.ranks.iter().all(|r| r.phase == Phase::Finalized)
    }

    /// Bytes that arrived on rank `rank`'s socket; returns what to send, to whom, in order.
    /// An incomplete message is kept for the next call. On an error the rank is failed (its
    /// later input is refused) and replies of this call are dropped: the caller kills the step.
    pub fn feed(&mut self, rank: u32, bytes: &[u8]) -> Result<Vec<Reply>, Error> {
        let r = self.rank_index(rank)?;
        let after = match self.ranks[r].phase {
            Phase::Finalized => Some("finalized"),
            Phase::Aborted => Some("aborted"),
            Phase::Closed => Some("closed"),
            Phase::Failed => Some("failed"),
            Phase::Fresh | Phase::Init2 | Phase::Ready => None,
        };
        if let Some(after) = after {
            if bytes.is_empty() {
                return Ok(Vec::new());
            }
            return Err(Error::AfterEnd { rank, after });
        }
        let result = self.feed_ready(rank, r, bytes);
        if result.is_err() {
            self.fail(r);
        }
        result
    }

    fn feed_ready(&mut self, rank: u32, r: usize, bytes: &[u8]) -> Result<Vec<Reply>, Error> {
        let limit = self.job.max_message;
        let mut data = std::mem::take(&mut self.ranks[r].buf);
        data.extend_from_slice(bytes);
        self.ranks[r].spoke |= !data.is_empty();
        let mut out = Vec::new();
        let mut used = 0;
        while used < data.len() {
            let rk = &self.ranks[r];
            if !matches!(rk.phase, Phase::Fresh | Phase::Init2 | Phase::Ready) {
                let after = if rk.phase == Phase::Finalized { "finalized" } else { "aborted" };
                return Err(Error::AfterEnd { rank, after });
            }
            let next = wire::next(&data[used..], rk.wire, limit).map_err(|bad| match bad {
                wire::Bad::TooLong => Error::TooLong { rank, limit },
                wire::Bad::Malformed(why) => Error::Malformed { rank, why },
            })?;
            let Some((cmd, n)) = next else { break };
            used += n;
            out.extend(self.handle(rank, r, cmd)?);
        }
        data.drain(..used);
        self.ranks[r].buf = data;
        Ok(out)
    }

    /// Rank `rank`'s socket closed: how it ended. A rank waiting for a node attribute stops
    /// waiting; one in a barrier stays counted (the barrier cannot end, and [`Closed::Lost`]
    /// says so).
    pub fn closed(&mut self, rank: u32) -> Result<Closed, Error> {
        let r = self.rank_index(rank)?;
        let rk = &mut self.ranks[r];
        let how = match rk.phase {
            Phase::Finalized => Closed::Finalized,
            Phase::Aborted => Closed::Aborted,
            Phase::Fresh if !rk.spoke => Closed::Unused,
            Phase::Closed if !rk.spoke => Closed::Unused,
            Phase::Fresh | Phase::Init2 | Phase::Ready | Phase::Closed | Phase::Failed => Closed::Lost,
        };
        if !matches!(rk.phase, Phase::Finalized | Phase::Aborted) {
            rk.phase = Phase::Closed;
        }
        rk.buf = Vec::new();
        self.node_waits.retain(|w| w.2 != rank);
        Ok(how)
    }

    fn rank_index(&self, rank: u32) -> Result<usize, Error> {
        let size = self.job.size();
        if rank >= size {
            return Err(Error::NoSuchRank { rank, size });
        }
        Ok(rank as usize)
    }

    fn fail(&mut self, r: usize) {
        let rk = &mut self.ranks[r];
        rk.phase = Phase::Failed;
        rk.buf = Vec::new();
        let rank = r as u32;
        self.node_waits.retain(|w| w.2 != rank);
    }

    fn handle(&mut self, rank: u32, r: usize, cmd: Cmd) -> Result<Out, Error> {
        match self.ranks[r].phase {
            Phase::Fresh => self.init(rank, r, cmd),
            Phase::Init2 => self.fullinit(rank, r, cmd),
            _ => match self.protocol {
                Some(Protocol::Pmi2) => self.pmi2(rank, r, cmd),
                _ => self.pmi1(rank, r, cmd),
            },
        }
    }

    /// `cmd=init pmi_version=V pmi_subversion=S`, in v1 framing for both protocols.
    fn init(&mut self, rank: u32, r: usize, cmd: Cmd) -> Result<Out, Error> {
        if cmd.name != "init" || cmd.multi {
            return Err(Error::NotInitialized { rank, cmd: cmd.name });
        }
        let version = cmd.get("pmi_version").unwrap_or("");
        let wanted = match version {
            "1" => Protocol::Pmi1,
            "2" => Protocol::Pmi2,
            _ => {
                // MPICH's client aborts with its own message on a non-zero rc.
                let reply = wire::v1("response_to_init", &[("rc", "-1"), ("pmi_version", "1"), ("pmi_subversion", "1")]);
                return Ok(vec![Reply { rank, bytes: reply }]);
            }
        };
        match self.protocol {
            Some(p) if p != wanted => return Err(Error::MixedProtocols { rank, step: p.number(), got: wanted.number() }),
            _ => self.protocol = Some(wanted),
        }
        let (v, s) = match wanted {
            Protocol::Pmi1 => ("1", "1"),
            Protocol::Pmi2 => ("2", "0"),
        };
        let reply = wire::v1("response_to_init", &[("pmi_version", v), ("pmi_subversion", s), ("rc", "0")]);
        let rk = &mut self.ranks[r];
        match wanted {
            Protocol::Pmi1 => rk.phase = Phase::Ready,
            Protocol::Pmi2 => {
                rk.phase = Phase::Init2;
                rk.wire = Wire::V2;
            }
        }
        Ok(vec![Reply { rank, bytes: reply }])
    }

    /// PMI-2 `fullinit`: the rank, size and application number.
    fn fullinit(&mut self, rank: u32, r: usize, cmd: Cmd) -> Result<Out, Error> {
        if cmd.name != "fullinit" {
            return Err(Error::NotInitialized { rank, cmd: cmd.name });
        }
        // MPICH sends PMI_ID or PMI_RANK, or -1 when neither is set.
        if let Some(claimed) = cmd.get("pmirank")
            && claimed != "-1"
            && claimed.parse::<u32>() != Ok(rank)
        {
            return Err(Error::RankMismatch { rank, claimed: claimed.to_string() });
        }
        self.ranks[r].phase = Phase::Ready;
        let (rank_s, size, appnum) = (rank.to_string(), self.job.size().to_string(), self.job.appnum.to_string());
        let args = [
            ("rc", "0"),
            ("pmi-version", "2"),
            ("pmi-subversion", "0"),
            ("rank", rank_s.as_str()),
            ("size", size.as_str()),
            ("appnum", appnum.as_str()),
            ("debugged", "FALSE"),
            ("pmiverbose", "FALSE"),
        ];
        Ok(vec![reply2(rank, &cmd, "fullinit-response", &args)])
    }

    fn pmi1(&mut self, rank: u32, r: usize, cmd: Cmd) -> Result<Out, Error> {
        let one = |bytes| Ok(vec![Reply { rank, bytes }]);
        if cmd.multi {
            return self.spawn1(rank, r, &cmd);
        }
        match cmd.name.as_str() {
            "init" => Err(Error::InitTwice { rank }),
            "get_maxes" => {
                let (k, kl, vl) = (KVSNAME_MAX.to_string(), KEYLEN_MAX.to_string(), VALLEN_MAX.to_string());
                one(wire::v1("maxes", &[("rc", "0"), ("kvsname_max", &k), ("keylen_max", &kl), ("vallen_max", &vl)]))
            }
            "get_appnum" => one(wire::v1("appnum", &[("rc", "0"), ("appnum", &self.job.appnum.to_string())])),
            "get_universe_size" => one(wire::v1("universe_size", &[("rc", "0"), ("size", &self.job.universe_size.to_string())])),
            "get_my_kvsname" => one(wire::v1("my_kvsname", &[("rc", "0"), ("kvsname", &self.job.kvsname)])),
            "put" => {
                let fail = |msg| one(wire::v1("put_result", &[("rc", "-1"), ("msg", msg)]));
                if cmd.get("kvsname").is_some_and(|k| k != self.job.kvsname) {
                    return fail("kvsname_not_found");
                }
                let (Some(key), Some(value)) = (cmd.get("key"), cmd.get("value")) else { return fail("key_and_value_needed") };
                if key.is_empty() || key.len() > KEYLEN_MAX {
                    return fail("key_too_long");
                }
                if value.len() > V1_VALUE_MAX {
                    return fail("value_too_long");
                }
                self.put(rank, key, value)?;
                one(wire::v1("put_result", &[("rc", "0")]))
            }
            "get" => {
                let found = if cmd.get("kvsname").is_some_and(|k| k != self.job.kvsname) {
                    None
                } else {
                    cmd.get("key").and_then(|k| self.lookup(k, V1_MAPPING_MAX))
                };
                match found {
                    Some(v) => one(wire::v1("get_result", &[("rc", "0"), ("value", v)])),
                    None => one(wire::v1("get_result", &[("rc", "-1"), ("msg", "key_not_found")])),
                }
            }
            "getbyidx" => {
                // Hydra's extension (MPICH's clients do not send it): the idx-th visible key.
                let idx = cmd.get("idx").and_then(|i| i.parse::<usize>().ok());
                let entry = idx.and_then(|i| self.kvs.iter().nth(i).map(|(k, v)| (i, k, v)));
                match entry {
                    Some((i, k, v)) => {
                        let next = (i + 1).to_string();
                        one(wire::v1("getbyidx_results", &[("rc", "0"), ("nextidx", &next), ("key", k), ("val", v)]))
                    }
                    None => one(wire::v1("getbyidx_results", &[("rc", "-2"), ("reason", "no_more_keyvals")])),
                }
            }
            "barrier_in" => {
                if cmd.get("group").is_some() {
                    // PMI-1.2 group barriers: never sent to a server that says subversion 1.
                    return one(wire::v1("barrier_out", &[("rc", "-1"), ("msg", "group_barriers_unsupported")]));
                }
                self.enter_barrier(rank, r, None)
            }
            "finalize" => {
                self.ranks[r].phase = Phase::Finalized;
                one(wire::v1("finalize_ack", &[("rc", "0")]))
            }
            "abort" => {
                let exit_code = cmd.get("exitcode").and_then(|c| c.parse().ok()).unwrap_or(1);
                let message = cmd.get("message").map(wire::unescape_v1);
                self.record_abort(rank, r, exit_code, message);
                Ok(Vec::new())
            }
            "publish_name" | "unpublish_name" | "lookup_name" => {
                let reply = format!("{}_result", cmd.name.trim_end_matches("_name"));
                one(wire::v1(&reply, &[("rc", "-1"), ("info", "fail"), ("msg", "name_service_unsupported")]))
            }
            _ => Err(Error::UnknownCommand { rank, protocol: 1, cmd: cmd.name.clone() }),
        }
    }

    /// A PMI-1 `mcmd=spawn` block: answered with a failure once the last of `totspawns` came.
    fn spawn1(&mut self, rank: u32, r: usize, cmd: &Cmd) -> Result<Out, Error> {
        if cmd.name != "spawn" {
            return Err(Error::UnknownCommand { rank, protocol: 1, cmd: format!("mcmd={}", cmd.name) });
        }
        let total = cmd.get("totspawns").and_then(|t| t.parse::<u32>().ok()).unwrap_or(1);
        let rk = &mut self.ranks[r];
        rk.spawns_seen += 1;
        if rk.spawns_seen < total {
            return Ok(Vec::new());
        }
        rk.spawns_seen = 0;
        Ok(vec![Reply { rank, bytes: wire::v1("spawn_result", &[("rc", "-1"), ("msg", "spawn_unsupported")]) }])
    }

    fn pmi2(&mut self, rank: u32, r: usize, cmd: Cmd) -> Result<Out, Error> {
        let one = |name: &str, args: &[(&str, &str)]| Ok(vec![reply2(rank, &cmd, name, args)]);
        match cmd.name.as_str() {
            "fullinit" => Err(Error::InitTwice { rank }),
            "job-getid" => {
                let jobid = self.job.kvsname.clone();
                one("job-getid-response", &[("rc", "0"), ("jobid", &jobid)])
            }
            "info-getjobattr" => {
                let key = cmd.get("key").unwrap_or("");
                let value = match key {
                    "PMI_process_mapping" => (self.mapping.len() <= V2_MAPPING_MAX).then(|| self.mapping.clone()),
                    "universeSize" => Some(self.job.universe_size.to_string()),
                    _ => None,
                };
                match value {
                    Some(v) => one("info-getjobattr-response", &[("rc", "0"), ("found", "TRUE"), ("value", &v)]),
                    None => one("info-getjobattr-response", &[("rc", "0"), ("found", "FALSE")]),
                }
            }
            "kvs-put" => {
                let (Some(key), Some(value)) = (cmd.get("key"), cmd.get("value")) else {
                    return one("kvs-put-response", &[("rc", "-1"), ("errmsg", "key and value needed")]);
                };
                if key.is_empty() || key.len() > V2_KEY_MAX || value.len() > V2_VALUE_MAX {
                    return one("kvs-put-response", &[("rc", "-1"), ("errmsg", "key or value too long")]);
                }
                let (key, value) = (key.to_string(), value.to_string());
                self.put(rank, &key, &value)?;
                Ok(vec![reply2(rank, &cmd, "kvs-put-response", &[("rc", "0")])])
            }
            "kvs-fence" => {
                let thrid = cmd.get("thrid").map(str::to_string);
                self.enter_barrier(rank, r, Some(thrid))
            }
            "kvs-get" => {
                let other_job = cmd.get("jobid").is_some_and(|j| j != self.job.kvsname);
                let found = if other_job { None } else { cmd.get("key").and_then(|k| self.lookup(k, V2_MAPPING_MAX)) };
                match found.map(str::to_string) {
                    Some(v) => one("kvs-get-response", &[("rc", "0"), ("found", "TRUE"), ("value", &v)]),
                    None => one("kvs-get-response", &[("rc", "0"), ("found", "FALSE")]),
                }
            }
            "info-putnodeattr" => {
                let (Some(key), Some(value)) = (cmd.get("key"), cmd.get("value")) else {
                    return one("info-putnodeattr-response", &[("rc", "-1"), ("errmsg", "key and value needed")]);
                };
                if key.is_empty() || key.len() > V2_KEY_MAX || value.len() > V2_VALUE_MAX {
                    return one("info-putnodeattr-response", &[("rc", "-1"), ("errmsg", "key or value too long")]);
                }
                let (key, value) = (key.to_string(), value.to_string());
                let node = self.job.nodes[r];
                let old = self.node_attrs.get(&node).and_then(|a| a.get(&key)).map_or(0, |v| key.len() + v.len());
                self.charge(rank, key.len() + value.len(), old)?;
                self.node_attrs.entry(node).or_default().insert(key.clone(), value.clone());
                let mut out = vec![reply2(rank, &cmd, "info-putnodeattr-response", &[("rc", "0")])];
                let (woken, rest): (Vec<_>, Vec<_>) =
                    std::mem::take(&mut self.node_waits).into_iter().partition(|w| w.0 == node && w.1 == key);
                self.node_waits = rest;
                for (_, _, waiter, thrid) in woken {
                    let mut args = vec![("rc", "0"), ("found", "TRUE"), ("value", value.as_str())];
                    if let Some(t) = &thrid {
                        args.push(("thrid", t));
                    }
                    out.push(Reply { rank: waiter, bytes: wire::v2("info-getnodeattr-response", &args) });
                }
                Ok(out)
            }
            "info-getnodeattr" => {
                let key = cmd.get("key").unwrap_or("").to_string();
                let node = self.job.nodes[r];
                match self.node_attrs.get(&node).and_then(|a| a.get(&key)).cloned() {
                    Some(v) => one("info-getnodeattr-response", &[("rc", "0"), ("found", "TRUE"), ("value", &v)]),
                    None if cmd.get("wait") == Some("TRUE") => {
                        if self.node_waits.iter().any(|w| w.2 == rank) {
                            return Err(Error::Malformed { rank, why: "a second info-getnodeattr while one waits".into() });
                        }
                        let thrid = cmd.get("thrid").map(str::to_string);
                        self.node_waits.push((node, key, rank, thrid));
                        Ok(Vec::new())
                    }
                    None => one("info-getnodeattr-response", &[("rc", "0"), ("found", "FALSE")]),
                }
            }
            "finalize" => {
                self.ranks[r].phase = Phase::Finalized;
                one("finalize-response", &[("rc", "0")])
            }
            "abort" => {
                // MPICH 4.0: isworld=TRUE;msg=...; 4.1+: exitcode=N;message=...
                let exit_code = cmd.get("exitcode").and_then(|c| c.parse().ok()).unwrap_or(1);
                let message = cmd.get("message").or(cmd.get("msg")).map(str::to_string);
                self.record_abort(rank, r, exit_code, message);
                Ok(Vec::new())
            }
            "spawn" => one("spawn-response", &[("rc", "-1"), ("errmsg", "spawn unsupported")]),
            "name-publish" | "name-unpublish" | "name-lookup" | "job-connect" | "job-disconnect" => {
                let name = format!("{}-response", cmd.name);
                one(&name, &[("rc", "-1"), ("errmsg", "unsupported")])
            }
            _ => Err(Error::UnknownCommand { rank, protocol: 2, cmd: cmd.name.clone() }),
        }
    }

    /// A visible key: a built-in or a put made visible by a barrier. `mapping_max` is the
    /// longest mapping the protocol's clients read whole; a longer one is left out, so MPICH
    /// falls back on exchanging host names (PMI-1) rather than misreading it.
    fn lookup(&self, key: &str, mapping_max: usize) -> Option<&str> {
        if key == "PMI_process_mapping" && !self.kvs.contains_key(key) {
            return (self.mapping.len() <= mapping_max).then_some(self.mapping.as_str());
        }
        self.kvs.get(key).map(String::as_str)
    }

    /// A put, pending until the next barrier.
    fn put(&mut self, rank: u32, key: &str, value: &str) -> Result<(), Error> {
        let old = self.pending.get(key).map_or(0, |v| key.len() + v.len());
        self.charge(rank, key.len() + value.len(), old)?;
        self.pending.insert(key.to_string(), value.to_string());
        Ok(())
    }

    /// Accounts `new` bytes replacing `old` ones, within the limit.
    fn charge(&mut self, rank: u32, new: usize, old: usize) -> Result<(), Error> {
        let total = self.bytes - old + new;
        if total > self.job.max_kvs_bytes {
            return Err(Error::KvsFull { rank, limit: self.job.max_kvs_bytes });
        }
        self.bytes = total;
        Ok(())
    }

    /// A rank enters the barrier (PMI-1, `thrid` None) or fence (PMI-2, with its `thrid`); the
    /// last one in releases everyone and makes the pending puts visible.
    fn enter_barrier(&mut self, rank: u32, r: usize, fence: Option<Option<String>>) -> Result<Out, Error> {
        let rk = &mut self.ranks[r];
        if rk.waiting.is_some() {
            return Err(Error::DuplicateBarrier { rank });
        }
        rk.waiting = Some(fence.clone().flatten());
        self.in_barrier += 1;
        if self.in_barrier < self.job.size() {
            return Ok(Vec::new());
        }
        self.in_barrier = 0;
        for (k, v) in std::mem::take(&mut self.pending) {
            if let Some(old) = self.kvs.insert(k.clone(), v) {
                // The pending copy was charged; the replaced one goes.
                self.bytes -= k.len() + old.len();
            }
        }
        let v2 = fence.is_some();
        let mut out = Vec::with_capacity(self.ranks.len());
        for (i, rk) in self.ranks.iter_mut().enumerate() {
            let thrid = rk.waiting.take().flatten();
            let bytes = if v2 {
                let mut args = vec![("rc", "0")];
                if let Some(t) = &thrid {
                    args.push(("thrid", t));
                }
                wire::v2("kvs-fence-response", &args)
            } else {
                wire::v1("barrier_out", &[("rc", "0")])
            };
            out.push(Reply { rank: i as u32, bytes });
        }
        Ok(out)
    }

    fn record_abort(&mut self, rank: u32, r: usize, exit_code: i32, message: Option<String>) {
        self.ranks[r].phase = Phase::Aborted;
        if self.abort.is_none() {
            self.abort = Some(Abort { rank, exit_code, message });
        }
    }
}

/// A v2 reply to `cmd`, echoing its `thrid`.
fn reply2(rank: u32, cmd: &Cmd, name: &str, args: &[(&str, &str)]) -> Reply {
    let mut all = args.to_vec();
    if let Some(t) = cmd.get("thrid") {
        all.push(("thrid", t));
    }
    Reply { rank, bytes: wire::v2(name, &all) }
}

#[cfg(test)]
mod tests;
