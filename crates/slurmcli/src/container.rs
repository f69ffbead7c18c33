//! Container options with Pyxis's names (`--container-image`, `--container-mounts`, ...): the
//! image reference rules (Enroot's `[USER@][REGISTRY#]IMAGE[:TAG]`, Docker's form, and a local
//! OCI layout `oci:DIR[:TAG]`), mount specifications, and the [`Container`] a step's tasks run
//! in. Pure: the node pulls and runs (the `image` crate and the agent).

use crate::Invalid;
use serde::{Deserialize, Serialize};

/// The registry of an image reference that names none (Docker Hub's, as Docker and Enroot).
pub const DEFAULT_REGISTRY: &str = "registry-1.docker.io";

/// Longest image reference taken.
pub const MAX_REF: usize = 1024;

/// Where an image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRef {
    /// A registry, by the OCI distribution protocol.
    Registry {
        /// `USER@` of Enroot's form: whose credentials to use for the registry.
        user: Option<String>,
        /// `host[:port]`.
        registry: String,
        /// `name/of/image` (Docker Hub's one-word names get `library/`).
        repository: String,
        /// The tag (`latest` when neither a tag nor a digest is given).
        tag: Option<String>,
        /// `sha256:HEX`.
        digest: Option<String>,
    },
    /// A local OCI image layout directory on the node (`oci:DIR[:TAG]`).
    Layout {
        /// Absolute directory.
        dir: String,
        /// The tag (`org.opencontainers.image.ref.name`); `None`: the layout's only image.
        tag: Option<String>,
    },
}

fn bad(r: &str, why: &str) -> Invalid {
    Invalid::new(format!("invalid --container-image {:?}: {why}", crate::visible::visible(r)))
}

fn is_component(c: &str) -> bool {
    // Docker's path component: [a-z0-9]+ with single separators (`.`, `_`, `__`, `-`s) between.
    let b = c.as_bytes();
    if b.is_empty() || !b[0].is_ascii_alphanumeric() || !b[b.len() - 1].is_ascii_alphanumeric() {
        return false;
    }
    c.bytes().all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || matches!(x, b'.' | b'_' | b'-'))
        && !c.contains("..")
        && !c.contains("___")
}

fn is_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && t.bytes().all(|x| x.is_ascii_alphanumeric() || matches!(x, b'_' | b'.' | b'-'))
}

fn is_digest(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| h.len() == 64 && h.bytes().all(|x| x.is_ascii_digit() || (b'a'..=b'f').contains(&x)))
}

fn is_registry(r: &str) -> bool {
    let (host, port) = match r.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (r, None),
    };
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| !l.is_empty() && l.bytes().all(|x| x.is_ascii_alphanumeric() || x == b'-') && !l.starts_with('-'))
        && port.is_none_or(|p| {
            !p.is_empty() && p.len() <= 5 && p.bytes().all(|x| x.is_ascii_digit()) && p.parse::<u32>().is_ok_and(|n| n > 0 && n < 65536)
        })
}

fn is_user(u: &str) -> bool {
    !u.is_empty() && u.len() <= 256 && u.bytes().all(|x| x.is_ascii_alphanumeric() || matches!(x, b'_' | b'.' | b'-' | b'+'))
}

impl ImageRef {
    /// Reads a reference. The rules, in order:
    /// - `oci:DIR[:TAG]`: a local OCI image layout (DIR absolute, on the node);
    /// - with `#` (Enroot's and Pyxis's form), `[USER@]REGISTRY#IMAGE[:TAG][@DIGEST]`;
    /// - else Docker's: a first component with a dot or a colon, or `localhost`, is a
    ///   registry (`127.0.0.1:5000/bars/busybox:1`); otherwise the image is Docker Hub's
    ///   (`ubuntu` is `registry-1.docker.io/library/ubuntu:latest`); Enroot's `USER@` may
    ///   come first in this form too.
    pub fn parse(r: &str) -> Result<ImageRef, Invalid> {
        if r.is_empty() {
            return Err(bad(r, "it is empty"));
        }
        if r.len() > MAX_REF {
            return Err(bad(r, &format!("longer than {MAX_REF} bytes")));
        }
        if r.bytes().any(|b| b.is_ascii_control() || b == b' ' || b >= 0x80) {
            return Err(bad(r, "it contains a space, a control character or a non-ASCII byte"));
        }
        if let Some(rest) = r.strip_prefix("oci:") {
            // A tag is what follows a colon after the last slash.
            let (dir, tag) = match rest.rsplit_once(':') {
                Some((d, t)) if !t.contains('/') => (d, Some(t)),
                _ => (rest, None),
            };
            if !dir.starts_with('/') {
                return Err(bad(r, "oci:DIR names a directory by its absolute path"));
            }
            if dir.split('/').any(|c| c == "..") {
                return Err(bad(r, "oci:DIR must not contain \"..\""));
            }
            if let Some(t) = tag
                && !is_tag(t)
            {
                return Err(bad(r, &format!("{t:?} is not a valid tag")));
            }
            return Ok(ImageRef::Layout { dir: dir.to_string(), tag: tag.map(str::to_string) });
        }
        // `@sha256:...` is a digest; a leading `USER@` a user.
        let (body, digest) = match r.split_once("@sha256:") {
            Some((b, d)) => (b, Some(format!("sha256:{d}"))),
            None => (r, None),
        };
        if let Some(d) = &digest
            && !is_digest(d)
        {
            return Err(bad(r, "a digest is sha256: and 64 lowercase hex digits"));
        }
        let (user, body) = match body.split_once('@') {
            Some((u, b)) => {
                if !is_user(u) {
                    return Err(bad(r, &format!("{u:?} is not a user name (USER@ comes first)")));
                }
                (Some(u.to_string()), b)
            }
            None => (None, body),
        };
        let (registry, image) = match body.split_once('#') {
            Some((reg, img)) => {
                if !is_registry(reg) {
                    return Err(bad(r, &format!("{reg:?} is not a registry (host or host:port before #)")));
                }
                (reg.to_string(), img)
            }
            None => match body.split_once('/') {
                Some((first, rest)) if first.contains('.') || first.contains(':') || first == "localhost" => {
                    if !is_registry(first) {
                        return Err(bad(r, &format!("{first:?} is not a registry (host or host:port)")));
                    }
                    (first.to_string(), rest)
                }
                _ => (DEFAULT_REGISTRY.to_string(), body),
            },
        };
        if image.contains('#') {
            return Err(bad(r, "only one # (between the registry and the image)"));
        }
        let (name, tag) = match image.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => (n, Some(t.to_string())),
            _ => (image, None),
        };
        if let Some(t) = &tag
            && !is_tag(t)
        {
            return Err(bad(r, &format!("{t:?} is not a valid tag")));
        }
        if name.is_empty() {
            return Err(bad(r, "no image name"));
        }
        if name.len() > 255 {
            return Err(bad(r, "the image name is longer than 255 bytes"));
        }
        if let Some(c) = name.split('/').find(|c| !is_component(c)) {
            return Err(bad(r, &format!("{c:?} is not a valid image name component (lowercase letters, digits, and . _ - between them)")));
        }
        let repository = if registry == DEFAULT_REGISTRY && !name.contains('/') { format!("library/{name}") } else { name.to_string() };
        let tag = match (&tag, &digest) {
            (None, None) => Some("latest".to_string()),
            _ => tag,
        };
        Ok(ImageRef::Registry { user, registry, repository, tag, digest })
    }

    /// The reference in one canonical spelling (Docker's, without the user).
    pub fn canonical(&self) -> String {
        match self {
            ImageRef::Registry { registry, repository, tag, digest, .. } => {
                let mut s = format!("{registry}/{repository}");
                if let Some(t) = tag {
                    s.push(':');
                    s.push_str(t);
                }
                if let Some(d) = digest {
                    s.push('@');
                    s.push_str(d);
                }
                s
            }
            ImageRef::Layout { dir, tag } => match tag {
                Some(t) => format!("oci:{dir}:{t}"),
                None => format!("oci:{dir}"),
            },
        }
    }
}

/// One `--container-mounts` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    /// Host path (absolute).
    pub src: String,
    /// Path in the container (absolute).
    pub dst: String,
    /// Read-only.
    #[serde(default)]
    pub readonly: bool,
}

/// Most mounts one step takes.
pub const MAX_MOUNTS: usize = 64;

/// Files the node writes for a container task and mounts read-only into it (a Kubernetes
/// ConfigMap or Secret volume): a directory of them at `dst`, or with `file`, the one file at
/// `dst` itself (a `volumeMount`'s `subPath`); or with `scratch`, an empty directory the task
/// may write (a Kubernetes `emptyDir`), gone with the task. Tandem's own: no Pyxis option sets
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Volume {
    /// Path in the container (absolute).
    pub dst: String,
    /// The files, by name.
    pub files: Vec<VolumeFile>,
    /// `dst` is the one file's path, not a directory's.
    #[serde(default)]
    pub file: bool,
    /// An empty directory the task writes (no files).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scratch: bool,
}

/// One file of a [`Volume`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeFile {
    /// Its name in the volume's directory: letters, digits, '.', '_' and '-', not `.` or `..`.
    pub name: String,
    /// Its bytes, base64 (standard alphabet, padded).
    pub base64: String,
    /// Its permission bits (Kubernetes' default 0644).
    #[serde(default = "default_file_mode")]
    pub mode: u32,
}

fn default_file_mode() -> u32 {
    0o644
}

/// Most volumes one container takes.
pub const MAX_VOLUMES: usize = 64;

/// Most bytes (base64) all of a container's volumes hold together, each file counted 256
/// bytes more (its inode, its name, its work for the agent).
pub const MAX_VOLUME_BYTES: usize = 4 << 20;

/// Most files all of a container's volumes hold together.
pub const MAX_VOLUME_FILES: usize = 1024;

/// Whether `n` can name a volume's file.
pub fn volume_file_name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && n != "."
        && n != ".."
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn clean_path(p: &str, what: &str, whole: &str) -> Result<String, Invalid> {
    let bad = |why: &str| Invalid::new(format!("invalid --container-mounts {:?}: {what} {why}", crate::visible::visible(whole)));
    if p.is_empty() {
        return Err(bad("is empty"));
    }
    if !p.starts_with('/') {
        return Err(bad("must be an absolute path"));
    }
    if p.bytes().any(|b| b.is_ascii_control()) {
        return Err(bad("contains a control character"));
    }
    if p.len() > 4096 {
        return Err(bad("is longer than 4096 bytes"));
    }
    if p.split('/').any(|c| c == "..") {
        return Err(bad("must not contain \"..\""));
    }
    Ok(p.to_string())
}

/// Reads `--container-mounts`: comma-separated `SRC[:DST[:FLAGS]]`, FLAGS `ro` or `rw` (joined
/// by `+` as Pyxis's); DST defaults to SRC. A relative SRC stays so until
/// [`Container::resolve`] takes it from the submitting command's directory.
pub fn parse_mounts(v: &str) -> Result<Vec<Mount>, Invalid> {
    let mut out = Vec::new();
    for m in v.split(',').filter(|m| !m.is_empty()) {
        let parts: Vec<&str> = m.split(':').collect();
        let (src, dst, flags) = match parts.as_slice() {
            [s] => (*s, *s, ""),
            [s, d] => (*s, *d, ""),
            [s, d, f] => (*s, *d, *f),
            _ => {
                return Err(Invalid::new(format!(
                    "invalid --container-mounts {:?}: SRC:DST[:FLAGS], one entry per comma",
                    crate::visible::visible(m)
                )));
            }
        };
        let src = if src.starts_with('/') || src.is_empty() { src.to_string() } else { format!("/{src}") };
        let relative = !parts[0].starts_with('/');
        let mut readonly = false;
        for f in flags.split('+').filter(|f| !f.is_empty()) {
            match f {
                "ro" => readonly = true,
                "rw" => readonly = false,
                // Pyxis passes these to mount(8); every bind here is recursive and private.
                "rbind" | "bind" | "rprivate" | "private" => {}
                other => {
                    return Err(Invalid::new(format!(
                        "invalid --container-mounts {:?}: unknown flag {other:?} (ro, rw)",
                        crate::visible::visible(m)
                    )));
                }
            }
        }
        let mut src = clean_path(&src, "the source", m)?;
        if relative {
            src.remove(0);
        }
        out.push(Mount { src, dst: clean_path(dst, "the destination", m)?, readonly });
        if out.len() > MAX_MOUNTS {
            return Err(Invalid::new(format!("--container-mounts: at most {MAX_MOUNTS} mounts")));
        }
    }
    Ok(out)
}

/// What a step's tasks run in: an image and how (Pyxis's options).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Container {
    /// `--container-image`, as given (checked by [`ImageRef::parse`]).
    pub image: String,
    /// `--container-mounts`.
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// `--container-workdir` (absolute); `None`: the image's working directory, else `/`.
    #[serde(default)]
    pub workdir: Option<String>,
    /// `--container-env`: variables whose value from the job overrides the image's.
    #[serde(default)]
    pub env: Vec<String>,
    /// `--container-name`.
    #[serde(default)]
    pub name: Option<String>,
    /// `--container-mount-home` (default: no, as Pyxis's).
    #[serde(default)]
    pub mount_home: bool,
    /// `--container-remap-root`: the user is root inside (default: no, as Pyxis's).
    #[serde(default)]
    pub remap_root: bool,
    /// `--container-writable` (default: read-only, as Pyxis's `--container-readonly`).
    #[serde(default)]
    pub writable: bool,
    /// Tandem's own (`kubectl exec`): the step's tasks join the container the job's batch
    /// script or replica runs in on their node, rather than one of their own (a named
    /// container is joined by its name whatever this says).
    #[serde(default)]
    pub join_job: bool,
    /// Tandem's own: files mounted read-only into the container (Kubernetes ConfigMap and
    /// Secret volumes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
}

impl Container {
    /// Checks options that did not come through this crate's parser (the controller's API
    /// takes them as JSON): what [`read_option`] and [`parse_mounts`] would have refused.
    pub fn check(&self) -> Result<(), Invalid> {
        ImageRef::parse(&self.image)?;
        if let Some(n) = &self.name
            && (n.is_empty()
                || n.len() > 128
                || n == "."
                || n == ".."
                || !n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')))
        {
            return Err(Invalid::new(format!(
                "invalid --container-name {:?}: letters, digits, '.', '_' and '-', at most 128, not . or ..",
                crate::visible::visible(n)
            )));
        }
        if self.mounts.len() > 256 {
            return Err(Invalid::new("--container-mounts: at most 256 mounts"));
        }
        for m in &self.mounts {
            let whole = format!("{}:{}", m.src, m.dst);
            clean_path(&m.src, "the source", &whole)?;
            clean_path(&m.dst, "the destination", &whole)?;
            if m.src.contains([',', ':']) || m.dst.contains([',', ':']) {
                return Err(Invalid::new(format!(
                    "invalid --container-mounts {:?}: a path with ',' or ':'",
                    crate::visible::visible(&whole)
                )));
            }
        }
        if let Some(w) = &self.workdir
            && (!w.starts_with('/') || w.len() > 4096 || w.bytes().any(|b| b.is_ascii_control()))
        {
            return Err(Invalid::new(format!("invalid --container-workdir {:?}: an absolute path", crate::visible::visible(w))));
        }
        if self.env.len() > 1024
            || self
                .env
                .iter()
                .any(|n| n.is_empty() || n.as_bytes()[0].is_ascii_digit() || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        {
            return Err(Invalid::new("invalid --container-env: variable names, at most 1024"));
        }
        if self.volumes.len() > MAX_VOLUMES {
            return Err(Invalid::new(format!("at most {MAX_VOLUMES} volumes")));
        }
        let mut bytes = 0;
        for v in &self.volumes {
            clean_path(&v.dst, "the volume's path", &v.dst)?;
            if v.dst.contains([',', ':']) {
                return Err(Invalid::new(format!("invalid volume path {:?}: a path with ',' or ':'", crate::visible::visible(&v.dst))));
            }
            if v.file && v.files.len() != 1 {
                return Err(Invalid::new("a volume mounted as one file holds one file"));
            }
            if v.scratch && (v.file || !v.files.is_empty()) {
                return Err(Invalid::new("a scratch volume is an empty directory"));
            }
            for f in &v.files {
                if !volume_file_name_ok(&f.name) {
                    return Err(Invalid::new(format!(
                        "invalid volume file name {:?}: letters, digits, '.', '_' and '-', not . or ..",
                        crate::visible::visible(&f.name)
                    )));
                }
                if f.mode > 0o777 {
                    return Err(Invalid::new(format!("invalid mode {:o} of volume file {}: at most 0777", f.mode, f.name)));
                }
                if !f.base64.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')) {
                    return Err(Invalid::new(format!("volume file {}: its contents are not base64", f.name)));
                }
                bytes += f.base64.len() + f.name.len() + 256;
            }
            let mut names: Vec<&str> = v.files.iter().map(|f| f.name.as_str()).collect();
            names.sort_unstable();
            if names.windows(2).any(|w| w[0] == w[1]) {
                return Err(Invalid::new(format!("volume {}: two files of one name", v.dst)));
            }
        }
        if self.volumes.iter().map(|v| v.files.len()).sum::<usize>() > MAX_VOLUME_FILES {
            return Err(Invalid::new(format!("volumes hold at most {MAX_VOLUME_FILES} files together")));
        }
        if bytes > MAX_VOLUME_BYTES {
            return Err(Invalid::new(format!("volumes hold at most {MAX_VOLUME_BYTES} bytes (base64) together")));
        }
        Ok(())
    }

    /// Takes relative mount sources from `cwd` (the submitting command's directory).
    pub fn resolve(&mut self, cwd: &str) {
        for m in &mut self.mounts {
            if !m.src.starts_with('/') {
                m.src = format!("{}/{}", cwd.trim_end_matches('/'), m.src);
            }
        }
    }
}

/// Pyxis's options, as `srun`, `salloc` and `sbatch` take them.
pub const CONTAINER_OPTS: &[crate::getopt::Opt] = {
    use crate::getopt::{Arg, Opt};
    &[
        Opt::long("container-image", Arg::Required),
        Opt::long("container-mounts", Arg::Required),
        Opt::long("container-workdir", Arg::Required),
        Opt::long("container-env", Arg::Required),
        Opt::long("container-name", Arg::Required),
        Opt::long("container-mount-home", Arg::None),
        Opt::long("no-container-mount-home", Arg::None),
        Opt::long("container-remap-root", Arg::None),
        Opt::long("no-container-remap-root", Arg::None),
        Opt::long("container-writable", Arg::None),
        Opt::long("container-readonly", Arg::None),
        Opt::long("no-container-entrypoint", Arg::None),
        Opt::long("container-entrypoint", Arg::None).refused("--container-entrypoint: the image's entrypoint is not run; give the command"),
        Opt::long("container-save", Arg::Required).refused("--container-save: saving a container as an image is not available"),
    ]
};

/// The container options given, read into `c` (created at the first). `key` is the option's
/// long name, `value` its value. Returns whether `key` was one of [`CONTAINER_OPTS`].
pub fn read_option(c: &mut Option<Container>, key: &str, value: Option<&str>) -> Result<bool, Invalid> {
    let v = value.unwrap_or("");
    if !CONTAINER_OPTS.iter().any(|o| o.long == key) {
        return Ok(false);
    }
    let c = c.get_or_insert_with(Container::default);
    match key {
        "container-image" => {
            ImageRef::parse(v)?;
            c.image = v.to_string();
        }
        "container-mounts" => {
            let m = parse_mounts(v)?;
            c.mounts.extend(m);
        }
        "container-workdir" => {
            if !v.starts_with('/') || v.bytes().any(|b| b.is_ascii_control()) || v.len() > 4096 {
                return Err(Invalid::new(format!("invalid --container-workdir {:?}: an absolute path", crate::visible::visible(v))));
            }
            c.workdir = Some(v.to_string());
        }
        "container-env" => {
            for name in v.split(',').filter(|n| !n.is_empty()) {
                if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') || name.as_bytes()[0].is_ascii_digit() {
                    return Err(Invalid::new(format!(
                        "invalid --container-env {:?}: variable names, comma-separated",
                        crate::visible::visible(v)
                    )));
                }
                c.env.push(name.to_string());
            }
        }
        "container-name" => {
            let name = v.split(':').next().unwrap_or("");
            if name.is_empty()
                || name.len() > 128
                || name == "."
                || name == ".."
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            {
                return Err(Invalid::new(format!(
                    "invalid --container-name {:?}: letters, digits, '.', '_' and '-', at most 128",
                    crate::visible::visible(v)
                )));
            }
            c.name = Some(name.to_string());
        }
        "container-mount-home" => c.mount_home = true,
        "no-container-mount-home" => c.mount_home = false,
        "container-remap-root" => c.remap_root = true,
        "no-container-remap-root" => c.remap_root = false,
        "container-writable" => c.writable = true,
        "container-readonly" => c.writable = false,
        _ => {}
    }
    Ok(true)
}

/// Checks a finished set of container options: the other options need an image.
pub fn finish(c: Option<Container>) -> Result<Option<Container>, Invalid> {
    match c {
        Some(c) if c.image.is_empty() => Err(Invalid::new("the --container-* options need --container-image")),
        c => Ok(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(r: &str) -> (Option<String>, String, String, Option<String>, Option<String>) {
        match ImageRef::parse(r).unwrap() {
            ImageRef::Registry { user, registry, repository, tag, digest } => (user, registry, repository, tag, digest),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn enroot_and_docker_forms_name_the_same_image() {
        let want = (None, "127.0.0.1:5000".to_string(), "bars/busybox".to_string(), Some("1".to_string()), None);
        assert_eq!(reg("127.0.0.1:5000#bars/busybox:1"), want);
        assert_eq!(reg("127.0.0.1:5000/bars/busybox:1"), want);
        assert_eq!(reg("nvcr.io#nvidia/pytorch:24.05-py3").1, "nvcr.io");
        assert_eq!(reg("nvcr.io/nvidia/pytorch:24.05-py3").2, "nvidia/pytorch");
        assert_eq!(reg("localhost/x").1, "localhost");
        assert_eq!(reg("localhost:5000#x").1, "localhost:5000");
        // Docker Hub: library/ for one word, latest by default.
        assert_eq!(reg("ubuntu"), (None, DEFAULT_REGISTRY.into(), "library/ubuntu".into(), Some("latest".into()), None));
        assert_eq!(reg("nvidia/cuda:12.4.0-base").2, "nvidia/cuda");
        assert_eq!(reg("alice@nvcr.io#nvidia/pytorch").0.as_deref(), Some("alice"));
        let d = format!("sha256:{}", "a".repeat(64));
        let (_, _, repo, tag, digest) = reg(&format!("127.0.0.1:5000#bars/busybox@{d}"));
        assert_eq!((repo.as_str(), tag, digest), ("bars/busybox", None, Some(d.clone())));
        assert_eq!(
            ImageRef::parse(&format!("alice@127.0.0.1:5000#bars/busybox:1@{d}")).unwrap().canonical(),
            format!("127.0.0.1:5000/bars/busybox:1@{d}")
        );
    }

    #[test]
    fn local_layouts() {
        assert_eq!(ImageRef::parse("oci:/srv/img:v1").unwrap(), ImageRef::Layout { dir: "/srv/img".into(), tag: Some("v1".into()) });
        assert_eq!(ImageRef::parse("oci:/srv/img").unwrap(), ImageRef::Layout { dir: "/srv/img".into(), tag: None });
        assert!(ImageRef::parse("oci:rel/img").is_err());
        assert!(ImageRef::parse("oci:/a/../etc").is_err());
    }

    #[test]
    fn malformed_and_hostile_references_are_refused_with_the_reason() {
        for (r, why) in [
            ("", "empty"),
            ("UPPER/case", "component"),
            ("a b", "space"),
            ("x\u{1b}[31m", "control"),
            ("reg#", "no image name"),
            ("bad host!#x", "space"),
            ("h:99999#x", "not a registry"),
            ("a#b#c", "only one #"),
            ("img:bad tag", "space"),
            ("img:-x", "not a valid tag"),
            ("img@sha256:xyz", "digest"),
            ("a..b", "component"),
            ("bad user@x", "space"),
            ("x/", "component"),
            ("/x", "component"),
        ] {
            let e = ImageRef::parse(r).unwrap_err().0;
            assert!(e.contains(why), "{r:?}: {e}");
            assert!(!e.contains('\u{1b}'), "{e}");
        }
        assert!(ImageRef::parse(&"a".repeat(2000)).unwrap_err().0.contains("longer"));
    }

    #[test]
    fn mounts() {
        let mut c =
            Container { image: "x".into(), mounts: parse_mounts("/data:/data:ro,rel:/in,/scratch").unwrap(), ..Container::default() };
        c.resolve("/home/a");
        let m = c.mounts;
        assert_eq!(
            m,
            vec![
                Mount { src: "/data".into(), dst: "/data".into(), readonly: true },
                Mount { src: "/home/a/rel".into(), dst: "/in".into(), readonly: false },
                Mount { src: "/scratch".into(), dst: "/scratch".into(), readonly: false },
            ]
        );
        assert!(parse_mounts("/a:/b:ro+rprivate").unwrap()[0].readonly);
        for bad in ["/a:rel", "/a:/b:exec", "/a:/b:ro:x", "/a/../etc:/x", "/a:/\u{7}"] {
            assert!(parse_mounts(bad).is_err(), "{bad}");
        }
        let many = vec!["/a:/b"; MAX_MOUNTS + 1].join(",");
        assert!(parse_mounts(&many).is_err());
    }

    #[test]
    fn options_need_an_image() {
        let mut c = None;
        assert!(read_option(&mut c, "container-mounts", Some("/a:/b")).unwrap());
        assert!(finish(c.clone()).unwrap_err().0.contains("--container-image"));
        read_option(&mut c, "container-image", Some("busybox")).unwrap();
        read_option(&mut c, "container-remap-root", None).unwrap();
        read_option(&mut c, "container-name", Some("mine:exec")).unwrap();
        let c = finish(c).unwrap().unwrap();
        assert!(c.remap_root);
        assert_eq!(c.name.as_deref(), Some("mine"));
        let mut c = None;
        assert!(read_option(&mut c, "container-name", Some("../x")).is_err());
        assert!(read_option(&mut c, "container-env", Some("A,1B")).is_err());
        assert!(!read_option(&mut c, "nodes", Some("1")).unwrap());
    }

    #[test]
    fn options_from_the_api_are_checked_as_the_parser_would() {
        let ok = Container { image: "reg:5000#a/b:1".into(), name: Some("keep.1".into()), ..Container::default() };
        assert!(ok.check().is_ok());
        for name in ["x/l", "..", ".", "", "a b", "x\n"] {
            let c = Container { name: Some(name.into()), ..ok.clone() };
            assert!(c.check().is_err(), "{name:?}");
        }
        let bad_image = Container { image: "../x".into(), ..ok.clone() };
        assert!(bad_image.check().is_err());
        for (src, dst) in [("/a/../etc", "/x"), ("rel", "/x"), ("/a", "/x/../../etc"), ("/a", "/x:y"), ("/a\n", "/x")] {
            let c = Container { mounts: vec![Mount { src: src.into(), dst: dst.into(), readonly: false }], ..ok.clone() };
            assert!(c.check().is_err(), "{src} {dst}");
        }
        let c = Container { workdir: Some("rel".into()), ..ok.clone() };
        assert!(c.check().is_err());
        let c = Container { env: vec!["1X".into()], ..ok.clone() };
        assert!(c.check().is_err());
        // Volumes (Tandem's own): absolute clean paths, plain file names, modes, base64, sizes.
        let file = |name: &str, base64: &str, mode: u32| VolumeFile { name: name.into(), base64: base64.into(), mode };
        let vol = |dst: &str, files: Vec<VolumeFile>, one: bool| Container {
            volumes: vec![Volume { dst: dst.into(), files, file: one, scratch: false }],
            ..ok.clone()
        };
        let scratch = |files: Vec<VolumeFile>| Container {
            volumes: vec![Volume { dst: "/tmp".into(), files, file: false, scratch: true }],
            ..ok.clone()
        };
        assert!(scratch(vec![]).check().is_ok());
        assert!(scratch(vec![file("a", "", 0o644)]).check().is_err());
        assert!(vol("/etc/cfg", vec![file("app.conf", "bW9kZT0x", 0o644), file("b", "", 0o400)], false).check().is_ok());
        assert!(vol("/etc/app.conf", vec![file("app.conf", "eA==", 0o644)], true).check().is_ok());
        for bad in [
            vol("rel", vec![], false),
            vol("/a/../etc", vec![], false),
            vol("/a:b", vec![], false),
            vol("/x", vec![file("../x", "", 0o644)], false),
            vol("/x", vec![file("a/b", "", 0o644)], false),
            vol("/x", vec![file("..", "", 0o644)], false),
            vol("/x", vec![file("a", "not base64!", 0o644)], false),
            vol("/x", vec![file("a", "", 0o4755)], false),
            vol("/x", vec![file("a", "", 0o644), file("a", "", 0o644)], false),
            vol("/x", vec![file("a", "", 0o644), file("b", "", 0o644)], true),
            vol("/x", vec![file("a", &"A".repeat(MAX_VOLUME_BYTES + 1), 0o644)], false),
            vol("/x", (0..=MAX_VOLUME_FILES).map(|i| file(&i.to_string(), "", 0o644)).collect(), false),
        ] {
            assert!(bad.check().is_err(), "{:?}", bad.volumes);
        }
    }
}
