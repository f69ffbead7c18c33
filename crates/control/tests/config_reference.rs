//! The configuration reference (`docs/admin/configuration.md`) cannot drift from the
//! configuration's types: every key each table of `tandem.toml` takes, as the parser itself
//! lists it (serde's "expected one of" for an unknown key, which names every field of the
//! type), is in the page's TOML blocks, and those blocks parse.

fn page() -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/admin/configuration.md")).unwrap()
}

/// The page's ```toml blocks, joined.
fn toml_blocks(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for l in md.lines() {
        match (&mut cur, l.trim_start().starts_with("```")) {
            (None, true) if l.trim_start().trim_start_matches('`').trim() == "toml" => cur = Some(String::new()),
            (Some(_), true) => out.push(cur.take().unwrap()),
            (Some(c), false) => {
                c.push_str(l);
                c.push('\n');
            }
            _ => {}
        }
    }
    out
}

/// The fields the parser takes in the table that `prefix` opens (empty: the top level), from
/// its refusal of an unknown key there.
fn fields(prefix: &str) -> Vec<String> {
    let text = format!("{prefix}zz_no_such_key = 1\n");
    let e = control::config::parse(&text).expect_err("an unknown key is refused").to_string();
    let list = e.split("expected one of ").nth(1).or_else(|| e.split("expected ").nth(1)).unwrap_or_else(|| panic!("{prefix:?}: {e}"));
    list.split(',').map(|f| f.trim().trim_matches(|c: char| c == '`' || c.is_whitespace()).to_string()).filter(|f| !f.is_empty()).collect()
}

#[test]
fn every_key_of_every_table_is_in_the_configuration_reference() {
    let blocks = toml_blocks(&page());
    assert_eq!(blocks.len(), 1, "docs/admin/configuration.md has one toml block, the reference");
    // It is a valid tandem.toml, every key written as a value (not in a comment).
    control::config::parse(&blocks[0]).unwrap_or_else(|e| panic!("the reference does not parse: {e}"));
    let doc: toml::Table = blocks[0].parse().unwrap();
    let keys_of = |table: &str| -> Vec<String> {
        match doc.get(table) {
            Some(toml::Value::Table(t)) => t.keys().cloned().collect(),
            Some(toml::Value::Array(a)) => a.iter().filter_map(|v| v.as_table()).flat_map(|t| t.keys().cloned()).collect(),
            _ => Vec::new(),
        }
    };
    let mut missing = Vec::new();
    for (table, prefix) in [
        ("", ""),
        ("scheduler", "[scheduler]\n"),
        ("partition", "[[partition]]\nname = \"p\"\n"),
        ("qos", "[[qos]]\nname = \"q\"\n"),
        ("account", "[[account]]\nname = \"a\"\n"),
        ("user", "[[user]]\nname = \"u\"\n"),
        ("association", "[[association]]\n"),
        ("accounting", "[accounting]\n"),
        ("security", "[security]\n"),
        ("limits", "[limits]\n"),
    ] {
        let have: Vec<String> = if table.is_empty() { doc.keys().cloned().collect() } else { keys_of(table) };
        for k in fields(prefix) {
            if !have.contains(&k) {
                missing.push(if table.is_empty() { k } else { format!("{table}.{k}") });
            }
        }
    }
    assert!(missing.is_empty(), "docs/admin/configuration.md's reference does not set: {}", missing.join(", "));
}
