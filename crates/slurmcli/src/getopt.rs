//! The one command-line parser of every Slurm command: glibc's `getopt_long`, driven by a table
//! of options per command ([`Command`]).
//!
//! As glibc's: short options bundle (`-hu alice`, `-nXP`, `-lN1`), a short option's value is
//! attached or the next word (`-j1`, `-j 1`), a long option's value follows `=` or is the next
//! word (`--jobs=1`, `--jobs 1`), an optional value only ever follows `=` (or is attached to its
//! letter), a long option may be shortened to any unambiguous prefix (`--noh`; an exact name
//! always wins; spellings of one option, such as `--cpu_bind` beside `--cpu-bind`, are never
//! ambiguous with each other), `--` ends the options, a lone `-` is a word, and a value may start
//! with `-` (`-j -5` gives `-j` the value `-5`). Words that are not options are collected
//! ([`Order::Permute`], glibc's default) or end the options ([`Order::RequireOrder`], glibc's
//! `+` or `POSIXLY_CORRECT`: `sbatch`, `srun` and `salloc` stop at the script or command).
//! Errors are glibc's messages, without the program name ([`Usage`]).

use crate::Invalid;

/// Whether an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    /// A flag.
    None,
    /// A value, attached or the next word.
    Required,
    /// A value only when attached (`--opt=value`, `-ovalue`).
    Optional,
}

/// Where the options end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Options and words mix; the words are collected in order (glibc's default).
    Permute,
    /// The first word that is not an option ends the options (glibc's `+`, `POSIXLY_CORRECT`).
    RequireOrder,
}

/// What a command does with an option of Slurm's that it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// The command reads it ([`Parsed::opts`]).
    Read,
    /// Accepted and set aside ([`Parsed::ignored`]), for the reason given (what it would do in
    /// Slurm, and why it changes nothing here): `--help` and the README say so.
    Ignored(&'static str),
    /// Refused with these words (what a one-cluster site without the feature answers).
    Refused(&'static str),
}

/// One option of a command: its long name, its letter, whether it takes a value, and the key a
/// command knows it by (the long name, or for a second spelling the first one's).
#[derive(Debug, PartialEq, Eq)]
pub struct Opt {
    /// The long name without `--` (empty: a letter alone).
    pub long: &'static str,
    /// The letter, if any.
    pub short: Option<char>,
    /// Whether it takes a value.
    pub arg: Arg,
    /// What the command matches on: the option's own name for every spelling of it.
    pub key: &'static str,
    /// Whether the command reads it, sets it aside, or refuses it.
    pub effect: Effect,
}

impl Opt {
    /// `--long` and `-c`.
    pub const fn both(c: char, long: &'static str, arg: Arg) -> Opt {
        Opt { long, short: Some(c), arg, key: long, effect: Effect::Read }
    }

    /// `--long` alone.
    pub const fn long(long: &'static str, arg: Arg) -> Opt {
        Opt { long, short: None, arg, key: long, effect: Effect::Read }
    }

    /// `-c` alone; `key` names it.
    pub const fn short(c: char, key: &'static str, arg: Arg) -> Opt {
        Opt { long: "", short: Some(c), arg, key, effect: Effect::Read }
    }

    /// A second spelling, `--long`, of the option whose key is `key`.
    pub const fn alias(long: &'static str, key: &'static str, arg: Arg) -> Opt {
        Opt { long, short: None, arg, key, effect: Effect::Read }
    }

    /// This option, accepted and set aside: `why` says what it does in Slurm and why it
    /// changes nothing here.
    pub const fn ignored(self, why: &'static str) -> Opt {
        Opt { effect: Effect::Ignored(why), ..self }
    }

    /// This option, refused with `words`.
    pub const fn refused(self, words: &'static str) -> Opt {
        Opt { effect: Effect::Refused(words), ..self }
    }

    /// How a person would name it: `--long` (`-c` for a letter alone).
    pub fn name(&self) -> String {
        match (self.long, self.short) {
            ("", Some(c)) => format!("-{c}"),
            (l, _) => format!("--{l}"),
        }
    }
}

/// A command's options: its name (for messages), its table (in parts, so that commands may
/// share one) and where its options end.
#[derive(Debug)]
pub struct Command {
    /// `squeue`, `sbatch`, ...
    pub name: &'static str,
    /// Its options, in parts; the first part that has a name or letter wins.
    pub opts: &'static [&'static [Opt]],
    /// Where its options end.
    pub order: Order,
    /// Whether `_` in a long name reads as `-` (srun's `--cpu_bind`, `--ntasks_per_node`).
    pub underscores: bool,
}

impl Command {
    /// Every option of the command.
    pub fn options(&self) -> impl Iterator<Item = &'static Opt> + use<> {
        self.opts.iter().flat_map(|part| part.iter())
    }

    /// The option named `long` exactly.
    pub fn find_long(&self, long: &str) -> Option<&'static Opt> {
        self.options().find(|o| !o.long.is_empty() && o.long == long)
    }

    /// The option with letter `c`.
    pub fn find_short(&self, c: char) -> Option<&'static Opt> {
        self.options().find(|o| o.short == Some(c))
    }

    /// The option with key `key` (its first spelling).
    pub fn find_key(&self, key: &str) -> Option<&'static Opt> {
        self.options().find(|o| o.key == key)
    }
}

/// An option given on a command line, with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    /// The option (its first spelling's key is [`Given::key`]).
    pub opt: &'static Opt,
    /// Its value, if it took one.
    pub value: Option<String>,
}

impl Given {
    /// The key the command matches on.
    pub fn key(&self) -> &'static str {
        self.opt.key
    }

    /// Its value, or empty when none was given.
    pub fn value(&self) -> &str {
        self.value.as_deref().unwrap_or("")
    }
}

/// A command line read against a table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The options, in the order given.
    pub opts: Vec<Given>,
    /// The other words, in order (with [`Order::RequireOrder`], everything from the first).
    pub args: Vec<String>,
    /// The options accepted and set aside ([`Effect::Ignored`]), in order.
    pub ignored: Vec<Given>,
}

impl Parsed {
    /// Files `g` where its option's effect says: read, set aside, or refused.
    fn take(&mut self, g: Given) -> Result<(), Usage> {
        match g.opt.effect {
            Effect::Read => self.opts.push(g),
            Effect::Ignored(_) => self.ignored.push(g),
            Effect::Refused(words) => return Err(Usage(words.to_string())),
        }
        Ok(())
    }
}

/// A command line that getopt refuses: glibc's message (`unrecognized option '--x'`), without
/// the program's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

impl From<Usage> for Invalid {
    fn from(u: Usage) -> Invalid {
        Invalid(u.0)
    }
}

/// Reads `argv` (without the program's name) as glibc's `getopt_long` would with `cmd`'s table.
pub fn getopt(cmd: &Command, argv: &[String]) -> Result<Parsed, Usage> {
    getopt_in(cmd, argv, cmd.order)
}

/// [`getopt`] with the order given (`POSIXLY_CORRECT` makes every command stop at its first
/// word, as glibc's).
pub fn getopt_in(cmd: &Command, argv: &[String], order: Order) -> Result<Parsed, Usage> {
    let mut out = Parsed::default();
    let mut i = 0;
    while i < argv.len() {
        let a = &argv[i];
        i += 1;
        if a == "--" {
            out.args.extend(argv[i..].iter().cloned());
            break;
        }
        if let Some(rest) = a.strip_prefix("--") {
            let (name, attached) = match rest.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (rest, None),
            };
            let spelled = if cmd.underscores { name.replace('_', "-") } else { name.to_string() };
            let opt = long_match(cmd, &spelled, rest)?;
            let value = match (opt.arg, attached) {
                (Arg::None, Some(_)) => return Err(Usage(format!("option '--{}' doesn't allow an argument", opt.long))),
                (Arg::None | Arg::Optional, None) => None,
                (_, Some(v)) => Some(v),
                (Arg::Required, None) => {
                    let v = argv.get(i).cloned().ok_or_else(|| Usage(format!("option '--{}' requires an argument", opt.long)))?;
                    i += 1;
                    Some(v)
                }
            };
            out.take(Given { opt, value })?;
        } else if a.len() > 1 && a.starts_with('-') {
            let cluster = &a[1..];
            for (at, c) in cluster.char_indices() {
                let opt = cmd.find_short(c).ok_or_else(|| Usage(format!("invalid option -- '{}'", shown(c))))?;
                let rest = &cluster[at + c.len_utf8()..];
                match opt.arg {
                    Arg::None => out.take(Given { opt, value: None })?,
                    Arg::Optional => {
                        out.take(Given { opt, value: (!rest.is_empty()).then(|| rest.to_string()) })?;
                        break;
                    }
                    Arg::Required => {
                        let value = if !rest.is_empty() {
                            rest.to_string()
                        } else {
                            let v = argv.get(i).cloned().ok_or_else(|| Usage(format!("option requires an argument -- '{c}'")))?;
                            i += 1;
                            v
                        };
                        out.take(Given { opt, value: Some(value) })?;
                        break;
                    }
                }
            }
        } else {
            match order {
                Order::Permute => out.args.push(a.clone()),
                Order::RequireOrder => {
                    out.args.extend(argv[i - 1..].iter().cloned());
                    break;
                }
            }
        }
    }
    Ok(out)
}

/// A letter as glibc names it in a message (a control character made visible).
fn shown(c: char) -> String {
    if c.is_control() { c.escape_default().to_string() } else { c.to_string() }
}

/// The long option `name` names: exactly, or as the one option it is a prefix of; `word` is
/// what was typed after `--` (for the message).
fn long_match(cmd: &Command, name: &str, word: &str) -> Result<&'static Opt, Usage> {
    if let Some(o) = cmd.find_long(name) {
        return Ok(o);
    }
    let unrecognized = || Usage(format!("unrecognized option '--{}'", word.escape_debug()));
    if name.is_empty() {
        return Err(unrecognized());
    }
    let mut found: Option<&'static Opt> = None;
    let mut ambiguous: Vec<&'static Opt> = Vec::new();
    for o in cmd.options().filter(|o| !o.long.is_empty() && o.long.starts_with(name)) {
        match found {
            None => found = Some(o),
            // Another spelling of the same option is no ambiguity, as in glibc.
            Some(f) if f.key == o.key && f.arg == o.arg => {}
            Some(f) => {
                if ambiguous.is_empty() {
                    ambiguous.push(f);
                }
                ambiguous.push(o);
            }
        }
    }
    if !ambiguous.is_empty() {
        let list: Vec<String> = ambiguous.iter().map(|o| format!("'--{}'", o.long)).collect();
        return Err(Usage(format!("option '--{}' is ambiguous; possibilities: {}", name.escape_debug(), list.join(" "))));
    }
    found.ok_or_else(unrecognized)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &[Opt] = &[
        Opt::both('h', "noheader", Arg::None),
        Opt::both('u', "user", Arg::Required),
        Opt::alias("users", "user", Arg::Required),
        Opt::both('j', "jobs", Arg::Required),
        Opt::both('n', "name", Arg::Required),
        Opt::both('X', "allocations", Arg::None),
        Opt::both('P', "parsable2", Arg::None),
        Opt::both('p', "parsable", Arg::None),
        Opt::long("mem-per-cpu", Arg::Required),
        Opt::long("mem-per-gpu", Arg::Required),
        Opt::long("mem", Arg::Required),
        Opt::long("cpu-bind", Arg::Required),
        Opt::alias("cpu_bind", "cpu-bind", Arg::Required),
        Opt::both('K', "kill-on-bad-exit", Arg::Optional),
        Opt::long("exclusive", Arg::Optional),
        Opt::short('l', "label", Arg::None),
        Opt::both('N', "nodes", Arg::Required),
        Opt::long("profile", Arg::Required).ignored("no profiling plugin"),
        Opt::both('k', "no-kill", Arg::Optional).ignored("nodes never fail a job here without requeue"),
        Opt::long("bb", Arg::Required).refused("burst buffers are not available on this cluster"),
    ];
    const CMD: Command = Command { name: "test", opts: &[T], order: Order::Permute, underscores: false };
    const RUN: Command = Command { name: "run", opts: &[T], order: Order::RequireOrder, underscores: true };

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    /// The options as `key=value` words and the other words, for a compact comparison.
    fn read(cmd: &Command, line: &str) -> Result<(Vec<String>, Vec<String>), String> {
        let p = getopt(cmd, &argv(line)).map_err(|e| e.0)?;
        let o = p.opts.iter().map(|g| g.value.as_ref().map_or_else(|| g.key().to_string(), |v| format!("{}={v}", g.key()))).collect();
        Ok((o, p.args))
    }

    fn ok(cmd: &Command, line: &str, opts: &[&str], args: &[&str]) {
        assert_eq!(
            read(cmd, line),
            Ok((opts.iter().map(|s| s.to_string()).collect(), args.iter().map(|s| s.to_string()).collect())),
            "{line}"
        );
    }

    fn err(cmd: &Command, line: &str, msg: &str) {
        assert_eq!(read(cmd, line), Err(msg.to_string()), "{line}");
    }

    #[test]
    fn bundled_letters_and_their_values() {
        ok(&CMD, "-hu alice", &["noheader", "user=alice"], &[]);
        ok(&CMD, "-nXP", &["name=XP"], &[]); // -n takes the rest of the word
        ok(&CMD, "-XPj1", &["allocations", "parsable2", "jobs=1"], &[]);
        ok(&CMD, "-j1 -j 2", &["jobs=1", "jobs=2"], &[]);
        ok(&CMD, "-lN1 hostname", &["label", "nodes=1"], &["hostname"]);
        ok(&CMD, "-XhPj 7", &["allocations", "noheader", "parsable2", "jobs=7"], &[]);
        err(&CMD, "-hz", "invalid option -- 'z'");
        err(&CMD, "-hj", "option requires an argument -- 'j'");
    }

    #[test]
    fn long_names_values_and_prefixes() {
        ok(&CMD, "--user=bob --user bob --users=carol", &["user=bob", "user=bob", "user=carol"], &[]);
        ok(&CMD, "--noh --alloc", &["noheader", "allocations"], &[]);
        // An exact name wins over the longer names it is a prefix of.
        ok(&CMD, "--mem=1G", &["mem=1G"], &[]);
        ok(&CMD, "--parsable", &["parsable"], &[]);
        // Spellings of one option are one option.
        ok(&CMD, "--cpu=cores --cpu_b=q", &["cpu-bind=cores", "cpu-bind=q"], &[]);
        ok(&CMD, "--us alice", &["user=alice"], &[]);
        err(&CMD, "--mem-per=1G", "option '--mem-per' is ambiguous; possibilities: '--mem-per-cpu' '--mem-per-gpu'");
        err(&CMD, "--pars", "option '--pars' is ambiguous; possibilities: '--parsable2' '--parsable'");
        err(&CMD, "--nope", "unrecognized option '--nope'");
        err(&CMD, "--nope=1", "unrecognized option '--nope=1'");
        err(&CMD, "--noheader=yes", "option '--noheader' doesn't allow an argument");
        err(&CMD, "--noh=yes", "option '--noheader' doesn't allow an argument");
        err(&CMD, "--jobs", "option '--jobs' requires an argument");
        err(&CMD, "--=x", "unrecognized option '--=x'");
    }

    #[test]
    fn optional_values_only_attached() {
        ok(&CMD, "--exclusive=user", &["exclusive=user"], &[]);
        ok(&CMD, "--exclusive user", &["exclusive"], &["user"]);
        ok(&CMD, "-K1 -K 0", &["kill-on-bad-exit=1", "kill-on-bad-exit"], &["0"]);
    }

    #[test]
    fn words_dashes_and_order() {
        ok(&CMD, "12 -h 13", &["noheader"], &["12", "13"]);
        ok(&CMD, "-h -- -j 1", &["noheader"], &["-j", "1"]);
        ok(&CMD, "- -h", &["noheader"], &["-"]);
        // A value may start with a dash.
        ok(&CMD, "-j -5 --user -h", &["jobs=-5", "user=-h"], &[]);
        // Where the options end at the first word, the rest is the command's.
        ok(&RUN, "-N1 hostname -h --user x", &["nodes=1"], &["hostname", "-h", "--user", "x"]);
        ok(&RUN, "-N1 -- -h", &["nodes=1"], &["-h"]);
        // srun reads `_` as `-` in its own options only.
        ok(&RUN, "--mem_per_cpu=1 x --mem_per_cpu", &["mem-per-cpu=1"], &["x", "--mem_per_cpu"]);
        err(&CMD, "--mem_per_cpu=1", "unrecognized option '--mem_per_cpu=1'");
        assert_eq!(getopt_in(&CMD, &argv("a -h"), Order::RequireOrder).unwrap().args, argv("a -h"));
    }

    #[test]
    fn ignored_options_are_set_aside_and_refused_ones_refused() {
        let p = getopt(&CMD, &argv("--profile all -hk --no-kill=off x")).unwrap();
        assert_eq!(p.opts.iter().map(Given::key).collect::<Vec<_>>(), ["noheader"]);
        assert_eq!(
            p.ignored.iter().map(|g| (g.key(), g.value.as_deref())).collect::<Vec<_>>(),
            [("profile", Some("all")), ("no-kill", None), ("no-kill", Some("off"))]
        );
        assert_eq!(p.args, ["x"]);
        err(&CMD, "-h --bb=x", "burst buffers are not available on this cluster");
        // A refused option's value is still read as getopt would, so the message is about it.
        err(&CMD, "--bb", "option '--bb' requires an argument");
    }

    #[test]
    fn odd_bytes_are_named_safely() {
        err(&CMD, "-\u{1b}", "invalid option -- '\\u{1b}'");
        err(&CMD, "--\u{1b}[2J", "unrecognized option '--\\u{1b}[2J'");
        ok(&CMD, "-nä", &["name=ä"], &[]);
        err(&CMD, "-ä", "invalid option -- 'ä'");
    }
}
