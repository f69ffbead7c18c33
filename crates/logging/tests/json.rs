//! The JSON format: one object per line with the event's fields, control characters encoded.

#[test]
fn json_lines_carry_the_fields() {
    let dir = std::env::temp_dir().join(format!("tandem-logging-json-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("agent.log");
    logging::init(&logging::Options { filter: None, format: logging::Format::Json, file: Some(path.clone()) }).unwrap();
    tracing::info!(target: "agent::node", node = "node1", job_id = 12u64, "job {} started", "a\u{1b}b");
    tracing::warn!(target: "h2::proto", "a library's chatter below warn is dropped, this is not");
    tracing::info!(target: "h2::proto", "dropped");
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["level"], "INFO");
    assert_eq!(lines[0]["target"], "agent::node");
    assert_eq!(lines[0]["node"], "node1");
    assert_eq!(lines[0]["job_id"], 12);
    assert_eq!(lines[0]["message"], "job a\u{1b}b started");
    assert!(lines[0]["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert!(!text.contains('\u{1b}'), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
