//! The text format, to a file (one process: logging is set up once per process): control
//! characters in messages and fields never reach the file raw; the filter changes at run time
//! (one module's debug on, then off); the file is opened afresh after it was moved away (as
//! logrotate does before its SIGHUP).

#[test]
fn text_lines_escape_control_characters_follow_the_filter_and_reopen() {
    let dir = std::env::temp_dir().join(format!("tandem-logging-text-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("server.log");
    logging::init(&logging::Options { filter: Some("info".into()), format: logging::Format::Text, file: Some(path.clone()) }).unwrap();
    assert!(matches!(logging::init(&logging::Options::default()), Err(logging::Error::Twice)));
    let evil = "name\u{1b}[31mred\u{7}\u{9b}1m";
    tracing::info!(target: "server::jobs", job_id = 7, name = evil, "job {evil} submitted");
    tracing::debug!(target: "server::kube", "hidden at info");
    assert_eq!(logging::set_filter("info,server::kube=debug").unwrap(), "info,server::kube=debug");
    assert_eq!(logging::filter().as_deref(), Some("info,server::kube=debug"));
    tracing::debug!(target: "server::kube", "shown once turned on");
    tracing::debug!(target: "server::jobs", "other modules stay at info");
    assert!(logging::set_filter("server=loud").is_err());
    assert_eq!(logging::filter().as_deref(), Some("info,server::kube=debug"), "a refused filter changes nothing");
    logging::set_filter("info").unwrap();
    tracing::debug!(target: "server::kube", "hidden again");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "raw control characters: {text:?}");
    assert!(text.contains("job_id=7") && text.contains("submitted"), "{text}");
    assert!(text.contains("shown once turned on"), "{text}");
    for hidden in ["hidden at info", "other modules stay", "hidden again"] {
        assert!(!text.contains(hidden), "{hidden}: {text}");
    }
    // logrotate moves the file away, then the daemon reopens at SIGHUP.
    std::fs::rename(&path, dir.join("server.log.1")).unwrap();
    tracing::info!("still to the moved file");
    logging::reopen().unwrap();
    tracing::info!("to the new file");
    let old = std::fs::read_to_string(dir.join("server.log.1")).unwrap();
    let new = std::fs::read_to_string(&path).unwrap();
    assert!(old.contains("still to the moved file") && !old.contains("to the new file"), "{old}");
    assert!(new.contains("to the new file") && new.lines().count() == 1, "{new}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    // A link at the path is not followed: the reopen fails, and logging goes on (to the
    // handle it had, here a file already unlinked).
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(dir.join("elsewhere"), &path).unwrap();
    let e = logging::reopen().unwrap_err().to_string();
    assert!(e.starts_with("opening the log file"), "{e}");
    tracing::info!("after a failed reopen");
    assert!(!dir.join("elsewhere").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
