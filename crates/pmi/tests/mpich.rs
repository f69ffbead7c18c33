//! The real check: MPI programs started the way `srun` starts them, each with a socket as its
//! `PMI_FD`, their bytes shuttled to and from a `pmi::Server` by a small loop, and all four
//! ranks must agree on a sum. The mapping places them on two "nodes" (2 + 2) of this one
//! machine, so MPICH uses shared memory within each pair and its network module between them.
//!
//! - PMI-1: an `MPI_Allreduce` program built with `mpicc.mpich` (Debian's `mpich` and
//!   `libmpich-dev`), or the `mpicc` named by `PMI_TEST_MPICC` (e.g. the PyPI `mpich` wheel's).
//!   Without one the test says so and passes, except under `CI=true`, where it must exist.
//! - PMI-2 through MPICH, when its MPI layer has the PMI-2 path (neither Debian 12's MPICH 4.0.2
//!   nor the PyPI wheel 5.0.2 has: both are built with PMI-1 only; a 4.2+ build with PMI-2
//!   is told `MPIR_CVAR_PMI_VERSION=2`).
//! - PMI-2 through Slurm's `libpmi2` (Debian's `libpmi2-0-dev`; MPICH's own PMI-2 client,
//!   which MPICH and Open MPI link `--with-pmi=slurm`), with a C program that does what MPICH
//!   does in `MPI_Init`: init, job id, process mapping, node attributes with `wait`, put,
//!   fence, get from every rank, finalize. Skipped when the library is missing.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

const PROGRAM: &str = r#"
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, x, sum;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    x = rank + 1;
    MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d sum %d\n", rank, size, sum);
    MPI_Finalize();
    return 0;
}
"#;

const RANKS: u32 = 4;
const DEADLINE: Duration = Duration::from_secs(25);

/// One spawn at a time: a child end loses close-on-exec only while its child is spawned, so no
/// other child inherits it.
static SPAWN: Mutex<()> = Mutex::new(());

struct Mpich {
    mpicc: PathBuf,
    /// The library's bytes say which clients it has.
    pmi1: bool,
    pmi2: bool,
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

fn mpich() -> Option<Mpich> {
    let mpicc = match std::env::var_os("PMI_TEST_MPICC") {
        Some(p) => Some(PathBuf::from(p)),
        None => on_path("mpicc.mpich"),
    };
    let Some(mpicc) = mpicc else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but mpicc.mpich is missing: install mpich and libmpich-dev");
        eprintln!("skipped: no mpicc.mpich (install mpich and libmpich-dev, or set PMI_TEST_MPICC)");
        return None;
    };
    // The library the wrapper links (`-L` dirs and `-l` names of `mpicc -show`).
    let show = Command::new(&mpicc).arg("-show").output().expect("mpicc -show");
    let show = String::from_utf8_lossy(&show.stdout).into_owned();
    let words: Vec<&str> = show.split_whitespace().collect();
    let mut dirs: Vec<PathBuf> = words.iter().filter_map(|w| w.strip_prefix("-L")).map(PathBuf::from).collect();
    if dirs.is_empty() {
        // Debian's wrapper names no -L: the multiarch directory.
        dirs.push("/usr/lib/x86_64-linux-gnu".into());
    }
    let libs: Vec<String> = words.iter().filter_map(|w| w.strip_prefix("-l")).map(|l| format!("lib{l}.so")).collect();
    // `libmpi.so` may be a linker script naming `libmpi.so.12`: look at every `libNAME.so*`.
    let mut files: Vec<PathBuf> = Vec::new();
    for d in &dirs {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if libs.iter().any(|l| name.starts_with(l.as_str())) && e.path().is_file() {
                files.push(e.path());
            }
        }
    }
    assert!(!files.is_empty(), "no MPI library for `{show}`");
    let (mut pmi1, mut pmi2) = (false, false);
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
        pmi1 |= has(b"get_maxes");
        // The MPI layer's PMI-2 path asks for `universeSize` (libpmi alone has PMI-2 strings
        // even when the MPI layer was built without it).
        pmi2 |= has(b"universeSize");
    }
    let m = Mpich { mpicc, pmi1, pmi2 };
    let lib = &files[0];
    eprintln!("MPICH at {} ({}): PMI-1 {}, PMI-2 {}", m.mpicc.display(), lib.display(), m.pmi1, m.pmi2);
    Some(m)
}

fn compile(cc: &Path, source: &str, args: &[&str], dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join("prog.c");
    std::fs::write(&src, source).unwrap();
    let exe = dir.join("prog");
    let out = Command::new(cc).arg("-o").arg(&exe).arg(&src).args(args).output().unwrap();
    assert!(out.status.success(), "{} failed: {}", cc.display(), String::from_utf8_lossy(&out.stderr));
    exe
}

/// Runs the program on `RANKS` ranks placed in blocks of `layout` (ranks per "node"), with
/// `extra` environment, and returns the server's protocol, each rank's standard output and how
/// its socket ended.
fn run(exe: &Path, layout: &[u32], extra: &[(&str, &str)]) -> (Option<pmi::Protocol>, Vec<String>, Vec<pmi::Closed>) {
    let job = pmi::Job::blocks("4242.0", layout);
    let mut server = pmi::Server::new(job.clone()).unwrap();
    let mut kids: Vec<Child> = Vec::new();
    let mut writers: Vec<UnixStream> = Vec::new();
    let (tx, rx) = mpsc::channel::<(u32, Option<Vec<u8>>)>();
    for rank in 0..RANKS {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let mut cmd = Command::new(exe);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        for (k, v) in job.task_env(rank, theirs.as_raw_fd()) {
            cmd.env(k, v);
        }
        for (k, v) in extra {
            cmd.env(k, v);
        }
        {
            let _one = SPAWN.lock().unwrap();
            nix::fcntl::fcntl(&theirs, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty())).unwrap();
            kids.push(cmd.spawn().unwrap());
            drop(theirs);
        }
        writers.push(ours.try_clone().unwrap());
        let tx = tx.clone();
        let mut ours = ours;
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match ours.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send((rank, None));
                        return;
                    }
                    Ok(n) => {
                        if tx.send((rank, Some(buf[..n].to_vec()))).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
    drop(tx);
    // PMI_TEST_TRACE=1 prints what each rank sends.
    let trace = std::env::var_os("PMI_TEST_TRACE").is_some();
    let start = Instant::now();
    let mut closed = vec![None; RANKS as usize];
    while closed.iter().any(Option::is_none) {
        let left = DEADLINE.saturating_sub(start.elapsed());
        let Ok((rank, bytes)) = rx.recv_timeout(left) else { break };
        if let (Some(b), true) = (&bytes, trace) {
            eprintln!("rank {rank} > {:?}", String::from_utf8_lossy(b));
        }
        match bytes {
            Some(bytes) => match server.feed(rank, &bytes) {
                Ok(replies) => {
                    for r in replies {
                        let _ = writers[r.rank as usize].write_all(&r.bytes);
                    }
                }
                Err(e) => panic!("PMI error: {e}"),
            },
            None => closed[rank as usize] = Some(server.closed(rank).unwrap()),
        }
    }
    let mut outputs = Vec::new();
    for (rank, mut kid) in kids.into_iter().enumerate() {
        while kid.try_wait().unwrap().is_none() && start.elapsed() < DEADLINE {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = kid.kill();
        let out = kid.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!("rank {rank} ({}): {}{}", out.status, text, String::from_utf8_lossy(&out.stderr));
        outputs.push(text);
    }
    assert!(server.abort().is_none(), "a rank aborted: {:?}", server.abort());
    let closed = closed.into_iter().map(|c| c.expect("every rank ends within the deadline")).collect();
    (server.protocol(), outputs, closed)
}

fn check(exe: &Path, layout: &[u32], extra: &[(&str, &str)], want: pmi::Protocol) {
    let (protocol, outputs, closed) = run(exe, layout, extra);
    assert_eq!(protocol, Some(want));
    for (rank, out) in outputs.iter().enumerate() {
        assert_eq!(out.trim(), format!("rank {rank} of {RANKS} sum 10"), "rank {rank}");
    }
    assert!(closed.iter().all(|c| *c == pmi::Closed::Finalized), "{closed:?}");
}

fn workdir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("pmi-mpich-{}-{name}", std::process::id()))
}

#[test]
fn mpich_over_pmi1() {
    let Some(m) = mpich() else { return };
    if !m.pmi1 {
        eprintln!("skipped: this MPICH has no PMI-1 client");
        return;
    }
    let dir = workdir("pmi1");
    let exe = compile(&m.mpicc, PROGRAM, &[], &dir);
    // MPICH 4.2+ picks PMI-1 itself when PMI_SIZE is set; say so for builds that have both.
    let env = [("MPIR_CVAR_PMI_VERSION", "1")];
    // Two nodes of two (shared memory within, the network module between), then one node
    // (shared memory only) and four nodes (network only), all on this machine.
    for layout in [&[2, 2][..], &[4], &[1, 1, 1, 1]] {
        check(&exe, layout, &env, pmi::Protocol::Pmi1);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn mpich_over_pmi2() {
    let Some(m) = mpich() else { return };
    if !m.pmi2 {
        eprintln!("skipped: this MPICH's MPI layer has no PMI-2 path (Debian 12's 4.0.2 and PyPI's 5.0.2 have PMI-1 only)");
        return;
    }
    let dir = workdir("pmi2");
    let exe = compile(&m.mpicc, PROGRAM, &[], &dir);
    check(&exe, &[2, 2], &[("MPIR_CVAR_PMI_VERSION", "2")], pmi::Protocol::Pmi2);
    let _ = std::fs::remove_dir_all(dir);
}

/// What MPICH's `MPI_Init` asks of PMI-2, through Slurm's `libpmi2` (MPICH's own PMI-2
/// client): each rank puts `rank + 1`, fences, reads every rank's value and prints the sum.
const PMI2_PROGRAM: &str = r#"
#include <slurm/pmi2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define CHECK(x) do { int rc_ = (x); if (rc_ != PMI2_SUCCESS) { printf("%s failed: %d\n", #x, rc_); return 1; } } while (0)
int main(void) {
    int spawned, size, rank, appnum, found, len, sum = 0;
    char jobid[256], map[1024], key[64], val[1024];
    CHECK(PMI2_Init(&spawned, &size, &rank, &appnum));
    CHECK(PMI2_Job_GetId(jobid, sizeof jobid));
    CHECK(PMI2_Info_GetJobAttr("PMI_process_mapping", map, sizeof map, &found));
    if (!found || strcmp(map, "(vector,(0,2,2))") != 0) { printf("mapping %s\n", map); return 1; }
    /* The node root puts a node attribute; the other rank on the node waits for it. */
    if (rank % 2 == 0) {
        snprintf(val, sizeof val, "shm;segment-%d", rank);
        CHECK(PMI2_Info_PutNodeAttr("-bcast-1", val));
    } else {
        CHECK(PMI2_Info_GetNodeAttr("-bcast-1", val, sizeof val, &found, 1));
        char want[64];
        snprintf(want, sizeof want, "shm;segment-%d", rank - 1);
        if (!found || strcmp(val, want) != 0) { printf("node attribute %s\n", val); return 1; }
    }
    snprintf(key, sizeof key, "-allgather-1-%d", rank);
    snprintf(val, sizeof val, "%d", rank + 1);
    CHECK(PMI2_KVS_Put(key, val));
    CHECK(PMI2_KVS_Fence());
    for (int r = 0; r < size; r++) {
        snprintf(key, sizeof key, "-allgather-1-%d", r);
        CHECK(PMI2_KVS_Get(jobid, r, key, val, sizeof val, &len));
        sum += atoi(val);
    }
    if (PMI2_KVS_Get(jobid, PMI2_ID_NULL, "-NONEXIST-KEY", val, sizeof val, &len) == PMI2_SUCCESS && len > 0) {
        printf("found a missing key\n");
        return 1;
    }
    printf("rank %d of %d sum %d\n", rank, size, sum);
    fflush(stdout);
    CHECK(PMI2_Finalize());
    return 0;
}
"#;

#[test]
fn slurm_libpmi2_over_pmi2() {
    let header = Path::new("/usr/include/slurm/pmi2.h");
    let Some(cc) = on_path("cc").or_else(|| on_path("gcc")) else {
        eprintln!("skipped: no C compiler");
        return;
    };
    if !header.exists() {
        assert!(std::env::var("CI").is_err(), "the PMI-2 test cannot run under CI=true: install libpmi2-0-dev");
        eprintln!("skipped: no {} (install libpmi2-0-dev)", header.display());
        return;
    }
    let dir = workdir("libpmi2");
    let exe = compile(&cc, PMI2_PROGRAM, &["-lpmi2"], &dir);
    check(&exe, &[2, 2], &[], pmi::Protocol::Pmi2);
    let _ = std::fs::remove_dir_all(dir);
}
