//! `tandem token --kubeconfig` and `--exec-credential`: what kubectl and the Kubernetes client
//! libraries need to reach the controller's Kubernetes API (README, "For Kubernetes users").

use anyhow::{Context, Result, bail};
use base64::Engine;
use serde_json::{Value, json};

/// The name of the cluster, user and context in a kubeconfig.
const NAME: &str = "tandem";

/// A kubeconfig from `POST /v1/token`'s reply `v`: the controller's address and CA, checked as
/// `controller.tandem` (the certificate's name, whatever address is dialled), and the user's
/// credential: on this machine (the Unix socket) a credential plugin that asks the controller
/// for a fresh token whenever the last one runs out; over TCP the token itself (it lasts
/// `lifespan` seconds: the plugin could not prove who it is without it).
pub fn kubeconfig(v: &Value, lifespan: Option<i64>) -> Result<String> {
    let env_server = std::env::var("TANDEM_SERVER").ok();
    let tcp_target = env_server.as_deref().filter(|s| s.starts_with("https://") || s.starts_with("http://"));
    let server = match (tcp_target, v["server"].as_str()) {
        (Some(s), _) => s.trim_end_matches('/').to_string(),
        (None, Some(s)) => s.to_string(),
        (None, None) => bail!("the controller reports no TCP address to put in a kubeconfig"),
    };
    let mut cluster = json!({"server": server});
    match v["ca_pem"].as_str() {
        Some(pem) => {
            cluster["certificate-authority-data"] = json!(base64::engine::general_purpose::STANDARD.encode(pem));
            cluster["tls-server-name"] = json!(wire::CONTROLLER_NAME);
        }
        None if server.starts_with("https://") => bail!("the controller serves TLS but sent no CA certificate"),
        None => {}
    }
    let user = match tcp_target {
        Some(_) => {
            let token = v["token"].as_str().context("no token in the reply")?;
            eprintln!(
                "tandem token: the kubeconfig holds a token that lasts {} s (--lifespan, at most 7 days); on a machine with the \
                 controller's socket it would renew itself",
                lifespan.unwrap_or(1800)
            );
            json!({"token": token})
        }
        None => {
            let exe = std::env::current_exe().context("finding this program, for the kubeconfig's credential plugin")?;
            let mut env = vec![json!({"name": "TANDEM_SERVER", "value": env_server.unwrap_or_else(|| "http://127.0.0.1:7200".into())})];
            if let Ok(ca) = std::env::var("TANDEM_CA") {
                env.push(json!({"name": "TANDEM_CA", "value": ca}));
            }
            let mut args = vec![json!("token"), json!("--exec-credential")];
            if let Some(l) = lifespan {
                args.extend([json!("--lifespan"), json!(l.to_string())]);
            }
            json!({"exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": exe.display().to_string(),
                "args": args,
                "env": env,
                "interactiveMode": "Never",
                "provideClusterInfo": false,
            }})
        }
    };
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": NAME, "cluster": cluster}],
        "users": [{"name": NAME, "user": user}],
        "contexts": [{"name": NAME, "context": {"cluster": NAME, "user": NAME, "namespace": "default"}}],
        "current-context": NAME,
        "preferences": {},
    });
    Ok(yaml_serde::to_string(&config)?)
}

/// A token as the `ExecCredential` a kubeconfig's credential plugin prints: kubectl uses it
/// until `expirationTimestamp`, then runs the plugin again.
pub fn exec_credential(v: &Value) -> Result<String> {
    let token = v["token"].as_str().context("no token in the reply")?;
    let expires = v["expires"].as_i64().context("no expiry in the reply")?;
    let at = jiff::Timestamp::from_second(expires).context("the token's expiry")?;
    Ok(json!({
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": token, "expirationTimestamp": at.to_string()},
    })
    .to_string())
}

/// Writes `text` to `path`, readable by its owner alone (it holds a credential or the way to
/// get one), replacing the file whole.
pub fn write_private(path: &std::path::Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".{}.tmp{}", path.file_name().and_then(|n| n.to_str()).unwrap_or("kubeconfig"), std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(text.as_bytes()).and_then(|_| f.sync_all()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exec_credential_says_when_it_runs_out() {
        let s = exec_credential(&json!({"token": "abc", "expires": 1_800_000_000})).unwrap();
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["kind"], "ExecCredential");
        assert_eq!(v["status"]["token"], "abc");
        assert_eq!(v["status"]["expirationTimestamp"], "2027-01-15T08:00:00Z");
        assert!(exec_credential(&json!({"token": "abc"})).is_err());
    }
}
