//! `pods/exec`'s wire protocol, sans IO: the request's options, and the WebSocket messages of
//! the channel protocols `v5.channel.k8s.io` (kubectl 1.30 and later) and `v4.channel.k8s.io`
//! (the Python client). Each binary message is a channel byte and its data: 0 the command's
//! input, 1 its output, 2 its error output, 3 the server's last word (a `metav1.Status` with
//! the exit code), 4 a terminal's size as JSON; v5 adds 255, closing one of the client's
//! streams (`[255, 0]`: end of input).

use crate::Failure;
use serde_json::{Value, json};

/// The subprotocols served, the preferred first.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// Channel of the command's input (client to server).
pub const STDIN: u8 = 0;
/// Channel of the command's output.
pub const STDOUT: u8 = 1;
/// Channel of the command's error output.
pub const STDERR: u8 = 2;
/// Channel of the server's last word: how the command ended.
pub const ERROR: u8 = 3;
/// Channel of a terminal's size (client to server).
pub const RESIZE: u8 = 4;
/// v5: a client's stream closed (its data: the stream's channel).
pub const CLOSE: u8 = 255;

/// What `…/pods/NAME/exec?command=…&stdin=…` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOptions {
    /// The command and its arguments (`command`, once per word).
    pub command: Vec<String>,
    /// The container named (`container`), if any.
    pub container: Option<String>,
    /// The client sends input.
    pub stdin: bool,
    /// The client wants the output.
    pub stdout: bool,
    /// The client wants the error output (not with `tty`: a terminal has one output).
    pub stderr: bool,
    /// A terminal (`kubectl exec -t`).
    pub tty: bool,
}

impl ExecOptions {
    /// Reads the query's pairs (in order: `command` repeats). Unknown parameters are ignored,
    /// as the API server does.
    pub fn parse(pairs: &[(String, String)]) -> Result<ExecOptions, Failure> {
        let mut o = ExecOptions { command: Vec::new(), container: None, stdin: false, stdout: false, stderr: false, tty: false };
        for (k, v) in pairs {
            let flag = |v: &str| match v {
                "true" | "1" => Ok(true),
                "false" | "0" | "" => Ok(false),
                _ => Err(Failure::bad_request(format!("{k}: {v:?} is not a boolean (true or false)"))),
            };
            match k.as_str() {
                "command" => {
                    if v.contains('\0') {
                        return Err(Failure::bad_request("command: a NUL byte cannot be in a command's word"));
                    }
                    o.command.push(v.clone());
                }
                "container" if !v.is_empty() => o.container = Some(v.clone()),
                "stdin" => o.stdin = flag(v)?,
                "stdout" => o.stdout = flag(v)?,
                "stderr" => o.stderr = flag(v)?,
                "tty" => o.tty = flag(v)?,
                _ => {}
            }
        }
        if o.command.is_empty() {
            return Err(Failure::bad_request("you must specify at least one command for the container"));
        }
        if !(o.stdin || o.stdout || o.stderr) {
            return Err(Failure::bad_request("you must specify at least 1 of stdin, stdout, stderr"));
        }
        if o.tty && o.stderr {
            return Err(Failure::bad_request("stderr cannot be requested with tty: a terminal's error output is its output"));
        }
        Ok(o)
    }
}

/// The subprotocol to answer with: the first served that the client offered
/// (`Sec-WebSocket-Protocol`, comma-separated).
pub fn protocol(offered: &str) -> Option<&'static str> {
    let offered: Vec<&str> = offered.split(',').map(str::trim).collect();
    PROTOCOLS.into_iter().find(|p| offered.contains(p))
}

/// A client's binary message, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromClient {
    /// Input for the command.
    Stdin(Vec<u8>),
    /// v5: the end of input.
    CloseStdin,
    /// A terminal's new size: columns, rows.
    Resize(u16, u16),
    /// Nothing to act on (an empty message, a channel the client does not write, a close of
    /// another stream, a malformed size).
    Nothing,
}

/// Reads one binary message of the client's (`v5`: the CLOSE channel is read too).
pub fn from_client(msg: &[u8], v5: bool) -> FromClient {
    let Some((&channel, data)) = msg.split_first() else { return FromClient::Nothing };
    match channel {
        STDIN if !data.is_empty() => FromClient::Stdin(data.to_vec()),
        RESIZE => {
            #[derive(serde::Deserialize)]
            #[serde(rename_all = "PascalCase")]
            struct Size {
                width: u16,
                height: u16,
            }
            match serde_json::from_slice::<Size>(data) {
                Ok(s) => FromClient::Resize(s.width, s.height),
                Err(_) => FromClient::Nothing,
            }
        }
        CLOSE if v5 && data.first() == Some(&STDIN) => FromClient::CloseStdin,
        _ => FromClient::Nothing,
    }
}

/// A message on `channel` carrying `data`.
pub fn message(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(1 + data.len());
    m.push(channel);
    m.extend_from_slice(data);
    m
}

/// How the command ended, as the error channel says it: `Success` for exit code 0, else a
/// `NonZeroExitCode` failure whose `ExitCode` cause holds the code (kubectl exits with it;
/// the Python client's `returncode` reads it).
pub fn exit_status(command: &[String], code: i32) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: error executing command [{}], exit code {code}", command.join(" ")),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// The error channel's word when the command's end is not known (`why`).
pub fn lost_status(why: &str) -> Value {
    json!({"metadata": {}, "status": "Failure", "message": why, "reason": "InternalError", "code": 500})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &[(&str, &str)]) -> Vec<(String, String)> {
        q.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn options_keep_the_commands_words_in_order_and_refuse_what_cannot_run() {
        let o = ExecOptions::parse(&pairs(&[
            ("command", "sh"),
            ("container", "web"),
            ("command", "-c"),
            ("stdout", "true"),
            ("command", "echo hi; exit 3"),
            ("stderr", "1"),
            ("pretty", "x"),
        ]))
        .unwrap();
        assert_eq!(o.command, ["sh", "-c", "echo hi; exit 3"]);
        assert_eq!((o.container.as_deref(), o.stdin, o.stdout, o.stderr, o.tty), (Some("web"), false, true, true, false));
        for (q, says) in [
            (vec![("stdout", "true")], "at least one command"),
            (vec![("command", "ls")], "at least 1 of stdin"),
            (vec![("command", "ls"), ("stdout", "yes")], "not a boolean"),
            (vec![("command", "ls"), ("tty", "true"), ("stderr", "true")], "tty"),
            (vec![("command", "a\0b"), ("stdout", "true")], "NUL"),
        ] {
            let e = ExecOptions::parse(&pairs(&q)).unwrap_err();
            assert!(e.code == 400 && e.message.contains(says), "{q:?}: {e:?}");
        }
    }

    #[test]
    fn the_protocol_is_the_first_served_that_the_client_offers() {
        assert_eq!(protocol("v5.channel.k8s.io"), Some("v5.channel.k8s.io"));
        assert_eq!(protocol("v4.channel.k8s.io, v5.channel.k8s.io"), Some("v5.channel.k8s.io"));
        assert_eq!(protocol("channel.k8s.io,v4.channel.k8s.io"), Some("v4.channel.k8s.io"));
        assert_eq!(protocol("base64.channel.k8s.io"), None);
        assert_eq!(protocol(""), None);
    }

    #[test]
    fn client_messages_are_read_by_channel() {
        assert_eq!(from_client(b"\x00hi", true), FromClient::Stdin(b"hi".to_vec()));
        assert_eq!(from_client(b"\x00", true), FromClient::Nothing);
        assert_eq!(from_client(b"", false), FromClient::Nothing);
        assert_eq!(from_client(b"\x04{\"Width\":80,\"Height\":24}", false), FromClient::Resize(80, 24));
        assert_eq!(from_client(b"\x04{\"Width\":-1}", false), FromClient::Nothing);
        assert_eq!(from_client(&[255, 0], true), FromClient::CloseStdin);
        assert_eq!(from_client(&[255, 0], false), FromClient::Nothing, "v4 has no close");
        assert_eq!(from_client(&[255, 1], true), FromClient::Nothing);
        assert_eq!(from_client(b"\x01out", true), FromClient::Nothing, "the client does not write output");
        assert_eq!(message(STDERR, b"x"), b"\x02x");
    }

    #[test]
    fn the_exit_status_is_what_kubectl_and_the_python_client_read() {
        assert_eq!(exit_status(&["true".into()], 0)["status"], "Success");
        let s = exit_status(&["sh".into(), "-c".into(), "exit 3".into()], 3);
        assert_eq!(s["reason"], "NonZeroExitCode");
        assert_eq!(s["details"]["causes"][0], json!({"reason": "ExitCode", "message": "3"}));
        assert!(s["message"].as_str().unwrap().contains("[sh -c exit 3], exit code 3"));
        assert_eq!(lost_status("gone")["status"], "Failure");
    }
}
