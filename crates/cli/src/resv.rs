//! Advance reservations from the command line, as Slurm's: `scontrol create|update|delete|show
//! reservation` and `sinfo -T`.

use anyhow::Result;
use client::{Target, send};
use wire::{ResvCreated, ResvInfo};

use crate::common::{now, runtime};
use crate::query::{get, iso};

/// All reservations, by name.
pub(crate) fn list(t: &Target) -> Result<Vec<ResvInfo>> {
    get(t, "/v1/reservations")
}

/// Whether `word` names the reservation entity (`reservation`, `res`, `ReservationName`, any
/// case, plural too).
pub(crate) fn is_entity(word: &str) -> bool {
    let w = word.to_ascii_lowercase();
    let w = w.trim_end_matches('s');
    w.len() >= 3 && ("reservation".starts_with(w) || "reservationname".starts_with(w))
}

/// The TRES a reservation holds, as Slurm shows them (`cpu=8,gres/gpu=2`).
fn tres(r: &ResvInfo) -> String {
    let mut s = format!("cpu={}", r.cpus);
    if r.gpus > 0 {
        s.push_str(&format!(",gres/gpu={}", r.gpus));
    }
    s
}

fn names(list: &[String], negated: bool) -> String {
    if list.is_empty() { "(null)".into() } else { format!("{}{}", if negated { "-" } else { "" }, list.join(",")) }
}

/// `scontrol show reservation`'s record.
fn lines(r: &ResvInfo) -> Vec<String> {
    let v = &r.resv;
    let or_null = |s: &str| if s.is_empty() { "(null)".to_string() } else { s.to_string() };
    vec![
        format!(
            "ReservationName={} StartTime={} EndTime={} Duration={}",
            slurmcli::visible(&v.name),
            iso(r.start),
            iso(r.end),
            slurmcli::hms(Some(r.end - r.start))
        ),
        format!(
            "Nodes={} NodeCnt={} CoreCnt={} Features=(null) PartitionName={} Flags={}",
            or_null(&slurmcli::compress(&v.nodes)),
            v.nodes.len(),
            r.cpus,
            v.partition.as_deref().unwrap_or("(null)"),
            v.flags.words()
        ),
        format!("TRES={}", tres(r)),
        format!(
            "Users={} Groups=(null) Accounts={} Licenses=(null) State={} BurstBuffer=(null) Watts=n/a",
            names(&v.users, v.users_negated),
            names(&v.accounts, v.accounts_negated),
            if r.active { "ACTIVE" } else { "INACTIVE" }
        ),
        "MaxStartDelay=(null)".into(),
    ]
}

/// `scontrol show reservation [NAME]`.
pub(crate) fn show(name: Option<&str>, oneliner: bool) -> Result<i32> {
    let mut all = list(&Target::from_env()?)?;
    if let Some(n) = name {
        all.retain(|r| r.resv.name == n);
        if all.is_empty() {
            println!("Reservation {} not found", slurmcli::visible(n));
            return Ok(1);
        }
    }
    if all.is_empty() {
        println!("No reservations in the system");
    }
    for r in &all {
        crate::query::print_record(&lines(r), oneliner);
    }
    Ok(0)
}

/// `sinfo -T`.
pub(crate) fn sinfo_table(header: bool) -> Result<i32> {
    let all = list(&Target::from_env()?)?;
    if all.is_empty() {
        println!("No reservations in the system");
        return Ok(0);
    }
    let width = if header { all.iter().map(|r| r.resv.name.len()).max().unwrap_or(0).max(9) } else { 0 };
    if header {
        println!("{:<width$}  {:>8}  {:>19}  {:>19}  {:>11}  NODELIST", "RESV_NAME", "STATE", "START_TIME", "END_TIME", "DURATION");
    }
    for r in &all {
        println!(
            "{:<width$}  {:>8}  {:>19}  {:>19}  {:>11}  {}",
            slurmcli::visible(&r.resv.name),
            if r.active { "ACTIVE" } else { "INACTIVE" },
            iso(r.start),
            iso(r.end),
            slurmcli::hms(Some(r.end - r.start)),
            slurmcli::compress(&r.resv.nodes)
        );
    }
    Ok(0)
}

/// `scontrol create reservation KEY=VALUE...`.
pub(crate) fn create(words: &[String]) -> Result<i32> {
    let spec = match slurmcli::resv::parse_reservation(words, now()).and_then(|s| slurmcli::resv::check_create(&s).map(|()| s)) {
        Ok(s) => s,
        Err(m) => {
            eprintln!("scontrol: error: {m}.  No reservation created.");
            return Ok(1);
        }
    };
    let t = Target::from_env()?;
    let reply = runtime()?.block_on(send(&t, "POST", "/v1/reservations", Some(&spec), &[]))?;
    if reply.status >= 400 {
        eprintln!("Error creating the reservation: {}", reply.error());
        return Ok(1);
    }
    let made: ResvCreated = reply.json()?;
    println!("Reservation created: {}", slurmcli::visible(&made.name));
    Ok(0)
}

/// `scontrol update ReservationName=NAME KEY=VALUE...`.
pub(crate) fn update(words: &[String]) -> Result<i32> {
    let spec = match slurmcli::resv::parse_reservation(words, now()) {
        Ok(s) => s,
        Err(m) => {
            eprintln!("scontrol: error: {m}.  No reservation update.");
            return Ok(1);
        }
    };
    let Some(name) = spec.name.clone() else {
        eprintln!("scontrol: error: ReservationName must be given.  No reservation update.");
        return Ok(1);
    };
    let t = Target::from_env()?;
    let reply = runtime()?.block_on(send(&t, "POST", &format!("/v1/reservations/{name}"), Some(&spec), &[]))?;
    if reply.status >= 400 {
        eprintln!("Error updating the reservation: {}", reply.error());
        return Ok(1);
    }
    println!("Reservation updated.");
    Ok(0)
}

/// `scontrol delete ReservationName=NAME` (or `delete reservation NAME`); `token` is the
/// word Slurm names in its error.
pub(crate) fn delete(token: &str, name: &str) -> Result<i32> {
    if !slurmcli::resv::valid_resv_name(name) {
        eprintln!("delete_reservation {}: Requested reservation is invalid", slurmcli::visible(token));
        return Ok(1);
    }
    let t = Target::from_env()?;
    let reply = runtime()?.block_on(send(&t, "DELETE", &format!("/v1/reservations/{name}"), None::<&()>, &[]))?;
    if reply.status >= 400 {
        eprintln!("delete_reservation {}: {}", slurmcli::visible(token), reply.error());
        return Ok(1);
    }
    Ok(0)
}
