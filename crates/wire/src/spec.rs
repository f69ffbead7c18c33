//! Reading a service spec file: TOML, YAML or JSON, told apart by the file name (and a leading
//! `{` for JSON). Unknown keys are errors in every format (`control::ServiceSpec` denies them).

/// A spec that could not be read; the message names the file and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

/// Parses a service spec. `path` names the file in errors and picks the format: `.json` (or a
/// text starting with `{`) is JSON, `.yaml`/`.yml` YAML, `.toml` TOML; any other name is tried
/// as TOML, then as YAML.
pub fn parse_spec(text: &str, path: &str) -> Result<control::ServiceSpec, SpecError> {
    let lower = path.to_ascii_lowercase();
    if text.trim_start().starts_with('{') || lower.ends_with(".json") {
        return serde_json::from_str(text).map_err(|e| SpecError(format!("{path}: {e}")));
    }
    if lower.ends_with(".yaml") || lower.ends_with(".yml") {
        return yaml_serde::from_str(text).map_err(|e| SpecError(format!("{path}: {e}")));
    }
    match toml::from_str(text) {
        Ok(s) => Ok(s),
        Err(te) if lower.ends_with(".toml") => Err(SpecError(format!("{path}: {te}"))),
        Err(te) => yaml_serde::from_str(text).map_err(|ye| SpecError(format!("{path}: not valid TOML ({te}) nor YAML ({ye})"))),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_spec;

    const MINIMAL: &str = r#"
name = "echo"
command = ["python3", "-m", "http.server", "--bind", "127.0.0.1", "$PORT"]
replicas = 3
[resources]
cpus = 1
memory = "256MiB"
[readiness]
http = "/"
"#;

    #[test]
    fn toml_yaml_and_json_read_the_same() {
        let a = parse_spec(MINIMAL, "echo.toml").unwrap();
        let y = "name: echo\ncommand: [python3, -m, http.server, --bind, 127.0.0.1, $PORT]\nreplicas: 3\nresources:\n  cpus: 1\n  memory: 256MiB\nreadiness:\n  http: /\n";
        let b = parse_spec(y, "echo.yaml").unwrap();
        let j = serde_json::to_string(&a).unwrap();
        let c = parse_spec(&j, "echo.json").unwrap();
        assert_eq!(a.resolve().unwrap(), b.resolve().unwrap());
        assert_eq!(a, c);
        assert_eq!(a.resolve().unwrap().replicas, 3);
        assert_eq!(a.resolve().unwrap().memory, 256 << 20);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = parse_spec(&format!("{MINIMAL}\n[readiness2]\nhttp = \"/\"\n"), "x.toml").unwrap_err().to_string();
        assert!(e.contains("readiness2"), "{e}");
        let e = parse_spec("name: echo\ncommand: [x]\nreplica: 2\n", "x.yaml").unwrap_err().to_string();
        assert!(e.contains("replica"), "{e}");
        let e = parse_spec(&MINIMAL.replace("cpus = 1", "cpu = 1"), "x.toml").unwrap_err().to_string();
        assert!(e.contains("cpu"), "{e}");
        assert!(parse_spec("replicas = [", "x.toml").is_err());
    }
}

#[cfg(test)]
mod volume_tests {
    use super::*;

    #[test]
    fn a_spec_file_takes_volumes_for_its_image() {
        let text = "name = \"web\"\ncommand = [\"httpd\"]\nimage = \"oci:/x:1\"\n\n[[volumes]]\ndst = \"/etc/app\"\nfiles = [{ name = \"app.conf\", base64 = \"bW9kZT0x\", mode = 420 }]\n";
        let spec = parse_spec(text, "web.toml").unwrap();
        let c = spec.container("/home/a").unwrap().unwrap();
        assert_eq!((c.volumes[0].dst.as_str(), c.volumes[0].files[0].mode), ("/etc/app", 0o644));
        // Without an image: refused, saying why.
        let bare = parse_spec(&text.replace("image = \"oci:/x:1\"\n", ""), "web.toml").unwrap();
        assert!(bare.container("/home/a").unwrap_err().contains("volumes need an image"));
        let bad = parse_spec(&text.replace("app.conf", "../x"), "web.toml").unwrap();
        assert!(bad.container("/home/a").is_err());
    }
}
