//! Framing and parsing of the two wire formats, and writing replies in them.
//!
//! - v1 (PMI-1 "simple", and the `init` that opens PMI-2): one command per line,
//!   `cmd=NAME key=value key=value\n`. A value runs to the next space or newline; a backslash
//!   takes the next character with it (MPICH 4.1+ writes `\ ` for a space; older clients never
//!   escape), and values are kept as written, so what a rank puts is given back byte for byte.
//!   `mcmd=spawn\n` opens a multi-line command: `key=value` lines up to an `endcmd` line.
//! - v2 (PMI-2): a 6-character decimal length (MPICH's old client and Slurm left-align it,
//!   `"42    "`; MPICH 4.1+ right-aligns it, `"    42"`), then that many bytes of
//!   `cmd=NAME;key=value;...;`, where `;;` inside a value stands for one `;`.

/// Which framing a rank's bytes are read in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    V1,
    V2,
}

/// One command, as parsed. Values of v1 commands are kept escaped (as written); v2 values are
/// unescaped (`;;` to `;`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cmd {
    /// The command: `cmd=` (or `mcmd=` for a multi-line v1 command).
    pub name: String,
    /// Whether it was a multi-line `mcmd=` command.
    pub multi: bool,
    /// The other attributes in order (a bare v1 key has an empty value).
    pub args: Vec<(String, String)>,
}

impl Cmd {
    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.args.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// Why bytes could not be framed or parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Bad {
    /// A message longer than the limit (or announcing such a length).
    TooLong,
    /// Not a message of this wire format.
    Malformed(String),
}

const V1_PREFIXES: [&[u8]; 2] = [b"cmd=", b"mcmd="];

/// The next complete message at the start of `buf`: the command and how many bytes it took, or
/// `None` while it is incomplete. Garbage is reported as soon as it cannot begin a message.
pub(crate) fn next(buf: &[u8], wire: Wire, limit: usize) -> Result<Option<(Cmd, usize)>, Bad> {
    match wire {
        Wire::V1 => next_v1(buf, limit),
        Wire::V2 => next_v2(buf, limit),
    }
}

fn next_v1(buf: &[u8], limit: usize) -> Result<Option<(Cmd, usize)>, Bad> {
    if buf.is_empty() {
        return Ok(None);
    }
    let starts = |p: &[u8]| buf.len() >= p.len() && buf.starts_with(p);
    let could = |p: &[u8]| buf.len() < p.len() && p.starts_with(buf);
    if starts(b"mcmd=") {
        return next_mcmd(buf, limit);
    }
    if !starts(b"cmd=") {
        if V1_PREFIXES.iter().any(|p| could(p)) {
            return Ok(None);
        }
        return Err(Bad::Malformed(format!("a PMI-1 command starts with `cmd=`, not {:?}", preview(buf))));
    }
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > limit { Err(Bad::TooLong) } else { Ok(None) };
    };
    if nl + 1 > limit {
        return Err(Bad::TooLong);
    }
    let line = text(&buf[..nl])?;
    Ok(Some((parse_v1(line)?, nl + 1)))
}

/// A `mcmd=` block: lines up to and including a line `endcmd`.
fn next_mcmd(buf: &[u8], limit: usize) -> Result<Option<(Cmd, usize)>, Bad> {
    let mut start = 0;
    let mut args = Vec::new();
    let mut name = String::new();
    while let Some(off) = buf[start..].iter().position(|&b| b == b'\n') {
        let end = start + off;
        if end + 1 > limit {
            return Err(Bad::TooLong);
        }
        let line = text(&buf[start..end])?;
        if line == "endcmd" {
            return Ok(Some((Cmd { name, multi: true, args }, end + 1)));
        }
        let (k, v) = line.split_once('=').unwrap_or((line, ""));
        if k.is_empty() {
            return Err(Bad::Malformed(format!("an empty key in a multi-line command: {:?}", preview(line.as_bytes()))));
        }
        if start == 0 {
            name = v.to_string();
        } else {
            args.push((k.to_string(), v.to_string()));
        }
        start = end + 1;
    }
    if buf.len() > limit { Err(Bad::TooLong) } else { Ok(None) }
}

/// Parses one v1 line (without its newline), MPICH's rules: tokens split by spaces, each
/// `key=value` or a bare `key`; a backslash keeps the next character in the value.
fn parse_v1(line: &str) -> Result<Cmd, Bad> {
    let b = line.as_bytes();
    let mut i = 0;
    let mut name = None;
    let mut args = Vec::new();
    loop {
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        if i == b.len() {
            break;
        }
        let ks = i;
        while i < b.len() && b[i] != b' ' && b[i] != b'=' {
            i += 1;
        }
        let key = &line[ks..i];
        if key.is_empty() {
            return Err(Bad::Malformed(format!("`=` without a key in {:?}", preview(b))));
        }
        let mut val = "";
        if i < b.len() && b[i] == b'=' {
            i += 1;
            let vs = i;
            while i < b.len() && b[i] != b' ' {
                i += if b[i] == b'\\' && i + 1 < b.len() { 2 } else { 1 };
            }
            // A trailing lone backslash ends the line; `i` may have stepped over a multi-byte
            // character's start only by landing inside the line, which is UTF-8 already checked.
            let i2 = i.min(b.len());
            val = line.get(vs..i2).ok_or_else(|| Bad::Malformed("an escape splits a character".into()))?;
            i = i2;
        }
        if name.is_none() {
            if key != "cmd" || val.is_empty() {
                return Err(Bad::Malformed(format!("a PMI-1 command starts with `cmd=NAME`: {:?}", preview(b))));
            }
            name = Some(val.to_string());
        } else {
            args.push((key.to_string(), val.to_string()));
        }
    }
    let name = name.ok_or_else(|| Bad::Malformed("an empty line".into()))?;
    Ok(Cmd { name, multi: false, args })
}

fn next_v2(buf: &[u8], limit: usize) -> Result<Option<(Cmd, usize)>, Bad> {
    // Check the length field as its bytes come, so garbage fails early.
    let head = &buf[..buf.len().min(6)];
    if let Some(&c) = head.iter().find(|c| !(c.is_ascii_digit() || **c == b' ')) {
        return Err(Bad::Malformed(format!("a PMI-2 message starts with a 6-character length, not byte {c:#04x}")));
    }
    if buf.len() < 6 {
        return Ok(None);
    }
    let field = std::str::from_utf8(head).unwrap_or_default().trim_matches(' ');
    if field.is_empty() || field.contains(' ') {
        return Err(Bad::Malformed(format!("a bad PMI-2 length field {:?}", preview(head))));
    }
    let len: usize = field.parse().map_err(|_| Bad::Malformed(format!("a bad PMI-2 length field {field:?}")))?;
    if len > limit {
        return Err(Bad::TooLong);
    }
    if len == 0 {
        return Err(Bad::Malformed("an empty PMI-2 message".into()));
    }
    if buf.len() < 6 + len {
        return Ok(None);
    }
    let body = text(&buf[6..6 + len])?;
    Ok(Some((parse_v2(body)?, 6 + len)))
}

/// Parses a v2 body: `key=value;` pairs, the first `cmd=NAME`; `;;` in a value is one `;`.
/// The last pair's `;` may be missing.
fn parse_v2(body: &str) -> Result<Cmd, Bad> {
    let b = body.as_bytes();
    let mut i = 0;
    let mut pairs: Vec<(String, String)> = Vec::new();
    while i < b.len() {
        let ks = i;
        while i < b.len() && b[i] != b'=' && b[i] != b';' {
            i += 1;
        }
        if i == b.len() || b[i] == b';' || i == ks {
            return Err(Bad::Malformed(format!("a PMI-2 pair is `key=value;`: {:?}", preview(&b[ks..]))));
        }
        let key = body[ks..i].to_string();
        i += 1;
        let mut val = String::new();
        let mut vs = i;
        loop {
            if i == b.len() {
                val.push_str(&body[vs..i]);
                break;
            }
            if b[i] == b';' {
                if i + 1 < b.len() && b[i + 1] == b';' {
                    val.push_str(&body[vs..=i]);
                    i += 2;
                    vs = i;
                    continue;
                }
                val.push_str(&body[vs..i]);
                i += 1;
                break;
            }
            i += 1;
        }
        pairs.push((key, val));
    }
    let mut it = pairs.into_iter();
    match it.next() {
        Some((k, name)) if k == "cmd" && !name.is_empty() => Ok(Cmd { name, multi: false, args: it.collect() }),
        _ => Err(Bad::Malformed(format!("a PMI-2 message starts with `cmd=NAME;`: {:?}", preview(b)))),
    }
}

fn text(bytes: &[u8]) -> Result<&str, Bad> {
    if bytes.contains(&0) {
        return Err(Bad::Malformed("a NUL byte".into()));
    }
    std::str::from_utf8(bytes).map_err(|_| Bad::Malformed("bytes that are not UTF-8".into()))
}

/// The start of some bytes, for an error message.
fn preview(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(40)]).into_owned()
}

/// A v1 reply: `cmd=NAME k=v ...\n`. Values are written as given.
pub(crate) fn v1(cmd: &str, args: &[(&str, &str)]) -> Vec<u8> {
    let mut s = format!("cmd={cmd}");
    for (k, v) in args {
        s.push(' ');
        s.push_str(k);
        s.push('=');
        s.push_str(v);
    }
    s.push('\n');
    s.into_bytes()
}

/// A v2 reply: the left-aligned length, then `cmd=NAME;k=v;...;` with `;` in values doubled.
pub(crate) fn v2(cmd: &str, args: &[(&str, &str)]) -> Vec<u8> {
    let mut body = format!("cmd={cmd};");
    for (k, v) in args {
        body.push_str(k);
        body.push('=');
        body.push_str(&v.replace(';', ";;"));
        body.push(';');
    }
    let mut out = format!("{:<6}", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// A v1 value without its backslash escapes (for messages shown to people).
pub(crate) fn unescape_v1(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(buf: &[u8], wire: Wire) -> (Cmd, usize) {
        next(buf, wire, 1 << 16).unwrap().unwrap()
    }

    #[test]
    fn v1_lines_and_escapes() {
        let (c, n) = one(b"cmd=put kvsname=k key=a value=x\\ y\\\\z\ncmd=get", Wire::V1);
        assert_eq!(n, 38);
        assert_eq!(c.name, "put");
        assert_eq!(c.get("value"), Some("x\\ y\\\\z"));
        assert_eq!(unescape_v1(c.get("value").unwrap()), "x y\\z");
        assert_eq!(next(b"cmd=get", Wire::V1, 100), Ok(None));
        let (c, _) = one(b"cmd=barrier_in  \n", Wire::V1);
        assert!(c.args.is_empty());
        let (c, _) = one(b"cmd=put value=\n", Wire::V1);
        assert_eq!(c.get("value"), Some(""));
    }

    #[test]
    fn v1_garbage_fails_early() {
        assert_eq!(next(b"c", Wire::V1, 100), Ok(None));
        assert_eq!(next(b"mc", Wire::V1, 100), Ok(None));
        assert!(matches!(next(b"GET / HTTP/1.1", Wire::V1, 100), Err(Bad::Malformed(_))));
        assert!(matches!(next(b"cmd=\n", Wire::V1, 100), Err(Bad::Malformed(_))));
        assert!(matches!(next(b"cmd=x =y\n", Wire::V1, 100), Err(Bad::Malformed(_))));
        assert!(matches!(next(b"cmd=x \xff\n", Wire::V1, 100), Err(Bad::Malformed(_))));
        assert!(matches!(next(b"cmd=x a=\0\n", Wire::V1, 100), Err(Bad::Malformed(_))));
        assert_eq!(next(&[b'c', b'm', b'd', b'='].repeat(40), Wire::V1, 100), Err(Bad::TooLong));
    }

    #[test]
    fn v1_mcmd_block() {
        let block = b"mcmd=spawn\nnprocs=2\nexecname=/bin/a b\ntotspawns=1\nspawnssofar=1\nargcnt=0\nendcmd\n";
        assert_eq!(next(&block[..20], Wire::V1, 1000), Ok(None));
        let (c, n) = one(block, Wire::V1);
        assert_eq!(n, block.len());
        assert!(c.multi);
        assert_eq!(c.name, "spawn");
        assert_eq!(c.get("execname"), Some("/bin/a b"));
        assert_eq!(next(block, Wire::V1, 30), Err(Bad::TooLong));
    }

    #[test]
    fn v2_framing_both_alignments_and_escapes() {
        let body = b"cmd=kvs-put;key=a;value=x;;y;;;";
        for head in [format!("{:<6}", body.len()), format!("{:>6}", body.len())] {
            let mut m = head.into_bytes();
            m.extend_from_slice(body);
            let (c, n) = one(&m, Wire::V2);
            assert_eq!(n, m.len());
            assert_eq!(c.name, "kvs-put");
            assert_eq!(c.get("value"), Some("x;y;"));
            assert_eq!(next(&m[..m.len() - 1], Wire::V2, 1000), Ok(None));
        }
        // The last `;` may be missing.
        let (c, _) = one(b"10    cmd=a;b=cd", Wire::V2);
        assert_eq!(c.get("b"), Some("cd"));
        let (c, _) = one(b"8     cmd=a;b=", Wire::V2);
        assert_eq!(c.get("b"), Some(""));
    }

    #[test]
    fn v2_garbage() {
        assert!(matches!(next(b"cmd=in", Wire::V2, 100), Err(Bad::Malformed(_))));
        assert!(matches!(next(b"1 2   cmd=", Wire::V2, 100), Err(Bad::Malformed(_))));
        assert!(matches!(next(b"      ", Wire::V2, 100), Err(Bad::Malformed(_))));
        assert!(matches!(next(b"0     ", Wire::V2, 100), Err(Bad::Malformed(_))));
        assert_eq!(next(b"999999", Wire::V2, 100), Err(Bad::TooLong));
        assert!(matches!(next(b"5     key=1", Wire::V2, 100), Err(Bad::Malformed(_))));
        assert!(matches!(next(b"9     cmd=a;=b;", Wire::V2, 100), Err(Bad::Malformed(_))));
        assert!(matches!(next(b"7     cmd=a;b", Wire::V2, 100), Err(Bad::Malformed(_))));
    }

    #[test]
    fn writing() {
        assert_eq!(v1("maxes", &[("rc", "0"), ("kvsname_max", "256")]), b"cmd=maxes rc=0 kvsname_max=256\n");
        let m = v2("kvs-get-response", &[("rc", "0"), ("value", "a;b")]);
        assert_eq!(m, b"37    cmd=kvs-get-response;rc=0;value=a;;b;");
        let (c, _) = one(&m, Wire::V2);
        assert_eq!(c.get("value"), Some("a;b"));
    }
}
