//! `sacctmgr`'s grammar and listings, pure: the verb and entity words, the keywords of each
//! (through [`crate::keywords`]), and the fields of `show` with Slurm's headers and widths.

use crate::keywords::{self, Assign, Keyword, KeywordError, Section};

/// What a `sacctmgr` command line asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `show`/`list ENTITY [where ...] [format=...] [withassoc]`.
    Show {
        /// What is listed.
        entity: Entity,
        /// Conditions (`where` or not).
        filter: Vec<Assign>,
        /// `format=`.
        format: Option<String>,
        /// `withassoc` (accounts and users with their associations).
        with_assoc: bool,
    },
    /// `add`/`modify`/`delete ENTITY ...`.
    Change {
        /// `add`, `modify` or `delete`.
        verb: Verb,
        /// Of what.
        entity: Entity,
        /// Conditions: `where ...`, names given bare, and for `add` the names and accounts.
        filter: Vec<Assign>,
        /// What to set.
        set: Vec<Assign>,
    },
}

/// A change's verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `add`, `create`.
    Add,
    /// `modify`, `update`.
    Modify,
    /// `delete`, `remove`.
    Delete,
}

/// What `sacctmgr` lists or changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entity {
    /// `account`.
    Account,
    /// `user`.
    User,
    /// `association` (`assoc`).
    Assoc,
    /// `qos`.
    Qos,
    /// `cluster`.
    Cluster,
}

/// A command line `sacctmgr` refuses, in its words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

impl From<KeywordError> for Refusal {
    fn from(e: KeywordError) -> Refusal {
        Refusal(format!(" {e}\n Use keyword 'where' to modify condition"))
    }
}

const VERBS: &[Keyword] = &[
    Keyword::alias("add", 3, "add"),
    Keyword::alias("create", 2, "add"),
    Keyword::alias("modify", 1, "modify"),
    Keyword::alias("update", 1, "modify"),
    Keyword::alias("delete", 3, "delete"),
    Keyword::alias("remove", 3, "delete"),
    Keyword::alias("show", 3, "show"),
    Keyword::alias("list", 3, "show"),
];

const ENTITIES: &[Keyword] = &[
    Keyword::alias("account", 3, "account"),
    Keyword::alias("accounts", 3, "account"),
    Keyword::alias("user", 1, "user"),
    Keyword::alias("users", 1, "user"),
    Keyword::alias("association", 3, "assoc"),
    Keyword::alias("associations", 3, "assoc"),
    Keyword::alias("qos", 1, "qos"),
    Keyword::alias("cluster", 2, "cluster"),
    Keyword::alias("clusters", 2, "cluster"),
];

/// Every keyword `sacctmgr` reads in a command, with Slurm's shortest abbreviations; the
/// canonical keys are those the controller takes (`control::accounting`).
pub const KEYWORDS: &[Keyword] = &[
    Keyword::alias("Accounts", 3, "Account"),
    Keyword::new("Account", 3),
    Keyword::alias("Acct", 4, "Account"),
    Keyword::new("AdminLevel", 2),
    Keyword::alias("Clusters", 3, "Cluster"),
    Keyword::new("Cluster", 3),
    Keyword::new("DefaultAccount", 8),
    Keyword::new("DefaultQOS", 8),
    Keyword::new("Description", 3),
    Keyword::new("Fairshare", 2),
    Keyword::alias("Shares", 1, "Fairshare"),
    Keyword::new("Format", 3),
    Keyword::new("GraceTime", 3),
    Keyword::new("GrpJobs", 4),
    Keyword::new("GrpSubmitJobs", 4),
    Keyword::new("GrpTRES", 7),
    Keyword::new("MaxJobs", 4),
    Keyword::new("MaxJobsPerUser", 8),
    Keyword::alias("MaxJobsPU", 9, "MaxJobsPerUser"),
    Keyword::new("MaxSubmitJobs", 4),
    Keyword::new("MaxSubmitJobsPerUser", 10),
    Keyword::alias("MaxSubmitPU", 11, "MaxSubmitJobsPerUser"),
    Keyword::new("MaxTRESPerJob", 7),
    Keyword::alias("MaxTRES", 7, "MaxTRESPerJob"),
    Keyword::new("MaxTRESPerUser", 11),
    Keyword::alias("MaxTRESPU", 9, "MaxTRESPerUser"),
    Keyword::new("MaxWall", 4),
    Keyword::alias("MaxWallDurationPerJob", 4, "MaxWall"),
    Keyword::new("Names", 1),
    Keyword::alias("Name", 1, "Names"),
    Keyword::new("Organization", 1),
    Keyword::new("Parent", 3),
    Keyword::alias("Partitions", 4, "Partition"),
    Keyword::new("Partition", 4),
    Keyword::new("PreemptMode", 8),
    Keyword::new("PreemptTier", 8),
    Keyword::new("Priority", 3),
    Keyword::new("QOS", 1),
    Keyword::alias("QOSLevel", 4, "QOS"),
    Keyword::alias("Users", 1, "User"),
    Keyword::new("User", 1),
];

/// Keys that say which objects (for `add`: the names and the accounts), never what to set.
const CONDITION_KEYS: &[&str] = &["Names", "Account", "User", "Cluster"];

/// Reads a `sacctmgr` command's words (after its options).
pub fn parse(words: &[String]) -> Result<Request, Refusal> {
    let Some(verb) = words.first() else { return Err(Refusal(" No command given".into())) };
    let verb = keywords::lookup(verb, VERBS).map_err(|_| Refusal(format!(" Invalid Command: {}", crate::visible(verb))))?.key;
    let Some(ent) = words.get(1) else {
        return Err(Refusal(format!(" Too few arguments for keyword:{verb}")));
    };
    let entity = match keywords::lookup(ent, ENTITIES).map(|k| k.key) {
        Ok("account") => Entity::Account,
        Ok("user") => Entity::User,
        Ok("assoc") => Entity::Assoc,
        Ok("qos") => Entity::Qos,
        Ok("cluster") => Entity::Cluster,
        _ => {
            // Slurm's first line (`show` is `list` to it), then what this sacctmgr knows.
            let verb = if verb == "show" { "list" } else { verb };
            return Err(Refusal(format!(
                "No valid entity in {verb} command\nInput line must include \"Account\", \"Association\", \"Cluster\", \"QOS\", or \"User\" (this cluster's sacctmgr: not {})",
                crate::visible(ent)
            )));
        }
    };
    // `withassoc`, `withcoord`, `withdeleted` are flags; every other bare word is a name.
    let (mut with_assoc, mut rest) = (false, Vec::new());
    for w in &words[2..] {
        match w.to_ascii_lowercase().as_str() {
            "withassoc" | "withassocs" => with_assoc = true,
            "withcoord" | "withcoords" | "withdeleted" | "withsubaccounts" | "withrawqoslevel" => {}
            _ => rest.push(w.clone()),
        }
    }
    let r = keywords::read(&rest, KEYWORDS)?;
    if let Some(a) = r.assigns.iter().map(|(_, a)| a).find(|a| a.key == "Partition") {
        return Err(Refusal(format!(
            " Partition={}: associations on this cluster are per account and user, not per partition (partitions take AllowAccounts)",
            crate::visible(&a.value)
        )));
    }
    let names = |section_ok: &dyn Fn(Section) -> bool| -> Vec<Assign> {
        r.bare
            .iter()
            .filter(|(s, _)| section_ok(*s))
            .map(|(_, n)| Assign { key: "Names", op: keywords::Op::Set, value: n.clone() })
            .collect()
    };
    if verb == "show" {
        let mut filter = names(&|_| true);
        let mut format = None;
        for (_, a) in &r.assigns {
            if a.key == "Format" {
                format = Some(a.value.clone());
            } else {
                filter.push(a.clone());
            }
        }
        return Ok(Request::Show { entity, filter, format, with_assoc });
    }
    let verb = match verb {
        "add" => Verb::Add,
        "modify" => Verb::Modify,
        _ => Verb::Delete,
    };
    if matches!(entity, Entity::Assoc | Entity::Cluster) {
        return Err(Refusal(format!(
            " This cluster's sacctmgr changes accounts, users and QOS (an association is a user added to an account); not {}",
            if entity == Entity::Cluster { "clusters: this cluster is the only one" } else { "associations directly" }
        )));
    }
    let (mut filter, mut set) = (names(&|s| s != Section::Set), Vec::new());
    if let Some((_, n)) = r.bare.iter().find(|(s, _)| *s == Section::Set) {
        return Err(Refusal(format!(" Unknown option: {}\n Use keyword 'where' to modify condition", crate::visible(n))));
    }
    for (section, a) in &r.assigns {
        if a.key == "Format" {
            return Err(Refusal(" Format= is for show and list".into()));
        }
        let condition = match (verb, section) {
            (Verb::Add, _) => CONDITION_KEYS.contains(&a.key),
            (_, Section::Where) => true,
            (_, Section::Set) => false,
            // modify without `where`/`set`: conditions before `set`, as Slurm reads them.
            (_, Section::Lead) => verb == Verb::Delete || CONDITION_KEYS.contains(&a.key),
        };
        if condition { filter.push(a.clone()) } else { set.push(a.clone()) }
    }
    Ok(Request::Change { verb, entity, filter, set })
}

/// One column of a `show` listing: the name `format=` matches (with its shortest
/// abbreviation), Slurm's header and width (negative: left-justified).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Key (the name matched).
    pub key: &'static str,
    /// Shortest abbreviation.
    pub min: usize,
    /// Header.
    pub header: &'static str,
    /// Width; negative: left-justified.
    pub width: i32,
}

const fn f(key: &'static str, min: usize, header: &'static str, width: i32) -> Field {
    Field { key, min, header, width }
}

/// Every field of `show`, in Slurm's alphabetical matching order (Slurm's `common.c`).
pub const FIELDS: &[Field] = &[
    f("Account", 3, "Account", 10),
    f("Acct", 4, "Account", 10),
    f("AdminLevel", 2, "Admin", 9),
    f("Cluster", 2, "Cluster", 10),
    f("Coordinators", 3, "Coord Accounts", 20),
    f("ControlHost", 8, "ControlHost", 15),
    f("ControlPort", 8, "ControlPort", 12),
    f("DefaultAccount", 8, "Def Acct", 10),
    f("DefaultQOS", 8, "Def QOS", 9),
    f("Description", 3, "Descr", 20),
    f("Flags", 2, "Flags", 20),
    f("GraceTime", 3, "GraceTime", 10),
    f("GrpTRESMins", 8, "GrpTRESMins", 13),
    f("GrpTRESRunMins", 8, "GrpTRESRunMins", 13),
    f("GrpTRES", 7, "GrpTRES", 13),
    f("GrpJobs", 4, "GrpJobs", 7),
    f("GrpSubmitJobs", 4, "GrpSubmit", 9),
    f("GrpWall", 4, "GrpWall", 11),
    f("MaxJobsPU", 9, "MaxJobsPU", 9),
    f("MaxJobsPerUser", 8, "MaxJobsPU", 9),
    f("MaxJobs", 4, "MaxJobs", 7),
    f("MaxSubmitPU", 11, "MaxSubmitPU", 11),
    f("MaxSubmitJobsPerUser", 10, "MaxSubmitPU", 11),
    f("MaxSubmitJobs", 4, "MaxSubmit", 9),
    f("MaxTRESMins", 8, "MaxTRESMins", 13),
    f("MaxTRESPerNode", 11, "MaxTRESPerNode", 14),
    f("MaxTRESPU", 9, "MaxTRESPU", 13),
    f("MaxTRESPerUser", 11, "MaxTRESPU", 13),
    f("MaxTRES", 7, "MaxTRES", 13),
    f("MaxWall", 4, "MaxWall", 11),
    f("Name", 2, "Name", 10),
    f("Organization", 1, "Org", 20),
    f("ParentName", 7, "Par Name", 10),
    f("Partition", 4, "Partition", 10),
    f("Preempt", 7, "Preempt", 10),
    f("PreemptExemptTime", 8, "PreemptExemptTime", 19),
    f("PreemptMode", 8, "PreemptMode", 11),
    f("PreemptTier", 8, "PreemptTier", 11),
    f("Priority", 3, "Priority", 10),
    f("QOS", 1, "QOS", 20),
    f("RPC", 1, "RPC", 5),
    f("Share", 1, "Share", 9),
    f("FairShare", 2, "Share", 9),
    f("UsageFactor", 6, "UsageFactor", 11),
    f("UsageThres", 6, "UsageThres", 10),
    f("User", 1, "User", 10),
];

/// Each entity's default columns (Slurm's, less what this cluster has none of).
pub fn default_format(e: Entity, with_assoc: bool) -> &'static str {
    match (e, with_assoc) {
        (Entity::Account, false) => "Account,Descr,Org",
        (Entity::Account, true) => {
            "Account,Descr,Org,Cluster,ParentName,User,Share,GrpJobs,GrpTRES,GrpSubmit,MaxJobs,MaxTRES,MaxSubmit,MaxWall,QOS,DefaultQOS"
        }
        (Entity::User, false) => "User,DefaultAccount,AdminLevel",
        (Entity::User, true) => {
            "User,DefaultAccount,AdminLevel,Cluster,Account,Partition,Share,MaxJobs,MaxTRES,MaxSubmit,MaxWall,QOS,DefaultQOS"
        }
        (Entity::Assoc, _) => {
            "Cluster,Account,User,Partition,Share,Priority,GrpJobs,GrpTRES,GrpSubmit,GrpWall,GrpTRESMins,MaxJobs,MaxTRES,MaxTRESPerNode,MaxSubmit,MaxWall,MaxTRESMins,QOS,DefaultQOS,GrpTRESRunMins"
        }
        (Entity::Qos, _) => {
            "Name,Priority,GraceTime,Preempt,PreemptExemptTime,PreemptMode,Flags%40,UsageThres,UsageFactor,GrpTRES,GrpTRESMins,GrpTRESRunMins,GrpJobs,GrpSubmit,GrpWall,MaxTRES,MaxTRESPerNode,MaxTRESMins,MaxWall,MaxTRESPerUser,MaxJobsPerUser,MaxSubmitJobsPerUser"
        }
        (Entity::Cluster, _) => {
            "Cluster,ControlHost,ControlPort,RPC,Share,GrpJobs,GrpTRES,GrpSubmit,MaxJobs,MaxTRES,MaxSubmit,MaxWall,QOS,DefaultQOS"
        }
    }
}

/// Reads `format=`: each field (any case, abbreviated, Slurm's alphabetical first match) with
/// its optional `%width`.
pub fn parse_format(spec: &str) -> Result<Vec<(Field, i32)>, Refusal> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, width) = match item.split_once('%') {
            Some((n, w)) => (n, Some(w.parse::<i32>().map_err(|_| Refusal(format!("Invalid field width: {}", crate::visible(item))))?)),
            None => (item, None),
        };
        let field = FIELDS
            .iter()
            .find(|f| f.key.eq_ignore_ascii_case(name))
            .or_else(|| {
                FIELDS.iter().find(|f| name.len() >= f.min && name.len() <= f.key.len() && f.key[..name.len()].eq_ignore_ascii_case(name))
            })
            .ok_or_else(|| Refusal(format!("Unknown field '{}'", crate::visible(name))))?;
        out.push((*field, width.filter(|w| *w != 0).unwrap_or(field.width).clamp(-1000, 1000)));
    }
    if out.is_empty() {
        return Err(Refusal("No fields requested".into()));
    }
    Ok(out)
}

/// One cell at `width` as Slurm's `print_fields_str` does: right-justified (left for a negative
/// width), and a value too long cut with `+` as its last character.
pub fn cell(value: &str, width: i32) -> String {
    let w = width.unsigned_abs() as usize;
    let v: String = if value.chars().count() > w && w > 0 {
        let mut s: String = value.chars().take(w - 1).collect();
        s.push('+');
        s
    } else {
        value.to_string()
    };
    if width < 0 { format!("{v:<w$}") } else { format!("{v:>w$}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn verbs_entities_and_sections() {
        let Request::Show { entity, filter, format, with_assoc } = parse(&w("list assoc where user=alice format=Account,User%20")).unwrap()
        else {
            panic!()
        };
        assert_eq!((entity, format.as_deref(), with_assoc), (Entity::Assoc, Some("Account,User%20"), false));
        assert_eq!((filter[0].key, filter[0].value.as_str()), ("User", "alice"));
        let Request::Show { entity, filter, with_assoc, .. } = parse(&w("show user alice WithAssoc")).unwrap() else { panic!() };
        assert_eq!((entity, filter[0].key, with_assoc), (Entity::User, "Names", true));
        let Request::Change { verb, entity, filter, set } = parse(&w("add user bob account=ml DefaultAccount=ml MaxJobs=2")).unwrap()
        else {
            panic!()
        };
        assert_eq!((verb, entity), (Verb::Add, Entity::User));
        assert_eq!(filter.iter().map(|a| a.key).collect::<Vec<_>>(), ["Names", "Account"]);
        assert_eq!(set.iter().map(|a| a.key).collect::<Vec<_>>(), ["DefaultAccount", "MaxJobs"]);
        let Request::Change { filter, set, .. } = parse(&w("mod user where name=bob acc=ml set qos+=high")).unwrap() else { panic!() };
        assert_eq!(filter.len(), 2);
        assert_eq!(set[0].op, keywords::Op::Add);
        let Request::Change { verb, filter, .. } = parse(&w("remove account ml")).unwrap() else { panic!() };
        assert_eq!((verb, filter[0].value.as_str()), (Verb::Delete, "ml"));
        // Refusals in sacctmgr's words.
        assert!(parse(&w("frob account")).unwrap_err().0.contains("Invalid Command"));
        assert!(parse(&w("show wckey")).unwrap_err().0.contains("No valid entity"));
        assert!(parse(&w("add account x nosuch=1")).unwrap_err().0.contains("Unknown option: nosuch"));
        assert!(parse(&w("modify user bob set stray")).unwrap_err().0.contains("Unknown option: stray"));
        assert!(parse(&w("add")).unwrap_err().0.contains("Too few"));
        assert!(parse(&w("show assoc partition=gpu")).unwrap_err().0.contains("not per partition"));
    }

    #[test]
    fn format_fields_and_cells() {
        let f = parse_format("acc,DefaultA,admin,user%-15,qos%5").unwrap();
        assert_eq!(
            f.iter().map(|(f, w)| (f.header, *w)).collect::<Vec<_>>(),
            [("Account", 10), ("Def Acct", 10), ("Admin", 9), ("User", -15), ("QOS", 5)]
        );
        assert!(parse_format("nosuch").unwrap_err().0.contains("Unknown field 'nosuch'"));
        assert_eq!(cell("normal,high", 5), "norm+");
        assert_eq!(cell("ml", 5), "   ml");
        assert_eq!(cell("ml", -5), "ml   ");
        for e in [Entity::Account, Entity::User, Entity::Assoc, Entity::Qos, Entity::Cluster] {
            for a in [false, true] {
                parse_format(default_format(e, a)).unwrap();
            }
        }
    }
}
