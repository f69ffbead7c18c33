//! What Slurm's query commands (`squeue`, `sacct`, `sinfo`, `scontrol`) compute on the client:
//! their time and size formats, `-S`/`-E` times, format strings with widths (`%.10M`,
//! `JobName%20`, `-O Name:30`), cells cut and padded as Slurm's, state names, sort keys and job
//! array index ranges. Each is pure: the caller passes the current time.

use crate::Invalid;

/// Seconds in a year: squeue prints a longer duration as `INVALID`, as Slurm's.
const YEAR_SECONDS: i64 = 365 * 24 * 3600;

/// `[D-]HH:MM:SS` as `sacct` and `scontrol` print durations (`00:00:11`, `1-02:03:04`):
/// `UNLIMITED` for none, `INVALID` for a negative one (Slurm's `secs2time_str`).
pub fn hms(secs: Option<i64>) -> String {
    let Some(s) = secs else { return "UNLIMITED".into() };
    if s < 0 {
        return "INVALID".into();
    }
    let (d, h, m, sec) = (s / 86400, (s / 3600) % 24, (s / 60) % 60, s % 60);
    if d > 0 { format!("{d}-{h:02}:{m:02}:{sec:02}") } else { format!("{h:02}:{m:02}:{sec:02}") }
}

/// A duration as `squeue` prints `%M`, `%l` and `%L`: `M:SS`, `H:MM:SS` or `D-HH:MM:SS`;
/// `INVALID` below zero or above a year (Slurm's `_print_secs`).
pub fn squeue_secs(s: i64) -> String {
    if !(0..=YEAR_SECONDS).contains(&s) {
        return "INVALID".into();
    }
    crate::formats::compact_time(s)
}

/// A size unit of Slurm's `convert_num_unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unit {
    /// Bytes (or a plain count).
    None,
    /// Kibi.
    K,
    /// Mebi.
    M,
    /// Gibi.
    G,
    /// Tebi.
    T,
    /// Pebi.
    P,
}

impl Unit {
    fn index(self) -> i32 {
        self as i32
    }

    fn from_index(i: i32) -> Option<Unit> {
        [Unit::None, Unit::K, Unit::M, Unit::G, Unit::T, Unit::P].get(usize::try_from(i).ok()?).copied()
    }

    fn suffix(self) -> &'static str {
        ["", "K", "M", "G", "T", "P"][self as usize]
    }
}

/// `--units=[KMGTP]` (sacct, sinfo): the unit sizes are printed in.
pub fn parse_unit(s: &str) -> Result<Unit, Invalid> {
    match s.chars().next().map(|c| c.to_ascii_uppercase()) {
        Some('K') if s.len() == 1 => Ok(Unit::K),
        Some('M') if s.len() == 1 => Ok(Unit::M),
        Some('G') if s.len() == 1 => Ok(Unit::G),
        Some('T') if s.len() == 1 => Ok(Unit::T),
        Some('P') if s.len() == 1 => Ok(Unit::P),
        _ => Err(Invalid::new(format!("Invalid unit type: {s:?} (K, M, G, T or P)"))),
    }
}

/// A size as Slurm prints it (`convert_num_unit`, exact mode): `num` in `unit` is converted to
/// larger units while no precision is lost (`4096` M is `4G`, `1000` M stays `1000M`), or to
/// `to` when given (`--units`), with two decimals when not whole.
pub fn size(num: f64, unit: Unit, to: Option<Unit>) -> String {
    if num as i64 == 0 {
        return "0".into();
    }
    let (mut n, mut u) = (num, unit.index());
    match to {
        Some(t) => {
            while t.index() < u {
                n *= 1024.0;
                u -= 1;
            }
            while t.index() > u {
                n /= 1024.0;
                u += 1;
            }
        }
        None => {
            while n >= 1024.0 && (n as u64).is_multiple_of(512) && u < Unit::P.index() {
                n /= 1024.0;
                u += 1;
            }
        }
    }
    let suffix = Unit::from_index(u).map_or("?", Unit::suffix);
    if n.fract() == 0.0 { format!("{}{suffix}", n as u64) } else { format!("{n:.2}{suffix}") }
}

fn bad_time(s: &str) -> Invalid {
    Invalid::new(format!("Invalid time specification: {s}"))
}

/// Parses a time as `sacct -S/-E` (Slurm's `parse_time`, looking into the past) take it:
/// `now[{+|-}count[seconds|minutes|hours|days|weeks]]`, `today`, `tomorrow`, `midnight`,
/// `noon`, `elevenses`, `fika`, `teatime`, `HH:MM[:SS][AM|PM]`, `MMDD[YY]`, `MM/DD[/YY]`,
/// `MM.DD[.YY]`, `YYYY-MM-DD[THH:MM[:SS]]`, `uts<Unix seconds>`, or several of these (a date
/// and a time). Times are UTC, as Tandem prints them. As Slurm's looking into the past: a time
/// without a date is today's, a date without a year is this year's unless its month is later
/// than this one (then last year's).
pub fn parse_when(s: &str, now: i64) -> Result<i64, Invalid> {
    let bad = || bad_time(s);
    if s.len() > 64 {
        return Err(bad());
    }
    if let Some(rest) = s.get(..3).filter(|p| p.eq_ignore_ascii_case("uts")).map(|_| &s[3..]) {
        let v: i64 = rest.parse().map_err(|_| bad())?;
        return if v < 1_000_000 { Err(bad()) } else { Ok(v) };
    }
    let today = now.div_euclid(86400);
    let mut date: Option<i64> = None; // days since the epoch
    let mut time: Option<i64> = None; // seconds into the day
    let b = s.as_bytes();
    let lower = s.to_ascii_lowercase();
    let mut i = 0;
    let words: [(&str, i64); 5] = [("midnight", 0), ("noon", 12), ("elevenses", 11), ("fika", 15), ("teatime", 16)];
    'outer: while i < b.len() {
        let c = b[i];
        if c == b' ' || c == b'\t' || c == b'-' || c == b'T' {
            i += 1;
            continue;
        }
        let rest = &lower[i..];
        if rest.starts_with("today") {
            date = Some(today);
            i += 5;
            continue;
        }
        if rest.starts_with("tomorrow") {
            date = Some(today + 1);
            i += 8;
            continue;
        }
        for (w, h) in words {
            if rest.starts_with(w) {
                time = Some(h * 3600);
                i += w.len();
                continue 'outer;
            }
        }
        if let Some(r) = rest.strip_prefix("now") {
            let r = r.trim_start();
            let delta = match r.chars().next() {
                None => 0,
                Some(sign @ ('+' | '-')) => {
                    let d = delta(&r[1..]).ok_or_else(bad)?;
                    if sign == '-' { -d } else { d }
                }
                Some(_) => return Err(bad()),
            };
            let t = now.checked_add(delta).ok_or_else(bad)?;
            date = Some(t.div_euclid(86400));
            time = Some(t.rem_euclid(86400));
            break;
        }
        if !c.is_ascii_digit() {
            return Err(bad());
        }
        if b.get(i + 1) == Some(&b':') || b.get(i + 2) == Some(&b':') {
            let (t, used) = clock(&lower[i..]).ok_or_else(bad)?;
            time = Some(t);
            i += used;
            continue;
        }
        let (d, used) = calendar(&lower[i..], today).ok_or_else(bad)?;
        date = Some(d);
        i += used;
    }
    match (date, time) {
        (None, None) => Ok(0),
        (Some(d), t) => Ok(d * 86400 + t.unwrap_or(0)),
        // A time alone is today's (sacct looks into the past, where Slurm takes today's).
        (None, Some(t)) => Ok(today * 86400 + t),
    }
}

/// `count[unit]` after `now+`/`now-`, in seconds.
fn delta(s: &str) -> Option<i64> {
    let s = s.trim();
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 12 {
        return None;
    }
    let n: i64 = s[..digits].parse().ok()?;
    let unit = s[digits..].trim();
    let mult = match unit {
        "" | "second" | "seconds" => 1,
        "minute" | "minutes" => 60,
        "hour" | "hours" => 3600,
        "day" | "days" => 86400,
        "week" | "weeks" => 7 * 86400,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// `HH:MM[:SS][AM|PM]` at the start of `s`: seconds into the day and the bytes used.
fn clock(s: &str) -> Option<(i64, usize)> {
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == ':')).unwrap_or(s.len());
    let parts: Vec<&str> = s[..end].split(':').collect();
    let n = |p: &str, max: i64| p.parse::<i64>().ok().filter(|v| (0..=max).contains(v) && !p.is_empty() && p.len() <= 2);
    let (mut h, m, sec) = match parts.as_slice() {
        [h, m] => (n(h, 23)?, n(m, 59)?, 0),
        [h, m, sec] => (n(h, 23)?, n(m, 59)?, n(sec, 59)?),
        _ => return None,
    };
    let mut used = end;
    let rest = s[end..].trim_start();
    let skipped = s.len() - end - rest.len();
    if let Some(ampm) = rest.get(..2).filter(|x| *x == "am" || *x == "pm") {
        if !(1..=12).contains(&h) {
            return None;
        }
        h = match (ampm, h) {
            ("am", 12) => 0,
            ("pm", 12) => 12,
            ("pm", h) => h + 12,
            (_, h) => h,
        };
        used += skipped + 2;
    }
    Some((h * 3600 + m * 60 + sec, used))
}

/// `YYYY-MM-DD`, `MM/DD[/YY]`, `MM.DD[.YY]` or `MMDD[YY]` at the start of `s`: days since
/// the epoch and the bytes used.
fn calendar(s: &str, today: i64) -> Option<(i64, usize)> {
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '/' || c == '.' || c == '-')).unwrap_or(s.len());
    let word = &s[..end];
    let num = |p: &str| p.parse::<i64>().ok();
    let (y, m, d, used) = if word.len() >= 10 && word.as_bytes()[4] == b'-' && word.as_bytes()[7] == b'-' {
        (Some(num(&word[..4])?), num(&word[5..7])?, num(&word[8..10])?, 10)
    } else if let Some(sep) = [b'/', b'.'].into_iter().find(|c| word.as_bytes().get(2) == Some(c)) {
        let word = word.split('-').next().unwrap_or(word);
        let parts: Vec<&str> = word.split(sep as char).collect();
        match parts.as_slice() {
            [m, d] if m.len() == 2 && d.len() == 2 => (None, num(m)?, num(d)?, word.len()),
            [m, d, y] if m.len() == 2 && d.len() == 2 && y.len() == 2 => (Some(2000 + num(y)?), num(m)?, num(d)?, word.len()),
            _ => return None,
        }
    } else {
        let digits = word.bytes().take_while(u8::is_ascii_digit).count();
        match digits {
            4 => (None, num(&word[..2])?, num(&word[2..4])?, 4),
            6 => (Some(2000 + num(&word[4..6])?), num(&word[..2])?, num(&word[2..4])?, 6),
            _ => return None,
        }
    };
    let day_of = |y: i64| -> Option<i64> {
        let date = jiff::civil::Date::new(i16::try_from(y).ok()?, i8::try_from(m).ok()?, i8::try_from(d).ok()?).ok()?;
        Some(date.since(jiff::civil::date(1970, 1, 1)).ok()?.get_days() as i64)
    };
    let days = match y {
        Some(y) => day_of(y)?,
        None => {
            let now = jiff::tz::Offset::UTC.to_datetime(jiff::Timestamp::from_second(today * 86400).ok()?);
            let year = now.year() as i64;
            day_of(if m > now.month() as i64 { year - 1 } else { year })?
        }
    };
    Some((days, used))
}

/// One column of an `sacct` listing: the field's name as Slurm spells it and its width
/// (negative: left-justified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Slurm's name of the field (`JobName`).
    pub name: &'static str,
    /// Width; negative when left-justified.
    pub width: i32,
}

/// sacct's fields and their default widths, in Slurm's order (a name given matches the first
/// field it is a prefix of, case-insensitively, as Slurm's). Tandem fills those it knows; the
/// others print empty.
pub const SACCT_FIELDS: &[(&str, i32)] = &[
    ("Account", 10),
    ("AdminComment", 15),
    ("AllocCPUS", 10),
    ("AllocNodes", 10),
    ("AllocTRES", 10),
    ("AssocID", 7),
    ("AveCPU", 10),
    ("AveCPUFreq", 10),
    ("AveDiskRead", 14),
    ("AveDiskWrite", 14),
    ("AvePages", 10),
    ("AveRSS", 10),
    ("AveVMSize", 10),
    ("BlockID", 16),
    ("Cluster", 10),
    ("Comment", 14),
    ("Constraints", 19),
    ("ConsumedEnergy", 14),
    ("ConsumedEnergyRaw", 17),
    ("Container", 19),
    ("CPUTime", 10),
    ("CPUTimeRAW", 10),
    ("DBIndex", -21),
    ("DerivedExitCode", 15),
    ("Elapsed", 10),
    ("ElapsedRaw", 10),
    ("Eligible", 19),
    ("End", 19),
    ("ExitCode", 8),
    ("Extra", 14),
    ("FailedNode", 8),
    ("Flags", 19),
    ("GID", 6),
    ("Group", 9),
    ("JobID", -12),
    ("JobIDRaw", -12),
    ("JobName", 10),
    ("Layout", 9),
    ("Licenses", 10),
    ("MaxDiskRead", 12),
    ("MaxDiskReadNode", 15),
    ("MaxDiskReadTask", 15),
    ("MaxDiskWrite", 12),
    ("MaxDiskWriteNode", 16),
    ("MaxDiskWriteTask", 16),
    ("MaxPages", 8),
    ("MaxPagesNode", 12),
    ("MaxPagesTask", 14),
    ("MaxRSS", 10),
    ("MaxRSSNode", 10),
    ("MaxRSSTask", 10),
    ("MaxVMSize", 10),
    ("MaxVMSizeNode", 14),
    ("MaxVMSizeTask", 14),
    ("McsLabel", 12),
    ("MinCPU", 10),
    ("MinCPUNode", 10),
    ("MinCPUTask", 10),
    ("NCPUS", 10),
    ("NNodes", 8),
    ("NodeList", 15),
    ("NTasks", 8),
    ("Partition", 10),
    ("Planned", 10),
    ("PlannedCPU", 10),
    ("PlannedCPURAW", 13),
    ("Priority", 10),
    ("QOS", 10),
    ("QOSRAW", 6),
    ("QOSREQ", 10),
    ("Reason", 22),
    ("ReqCPUFreq", 10),
    ("ReqCPUFreqGov", 13),
    ("ReqCPUFreqMax", 13),
    ("ReqCPUFreqMin", 13),
    ("ReqCPUS", 8),
    ("ReqMem", 10),
    ("ReqNodes", 8),
    ("ReqTRES", 10),
    ("Reservation", 20),
    ("ReservationId", 8),
    ("ReqReservation", 20),
    ("Restarts", 8),
    ("SegmentSize", 11),
    ("Start", 19),
    ("State", 10),
    ("StdErr", 20),
    ("StdIn", 20),
    ("StdOut", 20),
    ("Submit", 19),
    ("SubmitLine", 20),
    ("Suspended", 10),
    ("SystemComment", 15),
    ("SystemCPU", 10),
    ("Timelimit", 10),
    ("TimelimitRaw", 10),
    ("TotalCPU", 10),
    ("UID", 6),
    ("User", 9),
    ("UserCPU", 10),
    ("WCKey", 10),
    ("WCKeyID", 10),
    ("WorkDir", 20),
];

/// `sacct`'s default fields, and those of `-b` and `-l` (Slurm's, less the TRES usage
/// columns Tandem does not gather).
pub const SACCT_DEFAULT: &str = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode";
/// See [`SACCT_DEFAULT`].
pub const SACCT_BRIEF: &str = "JobID,State,ExitCode";
/// See [`SACCT_DEFAULT`].
pub const SACCT_LONG: &str = "JobID,JobIDRaw,JobName,Partition,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,MinCPUNode,MinCPUTask,AveCPU,NTasks,AllocCPUS,Elapsed,State,ExitCode,AveCPUFreq,ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,ReqMem,ConsumedEnergy,MaxDiskRead,MaxDiskReadNode,MaxDiskReadTask,AveDiskRead,MaxDiskWrite,MaxDiskWriteNode,MaxDiskWriteTask,AveDiskWrite,ReqTRES,AllocTRES";

/// Parses sacct's `--format` list (`JobID,JobName%30,state`): each name matches the first
/// field it is a prefix of (case-insensitively), `%N` sets the width, `ALL` is every field.
pub fn parse_sacct_fields(spec: &str) -> Result<Vec<Column>, Invalid> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, width) = match item.split_once('%') {
            Some((n, w)) => {
                let digits: String = w.chars().take_while(char::is_ascii_digit).collect();
                let v: i32 =
                    digits.parse().ok().filter(|v| (1..=1000).contains(v)).ok_or_else(|| {
                        Invalid::new(format!("Invalid field width requested: \"{item}\" (a width from 1 to 1000 after '%')"))
                    })?;
                (n.trim(), Some(v))
            }
            None => (item, None),
        };
        if name.eq_ignore_ascii_case("all") {
            out.extend(SACCT_FIELDS.iter().map(|(n, w)| Column { name: n, width: width.map_or(*w, |v| v * w.signum()) }));
            continue;
        }
        if name.eq_ignore_ascii_case("AllocGRES") {
            return Err(Invalid::new("AllocGRES has been removed, please use AllocTRES"));
        }
        if name.eq_ignore_ascii_case("ReqGRES") {
            return Err(Invalid::new("ReqGRES has been removed, please use ReqTRES"));
        }
        let found = (!name.is_empty())
            .then(|| SACCT_FIELDS.iter().find(|(n, _)| n.len() >= name.len() && n[..name.len()].eq_ignore_ascii_case(name)))
            .flatten();
        let Some((n, w)) = found else {
            return Err(Invalid::new(format!("Invalid field requested: \"{name}\"")));
        };
        // A width keeps the field's side (JobID stays left-justified).
        out.push(Column { name: n, width: width.map_or(*w, |v| v * w.signum()) });
    }
    if out.is_empty() {
        return Err(Invalid::new("No fields requested"));
    }
    Ok(out)
}

/// How sacct separates its columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Fixed widths, a space after each column.
    Columns,
    /// `-p`: each value followed by the delimiter.
    Parsable,
    /// `-P`: values joined by the delimiter.
    Parsable2,
}

/// One sacct line (header or row) as Slurm's `print_fields` writes it: in columns a value
/// longer than its width is cut and ends in `+`, right-justified unless the width is negative,
/// each followed by a space; `-p` ends every value with the delimiter, `-P` only separates them.
pub fn sacct_line(cols: &[Column], values: &[String], layout: Layout, delimiter: &str) -> String {
    let mut s = String::new();
    let n = cols.len().min(values.len());
    for (i, (c, v)) in cols.iter().zip(values).enumerate() {
        match layout {
            Layout::Parsable2 => {
                s.push_str(v);
                if i + 1 < n {
                    s.push_str(delimiter);
                }
            }
            Layout::Parsable => {
                s.push_str(v);
                s.push_str(delimiter);
            }
            Layout::Columns => s.push_str(&cell(v, c.width.unsigned_abs() as usize, c.width >= 0, true, true)),
        }
    }
    s
}

/// The dashes under sacct's header.
pub fn sacct_rule(cols: &[Column]) -> String {
    cols.iter().map(|c| format!("{} ", "-".repeat(c.width.unsigned_abs() as usize))).collect()
}

/// A value padded to `width` (right- or left-justified), cut to it where Slurm cuts (`cut`),
/// with a `+` at the cut when `plus` (sacct's mark), followed by a space when `plus` too.
fn cell(v: &str, width: usize, right: bool, cut: bool, plus: bool) -> String {
    let chars = v.chars().count();
    let v: String = if cut && chars > width {
        if plus && width > 0 { v.chars().take(width - 1).chain(['+']).collect() } else { v.chars().take(width).collect() }
    } else {
        v.to_string()
    };
    let mut s = if right { format!("{v:>width$}") } else { format!("{v:<width$}") };
    if plus {
        s.push(' ');
    }
    s
}

/// One item of a squeue or sinfo format: literal text, or a field with its width and side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// Text printed as is.
    Text(String),
    /// A field.
    Field {
        /// The field's long name (`JobID`, `TimeLeft`, ...), as `--Format` spells it.
        name: &'static str,
        /// Width (0: as wide as the value).
        width: usize,
        /// Right-justified (`%.10M`, `-O TimeUsed:.10`).
        right: bool,
    },
}

/// One field of a `%` format: its letter, its long name and its header.
pub type FieldDef = (char, &'static str, &'static str);

/// squeue's fields Tandem fills: `%` letter (`\0`: `--Format` only), long name, header.
pub const SQUEUE_FIELDS: &[FieldDef] = &[
    ('a', "Account", "ACCOUNT"),
    ('A', "JobID", "JOBID"),
    ('b', "tres-per-node", "TRES_PER_NODE"),
    ('B', "BatchHost", "EXEC_HOST"),
    ('c', "MinCPUs", "MIN_CPUS"),
    ('C', "NumCPUs", "CPUS"),
    ('D', "NumNodes", "NODES"),
    ('e', "EndTime", "END_TIME"),
    ('E', "Dependency", "DEPENDENCY"),
    ('f', "Feature", "FEATURES"),
    ('F', "ArrayJobID", "ARRAY_JOB_ID"),
    ('g', "GroupName", "GROUP"),
    ('G', "GroupID", "GROUP"),
    ('i', "JobArrayID", "JOBID"),
    ('j', "Name", "NAME"),
    ('K', "ArrayTaskID", "ARRAY_TASK_ID"),
    ('l', "TimeLimit", "TIME_LIMIT"),
    ('L', "TimeLeft", "TIME_LEFT"),
    ('m', "MinMemory", "MIN_MEMORY"),
    ('M', "TimeUsed", "TIME"),
    ('n', "ReqNodes", "REQ_NODES"),
    ('N', "NodeList", "NODELIST"),
    ('o', "Command", "COMMAND"),
    ('p', "Priority", "PRIORITY"),
    ('P', "Partition", "PARTITION"),
    ('q', "QOS", "QOS"),
    ('Q', "PriorityLong", "PRIORITY"),
    ('r', "Reason", "REASON"),
    ('R', "ReasonList", "NODELIST(REASON)"),
    ('S', "StartTime", "START_TIME"),
    ('t', "StateCompact", "ST"),
    ('T', "State", "STATE"),
    ('u', "UserName", "USER"),
    ('U', "UserID", "UID"),
    ('v', "Reservation", "RESERVATION"),
    ('V', "SubmitTime", "SUBMIT_TIME"),
    ('x', "ExcNodes", "EXC_NODES"),
    ('y', "Nice", "NICE"),
    ('Y', "SchedNodes", "SCHEDNODES"),
    ('Z', "WorkDir", "WORK_DIR"),
    ('\0', "NumTasks", "TASKS"),
    ('\0', "CPUsPerTask", "CPUS_PER_TASK"),
    ('\0', "STDOUT", "STDOUT"),
    ('\0', "STDERR", "STDERR"),
    ('\0', "ExitCode", "EXIT_CODE"),
    ('\0', "RestartCnt", "RESTART_COUNT"),
    ('\0', "Cluster", "CLUSTER"),
];

/// sinfo's fields Tandem fills (see [`SQUEUE_FIELDS`]).
pub const SINFO_FIELDS: &[FieldDef] = &[
    ('a', "Available", "AVAIL"),
    ('A', "NodeAI", "NODES(A/I)"),
    ('c', "CPUs", "CPUS"),
    ('C', "CPUsState", "CPUS(A/I/O/T)"),
    ('D', "Nodes", "NODES"),
    ('e', "FreeMem", "FREE_MEM"),
    ('f', "Features", "AVAIL_FEATURES"),
    ('F', "NodeAIOT", "NODES(A/I/O/T)"),
    ('G', "Gres", "GRES"),
    ('l', "Time", "TIMELIMIT"),
    ('L', "DefaultTime", "DEFAULTTIME"),
    ('m', "Memory", "MEMORY"),
    ('n', "NodeHost", "HOSTNAMES"),
    ('N', "NodeList", "NODELIST"),
    ('o', "NodeAddr", "NODE_ADDR"),
    ('O', "CPUsLoad", "CPU_LOAD"),
    ('p', "PriorityTier", "PRIO_TIER"),
    ('P', "Partition", "PARTITION"),
    ('R', "PartitionName", "PARTITION"),
    ('E', "Reason", "REASON"),
    ('t', "StateCompact", "STATE"),
    ('T', "StateLong", "STATE"),
    ('\0', "StateComplete", "STATECOMPLETE"),
    ('s', "Size", "JOB_SIZE"),
    ('r', "Root", "ROOT"),
    ('h', "OverSubscribe", "OVERSUBSCRIBE"),
    ('g', "Groups", "GROUPS"),
    ('z', "SocketCoreThread", "S:C:T"),
    ('d', "Disk", "TMP_DISK"),
    ('w', "Weight", "WEIGHT"),
    ('V', "Cluster", "CLUSTER"),
    ('i', "Reservation", "RESERVATION"),
];

/// The long name of a `%` letter in `table`.
pub fn field_of(table: &[FieldDef], code: char) -> Option<&'static str> {
    table.iter().find(|(c, _, _)| *c == code && code != '\0').map(|(_, n, _)| *n)
}

/// The header of a field by its long name.
pub fn header_of(table: &[FieldDef], name: &str) -> &'static str {
    table.iter().find(|(_, n, _)| *n == name).map_or("?", |(_, _, h)| *h)
}

/// Parses a `%` format (`squeue -o`, `sinfo -o`): `%[.][width]letter` items and the text
/// between them (`%%` is not special, as in Slurm's). `what` names the command's kind of
/// format in the error (`job`, `node`).
pub fn parse_percent(fmt: &str, table: &[FieldDef], what: &str) -> Result<Vec<Item>, Invalid> {
    if fmt.is_empty() {
        return Err(Invalid::new("Format option lacks specification."));
    }
    let mut out = Vec::new();
    let mut chars = fmt.chars().peekable();
    let mut text = String::new();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        if !text.is_empty() {
            out.push(Item::Text(std::mem::take(&mut text)));
        }
        let right = chars.next_if_eq(&'.').is_some();
        let mut width: usize = 0;
        while let Some(d) = chars.next_if(char::is_ascii_digit) {
            width = width.saturating_mul(10).saturating_add(d as usize - '0' as usize).min(10_000);
        }
        let code = chars.next().ok_or_else(|| Invalid::new(format!("Invalid {what} format specification: the format ends in '%'")))?;
        let name = field_of(table, code).ok_or_else(|| Invalid::new(format!("Invalid {what} format specification: {code}")))?;
        out.push(Item::Field { name, width, right });
    }
    if !text.is_empty() {
        out.push(Item::Text(text));
    }
    Ok(out)
}

/// Parses a long format (`squeue -O`, `sinfo -O`): `name[:[.]width][suffix]`, comma
/// separated; without a width a field is 20 wide, left-justified; a field ends with a space
/// unless a suffix is given (Slurm's).
pub fn parse_long(fmt: &str, table: &[FieldDef], what: &str) -> Result<Vec<Item>, Invalid> {
    let mut out = Vec::new();
    for tok in fmt.split(',').filter(|t| !t.is_empty()) {
        let (name, spec) = match tok.split_once(':') {
            Some((n, s)) => (n, Some(s)),
            None => (tok, None),
        };
        let found = table.iter().find(|(_, n, _)| n.eq_ignore_ascii_case(name));
        let Some((_, long, _)) = found else {
            return Err(Invalid::new(format!("Invalid {what} format specification: {name}")));
        };
        let (width, right, suffix) = match spec {
            // Slurm's default: 20 wide, nothing between fields (`JOBID` then 15 spaces).
            None => (20, false, String::new()),
            Some(s) => {
                let right = s.starts_with('.');
                let s = s.strip_prefix('.').unwrap_or(s);
                let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
                let width = if digits.is_empty() { 0 } else { digits.parse::<usize>().unwrap_or(10_000).min(10_000) };
                let suffix = &s[digits.len()..];
                (width, right, suffix.to_string())
            }
        };
        out.push(Item::Field { name: long, width, right });
        if !suffix.is_empty() {
            out.push(Item::Text(suffix));
        }
    }
    if out.is_empty() {
        return Err(Invalid::new("Format long option lacks specification"));
    }
    Ok(out)
}

/// Renders one line of a parsed `%` or long format: `value(name, cut)` gives each field's
/// text; a field with a width is padded to it, and cut to it where Slurm's squeue cuts (left
/// justified always; right-justified unless `cut` says the field is never cut: times and
/// node lists). Trailing spaces are kept off the line.
pub fn render(items: &[Item], value: impl Fn(&str) -> String, never_cut: &[&str]) -> String {
    let mut s = String::new();
    for it in items {
        match it {
            Item::Text(t) => s.push_str(t),
            Item::Field { name, width, right } => {
                let v = value(name);
                if *width == 0 {
                    s.push_str(&v);
                } else {
                    let cut = !*right || !never_cut.contains(name);
                    s.push_str(&cell(&v, *width, *right, cut, false));
                }
            }
        }
    }
    s.trim_end().to_string()
}

/// The long names of the fields an item list uses.
pub fn fields_used(items: &[Item]) -> Vec<&'static str> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Field { name, .. } => Some(*name),
            Item::Text(_) => None,
        })
        .collect()
}

/// Parses squeue's `--sort` (`-t,e,S` or `P,-p`): the letters, each with whether it sorts
/// descending.
pub fn parse_sort(s: &str, table: &[FieldDef]) -> Result<Vec<(&'static str, bool)>, Invalid> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let (desc, code) = match item.strip_prefix('-') {
            Some(c) => (true, c),
            None => (false, item.strip_prefix('+').unwrap_or(item)),
        };
        let mut cs = code.chars();
        let (Some(c), None) = (cs.next(), cs.next()) else {
            return Err(Invalid::new(format!("Invalid sort specification: {item}")));
        };
        let name = field_of(table, c).ok_or_else(|| Invalid::new(format!("Invalid sort specification: {c}")))?;
        out.push((name, desc));
    }
    Ok(out)
}

/// Slurm's job states, by long name and compact code.
pub const JOB_STATES: &[(&str, &str)] = &[
    ("BOOT_FAIL", "BF"),
    ("CANCELLED", "CA"),
    ("COMPLETED", "CD"),
    ("CONFIGURING", "CF"),
    ("COMPLETING", "CG"),
    ("DEADLINE", "DL"),
    ("FAILED", "F"),
    ("NODE_FAIL", "NF"),
    ("OUT_OF_MEMORY", "OOM"),
    ("PENDING", "PD"),
    ("PREEMPTED", "PR"),
    ("RUNNING", "R"),
    ("REQUEUED", "RQ"),
    ("RESIZING", "RS"),
    ("REVOKED", "RV"),
    ("SUSPENDED", "S"),
    ("TIMEOUT", "TO"),
];

/// The compact code of a state (`PD` for `PENDING`).
pub fn state_code(state: &str) -> &'static str {
    JOB_STATES.iter().find(|(l, _)| *l == state).map_or("??", |(_, c)| *c)
}

/// Parses a state list (`squeue -t`, `sacct -s`, `scancel -t`): long names or compact codes
/// in any case, comma separated; `all` is every state. Returns the long names.
pub fn parse_states(s: &str) -> Result<Vec<&'static str>, Invalid> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        if item.eq_ignore_ascii_case("all") {
            out.extend(JOB_STATES.iter().map(|(l, _)| *l));
            continue;
        }
        let found = JOB_STATES.iter().find(|(l, c)| l.eq_ignore_ascii_case(item) || c.eq_ignore_ascii_case(item));
        match found {
            Some((l, _)) => out.push(*l),
            None => return Err(Invalid::new(format!("Invalid job state specified: {item}"))),
        }
    }
    if out.is_empty() {
        return Err(Invalid::new(format!("Invalid job state specified: {s:?}")));
    }
    Ok(out)
}

/// Array task indices in Slurm's range syntax (`3-5,7`), ascending.
pub fn index_ranges(indices: &[u32]) -> String {
    let mut v = indices.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        let mut end = start;
        while i + 1 < v.len() && v[i + 1] == end + 1 {
            i += 1;
            end = v[i];
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    parts.join(",")
}

/// The id squeue shows for pending tasks of array `array_job` collapsed into one line, as
/// Slurm's: `32_[3-5]`, `32_[3-5%2]` with a limit of tasks running at once, `32_4` for one.
pub fn array_id(array_job: u64, indices: &[u32], max_running: Option<u32>) -> String {
    let r = index_ranges(indices);
    match (indices.len(), max_running) {
        (1, None) => format!("{array_job}_{r}"),
        (_, Some(m)) => format!("{array_job}_[{r}%{m}]"),
        _ => format!("{array_job}_[{r}]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(hms(Some(11)), "00:00:11");
        assert_eq!(hms(Some(300)), "00:05:00");
        assert_eq!(hms(Some(86400 + 3723)), "1-01:02:03");
        assert_eq!(hms(None), "UNLIMITED");
        assert_eq!(hms(Some(-1)), "INVALID");
        assert_eq!(hms(Some(i64::MAX)).split('-').count(), 2, "no overflow");
        assert_eq!(squeue_secs(0), "0:00");
        assert_eq!(squeue_secs(90), "1:30");
        assert_eq!(squeue_secs(3 * 3600 + 5), "3:00:05");
        assert_eq!(squeue_secs(2 * 86400 + 61), "2-00:01:01");
        assert_eq!(squeue_secs(-5), "INVALID");
        assert_eq!(squeue_secs(YEAR_SECONDS + 1), "INVALID");
        assert_eq!(squeue_secs(i64::MIN), "INVALID");
    }

    #[test]
    fn sizes() {
        assert_eq!(size(4096.0, Unit::M, None), "4G");
        assert_eq!(size(1000.0, Unit::M, None), "1000M");
        assert_eq!(size(2560.0, Unit::M, None), "2.50G");
        assert_eq!(size(0.0, Unit::M, None), "0");
        assert_eq!(size(4096.0, Unit::M, Some(Unit::K)), "4194304K");
        assert_eq!(size(1536.0, Unit::M, Some(Unit::G)), "1.50G");
        assert!(!size(f64::MAX, Unit::M, None).is_empty() && !size(f64::NAN, Unit::M, Some(Unit::P)).is_empty(), "no panic");
        assert_eq!(parse_unit("g").unwrap(), Unit::G);
        for bad in ["", "X", "GB", "1", "ü"] {
            assert!(parse_unit(bad).unwrap_err().0.contains("Invalid unit"), "{bad:?}");
        }
    }

    #[test]
    fn when() {
        let now = 1_796_083_200 + 10 * 3600; // 2026-12-01T10:00:00
        let midnight = 1_796_083_200;
        assert_eq!(parse_when("now", now).unwrap(), now);
        assert_eq!(parse_when("now-1hour", now).unwrap(), now - 3600);
        assert_eq!(parse_when("now-2days", now).unwrap(), now - 2 * 86400);
        assert_eq!(parse_when("now+30", now).unwrap(), now + 30);
        assert_eq!(parse_when("now-1week", now).unwrap(), now - 7 * 86400);
        assert_eq!(parse_when("2026-12-01", now).unwrap(), midnight);
        assert_eq!(parse_when("2026-12-01T08:30", now).unwrap(), midnight + 8 * 3600 + 1800);
        assert_eq!(parse_when("2026-12-01T08:30:15", now).unwrap(), midnight + 8 * 3600 + 1815);
        assert_eq!(parse_when("1201", now).unwrap(), midnight);
        assert_eq!(parse_when("1130", now).unwrap(), midnight - 86400);
        assert_eq!(parse_when("1225", now).unwrap(), midnight + 86400 * 24, "this month: this year's");
        assert_eq!(parse_when("0101", now).unwrap(), 1_767_225_600, "2026-01-01");
        assert_eq!(parse_when("12/01/26", now).unwrap(), midnight);
        assert_eq!(parse_when("12.01", now).unwrap(), midnight);
        assert_eq!(parse_when("120126", now).unwrap(), midnight);
        assert_eq!(parse_when("08:00", now).unwrap(), midnight + 8 * 3600);
        assert_eq!(parse_when("11:00", now).unwrap(), midnight + 11 * 3600, "today's, as Slurm's");
        assert_eq!(parse_when("8:00pm", now).unwrap(), midnight + 20 * 3600);
        assert_eq!(parse_when("12/01-08:00", now).unwrap(), midnight + 8 * 3600);
        assert_eq!(parse_when("12:00am", now).unwrap(), midnight);
        assert_eq!(parse_when("midnight", now).unwrap(), midnight);
        assert_eq!(parse_when("today", now).unwrap(), midnight);
        assert_eq!(parse_when("noon", now).unwrap(), midnight + 12 * 3600);
        assert_eq!(parse_when("uts1700000000", now).unwrap(), 1_700_000_000);
        for bad in [
            "yesterday",
            "now-",
            "now-5parsecs",
            "now-1h",
            "now*2",
            "2026-13-01",
            "2026-02-30",
            "25:00",
            "12:60",
            "1-2",
            "13/45",
            "0230",
            "12345",
            "uts12",
            "utsx",
            "now-99999999999999999weeks",
            "\u{0}",
            "ÿ",
            &"9".repeat(100),
        ] {
            assert!(parse_when(bad, now).unwrap_err().0.starts_with("Invalid time specification"), "{bad:?}");
        }
    }

    #[test]
    fn sacct_fields() {
        let c = parse_sacct_fields("JobID,JobName%20,state,elapsed,jobn").unwrap();
        assert_eq!(c[0], Column { name: "JobID", width: -12 });
        assert_eq!(c[1], Column { name: "JobName", width: 20 });
        assert_eq!(c[2].name, "State");
        assert_eq!(c[3], Column { name: "Elapsed", width: 10 }, "the first field the name begins");
        assert_eq!(c[4].name, "JobName");
        assert_eq!(parse_sacct_fields("jobid%5").unwrap()[0].width, -5, "JobID stays left-justified");
        assert_eq!(parse_sacct_fields("ALL").unwrap().len(), SACCT_FIELDS.len());
        assert_eq!(parse_sacct_fields(SACCT_LONG).unwrap().len(), 41);
        assert!(parse_sacct_fields("Nope").unwrap_err().0.contains("Invalid field requested: \"Nope\""));
        assert!(parse_sacct_fields("AllocGRES").unwrap_err().0.contains("AllocTRES"));
        for bad in ["JobName%", "JobName%x", "JobName%0", "JobName%99999999999", "%5", "", ","] {
            assert!(parse_sacct_fields(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sacct_lines() {
        let c = parse_sacct_fields("JobID,JobName,State").unwrap();
        let v: Vec<String> = vec!["12".into(), "a-very-long-name".into(), "COMPLETED".into()];
        assert_eq!(sacct_line(&c, &v, Layout::Columns, "|"), "12           a-very-lo+  COMPLETED ");
        assert_eq!(sacct_line(&c, &v, Layout::Parsable, "|"), "12|a-very-long-name|COMPLETED|");
        assert_eq!(sacct_line(&c, &v, Layout::Parsable2, ","), "12,a-very-long-name,COMPLETED");
        assert_eq!(sacct_rule(&c), "------------ ---------- ---------- ");
        let narrow = parse_sacct_fields("JobName%1").unwrap();
        assert_eq!(sacct_line(&narrow, &["ab".into()], Layout::Columns, "|"), "+ ");
        assert_eq!(sacct_line(&c, &["é".repeat(20), "x".into(), "y".into()], Layout::Columns, "|").chars().count(), 35);
    }

    #[test]
    fn percent_formats() {
        let items = parse_percent("%.6i %j|%t %10P", SQUEUE_FIELDS, "job").unwrap();
        let line = render(
            &items,
            |n| match n {
                "JobArrayID" => "42".into(),
                "Name" => "train".into(),
                "Partition" => "a-long-partition".into(),
                _ => "R".into(),
            },
            &["TimeUsed"],
        );
        assert_eq!(line, "    42 train|R a-long-par");
        let items = parse_percent("%.3M", SQUEUE_FIELDS, "job").unwrap();
        assert_eq!(render(&items, |_| "10:00".into(), &["TimeUsed"]), "10:00", "times are never cut right-justified");
        assert_eq!(render(&items, |_| "10:00".into(), &[]), "10:");
        assert!(parse_percent("%", SQUEUE_FIELDS, "job").unwrap_err().0.contains("ends in '%'"));
        assert_eq!(parse_percent("%!", SQUEUE_FIELDS, "job").unwrap_err().0, "Invalid job format specification: !");
        assert!(parse_percent("", SQUEUE_FIELDS, "job").is_err());
        assert!(parse_percent(&format!("%{}i", "9".repeat(40)), SQUEUE_FIELDS, "job").is_ok(), "a huge width is bounded");
        for c in ['L', 'p', 'e', 'm', 'c', 'E', 'F', 'K', 'o', 'M', 'l', 'R'] {
            assert!(field_of(SQUEUE_FIELDS, c).is_some(), "%{c}");
        }
        assert_eq!(parse_percent("%P %N", SINFO_FIELDS, "node").unwrap().len(), 3);
        // sinfo's own defaults, -l and -N -l included, parse.
        for f in ["%9P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N", "%N %.6D %.9P %.11T %.4c %.8z %.6m %.8d %.6w %.8f %20E"] {
            assert!(parse_percent(f, SINFO_FIELDS, "node").is_ok(), "{f}");
        }
    }

    #[test]
    fn long_formats() {
        let items = parse_long("JobID,name:.8,TimeLeft:6|", SQUEUE_FIELDS, "job").unwrap();
        assert_eq!(
            items,
            vec![
                Item::Field { name: "JobID", width: 20, right: false },
                Item::Field { name: "Name", width: 8, right: true },
                Item::Field { name: "TimeLeft", width: 6, right: false },
                Item::Text("|".into()),
            ]
        );
        assert_eq!(parse_long("Bogus", SQUEUE_FIELDS, "job").unwrap_err().0, "Invalid job format specification: Bogus");
        assert!(parse_long("", SQUEUE_FIELDS, "job").is_err());
        assert!(parse_long("name:.99999999999999999999", SQUEUE_FIELDS, "job").is_ok());
    }

    #[test]
    fn sorting_and_states() {
        assert_eq!(
            parse_sort("P,-t,+i", SQUEUE_FIELDS).unwrap(),
            vec![("Partition", false), ("StateCompact", true), ("JobArrayID", false)]
        );
        for bad in ["X", "ab", "-", "P,,%"] {
            assert!(parse_sort(bad, SQUEUE_FIELDS).unwrap_err().0.contains("Invalid sort specification"), "{bad:?}");
        }
        assert_eq!(parse_states("pd,R,completed").unwrap(), vec!["PENDING", "RUNNING", "COMPLETED"]);
        assert_eq!(parse_states("all").unwrap().len(), JOB_STATES.len());
        assert_eq!(parse_states("nope").unwrap_err().0, "Invalid job state specified: nope");
        assert!(parse_states(",").is_err());
        assert_eq!(state_code("OUT_OF_MEMORY"), "OOM");
        assert_eq!(state_code("?"), "??");
    }

    #[test]
    fn arrays() {
        assert_eq!(index_ranges(&[5, 3, 4, 7, 9, 10]), "3-5,7,9-10");
        assert_eq!(index_ranges(&[]), "");
        assert_eq!(array_id(32, &[3, 4, 5], None), "32_[3-5]");
        assert_eq!(array_id(32, &[3, 4, 5], Some(2)), "32_[3-5%2]");
        assert_eq!(array_id(32, &[4], None), "32_4");
        assert_eq!(index_ranges(&[u32::MAX, u32::MAX - 1]), format!("{}-{}", u32::MAX - 1, u32::MAX));
    }
}
