//! The keyword commands' grammar (`sacctmgr show assoc where user=x format=...`, and the
//! `key=value` words of `scontrol update` and `sreport`), beside `getopt`: words matched
//! case-insensitively, each keyword abbreviable down to a minimum length as Slurm's
//! `xstrncasecmp(word, "Name", MAX(len, N))` allows (an exact name always wins; an abbreviation
//! two keywords share is refused naming both), `key=value`, `key+=value` and `key-=value`, and
//! `where` and `set` separating conditions from changes.

/// One keyword: its spelling, the shortest abbreviation accepted, and the canonical key it
/// stands for (an alias names another keyword's key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keyword {
    /// The spelling matched.
    pub name: &'static str,
    /// The fewest letters an abbreviation needs.
    pub min: usize,
    /// The key it stands for.
    pub key: &'static str,
}

impl Keyword {
    /// A keyword standing for itself.
    pub const fn new(name: &'static str, min: usize) -> Keyword {
        Keyword { name, min, key: name }
    }

    /// Another spelling of `key`.
    pub const fn alias(name: &'static str, min: usize, key: &'static str) -> Keyword {
        Keyword { name, min, key }
    }

    fn abbreviated_by(&self, word: &str) -> bool {
        word.len() >= self.min.max(1) && word.len() <= self.name.len() && self.name[..word.len()].eq_ignore_ascii_case(word)
    }
}

/// A word that names no keyword, or names more than one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeywordError {
    /// No keyword matches.
    #[error("Unknown option: {0}")]
    Unknown(String),
    /// Several keywords (of different keys) match.
    #[error("Ambiguous option: {0} (could be {1})")]
    Ambiguous(String, String),
    /// `key=` with nothing after it where a value is needed, or a word that is no `key=value`.
    #[error("{0}")]
    Malformed(String),
}

/// The keyword of `keys` that `word` names: an exact match (any case), else the one keyword it
/// abbreviates.
pub fn lookup<'a>(word: &str, keys: &'a [Keyword]) -> Result<&'a Keyword, KeywordError> {
    if let Some(k) = keys.iter().find(|k| k.name.eq_ignore_ascii_case(word)) {
        return Ok(k);
    }
    let hits: Vec<&Keyword> = keys.iter().filter(|k| k.abbreviated_by(word)).collect();
    match hits.as_slice() {
        [] => Err(KeywordError::Unknown(crate::visible(word).into_owned())),
        [k, rest @ ..] if rest.iter().all(|r| r.key == k.key) => Ok(k),
        many => {
            let mut names: Vec<&str> = many.iter().map(|k| k.key).collect();
            names.dedup();
            Err(KeywordError::Ambiguous(crate::visible(word).into_owned(), names.join(", ")))
        }
    }
}

/// How a `key` word changes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `key=value`.
    Set,
    /// `key+=value`.
    Add,
    /// `key-=value`.
    Remove,
}

/// One `key=value` word, its key resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assign {
    /// The canonical key.
    pub key: &'static str,
    /// `=`, `+=` or `-=`.
    pub op: Op,
    /// What follows the operator (may be empty).
    pub value: String,
}

/// Where a word stands: before `where`/`set`, after `where`, or after `set`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// Before any `where` or `set`.
    Lead,
    /// After `where` (conditions).
    Where,
    /// After `set` (changes).
    Set,
}

/// A keyword command's words, read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Words {
    /// `key=value` words with the section each stood in.
    pub assigns: Vec<(Section, Assign)>,
    /// Words without `=` (names, in `sacctmgr add account NAME`), with their sections.
    pub bare: Vec<(Section, String)>,
}

impl Words {
    /// The assignments of `section`.
    pub fn of(&self, section: Section) -> impl Iterator<Item = &Assign> {
        self.assigns.iter().filter(move |(s, _)| *s == section).map(|(_, a)| a)
    }
}

/// Reads `words`: `where` and `set` (whole words, any case, as Slurm's) switch sections; every
/// other word is `key=value` (`+=`, `-=`) with its key looked up in `keys`, or a bare word.
pub fn read(words: &[String], keys: &[Keyword]) -> Result<Words, KeywordError> {
    let mut out = Words::default();
    let mut section = Section::Lead;
    for w in words {
        if w.eq_ignore_ascii_case("where") {
            section = Section::Where;
            continue;
        }
        if w.eq_ignore_ascii_case("set") {
            section = Section::Set;
            continue;
        }
        let Some(eq) = w.find('=') else {
            out.bare.push((section, w.clone()));
            continue;
        };
        let (mut name, value) = (&w[..eq], &w[eq + 1..]);
        let op = if let Some(n) = name.strip_suffix('+') {
            name = n;
            Op::Add
        } else if let Some(n) = name.strip_suffix('-') {
            name = n;
            Op::Remove
        } else {
            Op::Set
        };
        if name.is_empty() {
            return Err(KeywordError::Malformed(format!("no keyword before '=' in {}", crate::visible(w))));
        }
        let k = lookup(name, keys)?;
        out.assigns.push((section, Assign { key: k.key, op, value: value.to_string() }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: &[Keyword] = &[
        Keyword::new("Account", 3),
        Keyword::alias("Acct", 4, "Account"),
        Keyword::new("AdminLevel", 2),
        Keyword::new("DefaultAccount", 8),
        Keyword::new("DefaultQOS", 8),
        Keyword::new("Description", 3),
        Keyword::new("Name", 1),
        Keyword::alias("Names", 1, "Name"),
        Keyword::new("QOS", 1),
    ];

    fn w(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn exact_any_case_and_abbreviations() {
        assert_eq!(lookup("account", KEYS).unwrap().key, "Account");
        assert_eq!(lookup("ACC", KEYS).unwrap().key, "Account");
        assert_eq!(lookup("acct", KEYS).unwrap().key, "Account");
        assert_eq!(lookup("ad", KEYS).unwrap().key, "AdminLevel");
        assert_eq!(lookup("defaultacc", KEYS).unwrap().key, "DefaultAccount");
        assert_eq!(lookup("n", KEYS).unwrap().key, "Name", "Name and Names are one key");
        // Too short, or shared by two keys.
        assert!(matches!(lookup("a", KEYS), Err(KeywordError::Unknown(_))));
        assert!(matches!(lookup("Default", KEYS), Err(KeywordError::Unknown(_))), "DefaultAccount and DefaultQOS need 8 letters");
        assert_eq!(lookup("defaultq", KEYS).unwrap().key, "DefaultQOS");
        const SHARED: &[Keyword] = &[Keyword::new("MaxJobs", 4), Keyword::new("MaxJobsAccrue", 4)];
        assert!(matches!(lookup("maxj", SHARED), Err(KeywordError::Ambiguous(_, ref c)) if c == "MaxJobs, MaxJobsAccrue"));
        assert_eq!(lookup("maxjobs", SHARED).unwrap().name, "MaxJobs", "an exact name wins");
        assert!(matches!(lookup("de", KEYS), Err(KeywordError::Unknown(_))));
        assert!(matches!(lookup("Accounts2", KEYS), Err(KeywordError::Unknown(_))));
    }

    #[test]
    fn sections_operators_and_bare_words() {
        let r = read(&w("bob where Acc=ml set qos+=high DefaultQOS= qos-=low"), KEYS).unwrap();
        assert_eq!(r.bare, vec![(Section::Lead, "bob".to_string())]);
        let set: Vec<_> = r.of(Section::Set).cloned().collect();
        assert_eq!(set[0], Assign { key: "QOS", op: Op::Add, value: "high".into() });
        assert_eq!(set[1], Assign { key: "DefaultQOS", op: Op::Set, value: String::new() });
        assert_eq!(set[2].op, Op::Remove);
        assert_eq!(r.of(Section::Where).next().unwrap().value, "ml");
        assert!(matches!(read(&w("=x"), KEYS), Err(KeywordError::Malformed(_))));
        assert!(matches!(read(&w("nosuch=1"), KEYS), Err(KeywordError::Unknown(_))));
        // Values keep their '=' and case.
        let r = read(&w("Description=a=B"), KEYS).unwrap();
        assert_eq!(r.of(Section::Lead).next().unwrap().value, "a=B");
        // Control characters in an unknown key are shown visibly.
        let e = read(&["\u{1b}[2J=1".to_string()], KEYS).unwrap_err().to_string();
        assert!(!e.contains('\u{1b}'), "{e}");
    }
}
