//! The OCI runtime spec of a container (`config.json`, built with `oci-spec`), for `runc` run
//! inside a user namespace that `unshare` makes first, in which runc is root: the user's
//! first subordinate id (`/etc/subuid`) is root there and the user is itself (or, with
//! `--container-remap-root`, the user is root). The spec asks for no user namespace of its
//! own: a task runs as its user, in that user namespace, on the image, with the host's
//! network, in the job's cgroup (runc finds no cgroup it may write and leaves the task where
//! it is).

use oci_spec::runtime::{LinuxNamespaceType, Mount, MountBuilder, Spec, UserBuilder};
use slurmcli::Container;
use std::collections::BTreeMap;

/// What a task brings to its container.
pub struct Run<'a> {
    /// The image, unpacked.
    pub ready: &'a crate::Ready,
    /// The step's container options.
    pub container: &'a Container,
    /// The command.
    pub argv: &'a [String],
    /// The task's environment (the job's, with `SLURM_*`).
    pub env: &'a [(String, String)],
    /// The user.
    pub uid: u32,
    /// The user's group.
    pub gid: u32,
    /// The user's home directory (`--container-mount-home`).
    pub home: Option<&'a str>,
    /// A static init (Debian's `catatonit`), run in front of the command (and, `-P`, as the
    /// container's process 1):
    /// the command: the first process of a PID namespace gets only the signals it handles, so
    /// without one a `SIGTERM` (scancel, a time limit, a replica's stop) would not reach a
    /// program that leaves it to its default.
    pub init: Option<&'a std::path::Path>,
}

/// The annotation naming the image a container runs (the node keeps such images in its cache).
pub const DIGEST_ANNOTATION: &str = "org.tandem.image.digest";

/// Where the init is bound inside (in runc's own `/dev`, so the image is not touched).
pub const INIT_PATH: &str = "/dev/.tandem-init";

fn bind(src: &str, dst: &str, readonly: bool) -> Mount {
    let mut options = vec!["rbind".to_string(), "rprivate".to_string(), "nosuid".to_string(), "nodev".to_string()];
    if readonly {
        options.push("ro".to_string());
    }
    MountBuilder::default().destination(dst).typ("none").source(src).options(options).build().expect("complete")
}

/// The environment a task sees: the job's, except that a variable the image sets keeps the
/// image's value unless `--container-env` names it (Pyxis's rule).
pub fn environment(image: &[String], job: &[(String, String)], keep: &[String]) -> Vec<String> {
    let mut env: BTreeMap<String, String> = job.iter().cloned().collect();
    for kv in image {
        if let Some((k, v)) = kv.split_once('=')
            && !keep.iter().any(|n| n == k)
        {
            env.insert(k.to_string(), v.to_string());
        }
    }
    env.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// Builds the spec.
pub fn build(r: &Run) -> Spec {
    let c = r.container;
    let mut spec = Spec::rootless(0, 0);
    let (uid, gid) = if c.remap_root { (0, 0) } else { (r.uid, r.gid) };
    let mut linux = spec.linux().clone().unwrap_or_default();
    // The user namespace is the one runc runs in (`unshare`'s).
    linux.set_uid_mappings(None);
    linux.set_gid_mappings(None);
    linux.set_namespaces(linux.namespaces().clone().map(|ns| ns.into_iter().filter(|n| n.typ() != LinuxNamespaceType::User).collect()));
    // The job's cgroup, its devices as the host's: no limits of runc's own.
    linux.set_resources(None);
    linux.set_masked_paths(None);
    linux.set_readonly_paths(None);
    spec.set_linux(Some(linux));
    let mut process = spec.process().clone().unwrap_or_default();
    process.set_terminal(Some(false));
    process.set_user(UserBuilder::default().uid(uid).gid(gid).build().expect("complete"));
    let argv = match r.init {
        // catatonit: pass each signal to the command's process group (-g), then its exit status.
        Some(_) => [INIT_PATH, "-g", "--"].iter().map(|s| s.to_string()).chain(r.argv.iter().cloned()).collect(),
        None => r.argv.to_vec(),
    };
    process.set_args(Some(argv));
    process.set_env(Some(environment(&r.ready.env, r.env, &c.env)));
    let cwd = c.workdir.clone().or_else(|| r.ready.workdir.clone()).unwrap_or_else(|| "/".to_string());
    process.set_cwd(cwd.into());
    process.set_no_new_privileges(Some(true));
    // The node's limits (the job's), not runc's example ones.
    process.set_rlimits(None);
    spec.set_process(Some(process));
    let mut root = spec.root().clone().unwrap_or_default();
    root.set_path(r.ready.rootfs.clone());
    root.set_readonly(Some(!c.writable));
    spec.set_root(Some(root));
    spec.set_hostname(None);
    spec.set_annotations(Some([(DIGEST_ANNOTATION.to_string(), r.ready.digest.clone())].into()));
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    // The host's network: its names.
    for f in ["/etc/hosts", "/etc/resolv.conf"] {
        if std::path::Path::new(f).exists() {
            mounts.push(bind(f, f, true));
        }
    }
    if c.mount_home
        && let Some(h) = r.home
    {
        mounts.push(bind(h, if c.remap_root { "/root" } else { h }, false));
    }
    for m in &c.mounts {
        mounts.push(bind(&m.src, &m.dst, m.readonly));
    }
    if let Some(init) = r.init {
        mounts.push(bind(&init.display().to_string(), INIT_PATH, true));
    }
    spec.set_mounts(Some(mounts));
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready() -> crate::Ready {
        crate::Ready {
            rootfs: "/cache/rootfs/x".into(),
            digest: "sha256:x".into(),
            env: vec!["PATH=/bin".into(), "LANG=C".into()],
            workdir: Some("/w".into()),
            blobs: vec![],
            bytes: 0,
        }
    }

    #[test]
    fn the_user_is_itself_or_root_inside() {
        let argv = vec!["id".to_string()];
        let env = vec![("PATH".to_string(), "/usr/local/bin".to_string()), ("SLURM_PROCID".to_string(), "3".to_string())];
        let ready = ready();
        let mut c = Container { image: "x".into(), ..Container::default() };
        let run = |c: &Container| {
            build(&Run { ready: &ready, container: c, argv: &argv, env: &env, uid: 1001, gid: 1002, home: Some("/home/a"), init: None })
        };
        let s = run(&c);
        let p = s.process().as_ref().unwrap();
        assert_eq!((p.user().uid(), p.user().gid()), (1001, 1002));
        assert_eq!(s.linux().as_ref().unwrap().uid_mappings(), &None);
        assert!(!s.linux().as_ref().unwrap().namespaces().clone().unwrap().iter().any(|n| n.typ() == LinuxNamespaceType::User));
        assert_eq!(p.cwd().to_str(), Some("/w"));
        // The image's PATH wins; SLURM_* come through.
        let e = p.env().clone().unwrap();
        assert!(e.contains(&"PATH=/bin".to_string()) && e.contains(&"SLURM_PROCID=3".to_string()), "{e:?}");
        assert_eq!(s.root().as_ref().unwrap().readonly(), Some(true));
        assert!(
            !s.linux()
                .as_ref()
                .unwrap()
                .namespaces()
                .clone()
                .unwrap()
                .iter()
                .any(|n| n.typ() == oci_spec::runtime::LinuxNamespaceType::Network)
        );
        c.remap_root = true;
        c.mount_home = true;
        c.env = vec!["PATH".into()];
        c.mounts = vec![slurmcli::Mount { src: "/data".into(), dst: "/in".into(), readonly: true }];
        let s = run(&c);
        let p = s.process().as_ref().unwrap();
        assert_eq!(p.user().uid(), 0);
        assert!(p.env().clone().unwrap().contains(&"PATH=/usr/local/bin".to_string()));
        let m = s.mounts().clone().unwrap();
        assert!(
            m.iter().any(|m| m.destination().to_str() == Some("/root") && m.source().as_ref().and_then(|s| s.to_str()) == Some("/home/a"))
        );
        assert!(m.iter().any(|m| m.destination().to_str() == Some("/in") && m.options().as_ref().unwrap().contains(&"ro".to_string())));
        // With an init, it is process 1 and the command its child.
        let s = build(&Run {
            ready: &ready,
            container: &c,
            argv: &argv,
            env: &env,
            uid: 1001,
            gid: 1002,
            home: None,
            init: Some(std::path::Path::new("/usr/bin/catatonit")),
        });
        assert_eq!(s.process().as_ref().unwrap().args().clone().unwrap(), vec![INIT_PATH, "-g", "--", "id"]);
        assert!(s.mounts().clone().unwrap().iter().any(|m| m.destination().to_str() == Some(INIT_PATH)));
    }
}
