//! OCI images on a node: pulls from a registry by the OCI distribution protocol (`oci-client`),
//! the node's content-addressed layer cache (`DIR/blobs/sha256/HEX`, each blob checked against
//! its digest before it is kept and again before it is unpacked: a corrupted blob is fetched
//! again), the unpacked root filesystems (`DIR/rootfs/ID`, shared by every job and user of the
//! node, read-only to them), and the OCI runtime spec a container task runs under ([`spec`]).
//!
//! Each pull asks the registry for the image's manifest with the credentials of the user who
//! runs it, so a private image already in the cache runs only for users the registry lets read
//! it. Layers and root filesystems are made once however many tasks ask at the same moment (one
//! lock per blob and per image), in a temporary directory first, renamed into place when whole:
//! nothing half-made is ever used, and a failed pull leaves nothing behind.
//!
//! What an unpacked image may not do to the node: its files are unpacked as root's, without
//! set-user-id, set-group-id or sticky-free writable modes made special (the set-id bits are
//! dropped), without device nodes (skipped), and never outside its directory (the `tar` crate's
//! checks: no `..`, no absolute names, no writing through a link).

pub mod cdi;
pub mod spec;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};
use slurmcli::ImageRef;
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Why an image could not be made ready, in words for the user (`scontrol show job`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The registry refused or failed.
    #[error("pulling {image}: {why}")]
    Registry {
        /// The image, canonical.
        image: String,
        /// The registry's answer.
        why: String,
    },
    /// A blob whose content is not its digest.
    #[error("pulling {image}: layer {digest} does not match its digest (got {got})")]
    Digest {
        /// The image.
        image: String,
        /// The digest the manifest names.
        digest: String,
        /// What the bytes hash to.
        got: String,
    },
    /// A layer that cannot be unpacked.
    #[error("unpacking {image}: layer {digest}: {why}")]
    Unpack {
        /// The image.
        image: String,
        /// The layer.
        digest: String,
        /// Why.
        why: String,
    },
    /// Not available (yet) for this kind of reference.
    #[error("{0}")]
    Unsupported(String),
    /// The node's cache itself.
    #[error("the node's image cache {path}: {why}")]
    Cache {
        /// Where.
        path: PathBuf,
        /// Why.
        why: std::io::Error,
    },
}

fn cache_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |why| Error::Cache { path: path.to_path_buf(), why }
}

/// How the node reaches registries (`[containers]` of tandem.toml, or the agent's options).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Registries (`host:port`) spoken to in plain HTTP; every other one by HTTPS.
    pub insecure: Vec<String>,
    /// Extra trusted CA certificates (PEM), beside the system's.
    pub ca_pem: Vec<Vec<u8>>,
    /// The cache's bound, bytes (unpacked images and blobs together; 0: none): past it the
    /// least recently used images that no task runs are removed ([`Store::trim`]).
    pub max_bytes: u64,
}

/// A user's credentials for one registry, read on the node by a process running as the user
/// (never sent to the controller, never stored).
#[derive(Clone, Default)]
pub struct Credentials {
    /// Login.
    pub user: String,
    /// Password or token.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, ***)", self.user)
    }
}

/// An image ready to run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ready {
    /// Its unpacked root filesystem (read-only to users).
    pub rootfs: PathBuf,
    /// The manifest's digest.
    pub digest: String,
    /// The image's environment (`KEY=VALUE`).
    #[serde(default)]
    pub env: Vec<String>,
    /// The image's working directory.
    #[serde(default)]
    pub workdir: Option<String>,
    /// The blobs it was made from (layers and configuration).
    #[serde(default)]
    pub blobs: Vec<String>,
    /// Bytes of its unpacked files.
    #[serde(default)]
    pub bytes: u64,
}

/// The node's image cache.
pub struct Store {
    root: PathBuf,
    settings: Settings,
    /// One lock per blob digest and per image being unpacked.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Pulls hold it shared, a trim alone.
    trimming: tokio::sync::RwLock<()>,
}

/// Mount points every root filesystem gets when unpacked (a container's root is read-only and
/// not the user's, so they cannot be made later).
pub const MOUNT_POINTS: &[&str] = &["proc", "dev", "sys", "tmp", "run", "etc", "home", "mnt", "root"];

/// The largest image configuration taken (a JSON document: real ones are kilobytes).
const MAX_CONFIG: u64 = 4 << 20;

/// A local layout's blobs must come at least this fast (bytes a second) after a grace of
/// [`LOCAL_GRACE`]: the node's other pulls of them wait meanwhile.
const LOCAL_RATE: u64 = 8 << 20;
const LOCAL_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// The OCI digest (`sha256:HEX`) of some bytes.
pub fn digest_of(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

fn hex_of(digest: &str) -> Option<&str> {
    digest.strip_prefix("sha256:").filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("sha256:{:x}", h.finalize()))
}

fn fresh_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{}-{t}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

impl Store {
    /// Opens (creating) the cache at `root`: `blobs` (root's alone), `rootfs` (others may
    /// enter, not list), `tmp` (emptied: what a crash left half-made).
    pub fn open(root: &Path, settings: Settings) -> Result<Store, Error> {
        for (dir, mode) in [("", 0o711), ("blobs", 0o700), ("blobs/sha256", 0o700), ("rootfs", 0o700), ("tmp", 0o700)] {
            let p = root.join(dir);
            std::fs::create_dir_all(&p).map_err(cache_err(&p))?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).map_err(cache_err(&p))?;
        }
        let tmp = root.join("tmp");
        for e in std::fs::read_dir(&tmp).map_err(cache_err(&tmp))?.flatten() {
            let p = e.path();
            let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
        }
        Ok(Store { root: root.to_path_buf(), settings, locks: Mutex::new(HashMap::new()), trimming: tokio::sync::RwLock::new(()) })
    }

    fn lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.locks.lock().expect("locks");
        m.retain(|_, l| Arc::strong_count(l) > 1);
        m.entry(key.to_string()).or_default().clone()
    }

    fn client(&self) -> Client {
        let certs = self.settings.ca_pem.iter().map(|p| Certificate { encoding: CertificateEncoding::Pem, data: p.clone() }).collect();
        Client::new(ClientConfig {
            protocol: ClientProtocol::HttpsExcept(self.settings.insecure.clone()),
            extra_root_certificates: certs,
            connect_timeout: Some(std::time::Duration::from_secs(10)),
            read_timeout: Some(std::time::Duration::from_secs(60)),
            ..ClientConfig::default()
        })
    }

    /// The blob file of a digest.
    pub fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        Some(self.root.join("blobs/sha256").join(hex_of(digest)?))
    }

    /// Makes `image` ready to run for a user with `creds` (none: anonymous): asks the registry
    /// for its manifest (always: that is the user's right to it), fetches the layers the cache
    /// lacks, and unpacks the image once. `progress` hears each step, in words.
    pub async fn ensure(&self, image: &ImageRef, creds: Option<&Credentials>, progress: &(dyn Fn(String) + Sync)) -> Result<Ready, Error> {
        let _pulling = self.trimming.read().await;
        let name = image.canonical();
        let ImageRef::Registry { registry, repository, tag, digest, .. } = image else {
            return Err(Error::Unsupported(format!("{name}: a local layout is read by the user's own process (Store::ensure_local)")));
        };
        let reference = match (tag, digest) {
            (Some(t), Some(d)) => Reference::with_tag_and_digest(registry.clone(), repository.clone(), t.clone(), d.clone()),
            (None, Some(d)) => Reference::with_digest(registry.clone(), repository.clone(), d.clone()),
            (t, None) => Reference::with_tag(registry.clone(), repository.clone(), t.clone().unwrap_or_else(|| "latest".into())),
        };
        let auth = match creds {
            Some(c) => RegistryAuth::Basic(c.user.clone(), c.password.clone()),
            None => RegistryAuth::Anonymous,
        };
        // One client per pull: its token cache is this user's alone.
        let client = self.client();
        let reg_err = |e: oci_client::errors::OciDistributionError| Error::Registry { image: name.clone(), why: e.to_string() };
        progress(format!("pulling {name}: manifest"));
        // The manifest alone (one request, two for a manifest list): an image already
        // unpacked needs nothing more.
        let (manifest, mdigest) = client.pull_image_manifest(&reference, &auth).await.map_err(reg_err)?;
        let id = hex_of(&mdigest)
            .ok_or_else(|| Error::Registry { image: name.clone(), why: format!("manifest digest {mdigest:?}") })?
            .to_string();
        if let Some(r) = self.ready(&id) {
            return Ok(r);
        }
        let unpack_lock = self.lock(&format!("rootfs:{id}"));
        let _held = unpack_lock.lock().await;
        if let Some(r) = self.ready(&id) {
            return Ok(r);
        }
        let total = manifest.layers.len();
        for (i, layer) in manifest.layers.iter().enumerate() {
            progress(format!("pulling {name}: layer {}/{total} ({} bytes)", i + 1, layer.size));
            self.fetch(&client, &reference, &name, layer).await?;
        }
        self.fetch(&client, &reference, &name, &manifest.config).await?;
        self.unpack_manifest(&name, &id, &mdigest, &manifest, progress).await
    }

    /// Unpacks an image whose blobs the cache has (its manifest's digest `mdigest`, `id` its hex).
    async fn unpack_manifest(
        &self,
        name: &str,
        id: &str,
        mdigest: &str,
        manifest: &oci_client::manifest::OciImageManifest,
        progress: &(dyn Fn(String) + Sync),
    ) -> Result<Ready, Error> {
        let name = name.to_string();
        let cpath = self.blob_path(&manifest.config.digest).expect("checked by fetch");
        if std::fs::metadata(&cpath).map_err(cache_err(&cpath))?.len() > MAX_CONFIG {
            return Err(Error::Registry { image: name.clone(), why: format!("its configuration is larger than {MAX_CONFIG} bytes") });
        }
        let config = std::fs::read(&cpath).map_err(cache_err(&cpath))?;
        progress(format!("unpacking {name}"));
        let cfg: oci_spec::image::ImageConfiguration = serde_json::from_slice(&config).map_err(|e| Error::Registry {
            image: name.clone(),
            why: format!("its configuration is not an OCI image configuration: {e}"),
        })?;
        let env = cfg.config().as_ref().and_then(|c| c.env().clone()).unwrap_or_default();
        let workdir = cfg.config().as_ref().and_then(|c| c.working_dir().clone()).filter(|w| w.starts_with('/'));
        let layers: Vec<(String, String)> = manifest.layers.iter().map(|l| (l.digest.clone(), l.media_type.clone())).collect();
        let store_root = self.root.clone();
        let name2 = name.clone();
        let id2 = id.to_string();
        let mut blobs: Vec<String> = layers.iter().map(|(d, _)| d.clone()).collect();
        blobs.push(manifest.config.digest.clone());
        let ready = Ready { rootfs: self.root.join("rootfs").join(id), digest: mdigest.to_string(), env, workdir, blobs, bytes: 0 };
        let r2 = ready.clone();
        let mdigest = mdigest.to_string();
        let ready = tokio::task::spawn_blocking(move || unpack_all(&store_root, &name2, &id2, &layers, r2))
            .await
            .map_err(|e| Error::Unpack { image: name.clone(), digest: mdigest.clone(), why: e.to_string() })??;
        Ok(ready)
    }

    /// Makes an image of a local OCI layout (`oci:DIR`) ready. The node's agent cannot read
    /// the user's directory (it would read it as root), so the user's own process sends what
    /// the layout holds: `manifest`, the image manifest's bytes as stored there, then from
    /// `blobs` each layer's bytes in the manifest's order and the configuration's, each exactly
    /// its descriptor's size. Every blob is read and checked against its digest, even one the
    /// cache has: that is how the node knows the user holds the image (a manifest alone, whose
    /// image the cache may hold from a private registry, opens nothing).
    pub async fn ensure_local(
        &self,
        image: &ImageRef,
        manifest: &[u8],
        blobs: &mut (dyn tokio::io::AsyncRead + Unpin + Send),
        progress: &(dyn Fn(String) + Sync),
    ) -> Result<Ready, Error> {
        use sha2::Digest as _;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _pulling = self.trimming.read().await;
        let name = image.canonical();
        let bad = |why: String| Error::Registry { image: name.clone(), why };
        let mdigest = digest_of(manifest);
        let m: oci_client::manifest::OciImageManifest =
            serde_json::from_slice(manifest).map_err(|e| bad(format!("its manifest is not an OCI image manifest: {e}")))?;
        let id = hex_of(&mdigest).expect("made above").to_string();
        let unpack_lock = self.lock(&format!("rootfs:{id}"));
        let _held = unpack_lock.lock().await;
        let total = m.layers.len();
        for (i, d) in m.layers.iter().chain(std::iter::once(&m.config)).enumerate() {
            if i < total {
                progress(format!("reading {name}: layer {}/{total} ({} bytes)", i + 1, d.size));
            }
            let path = self.blob_path(&d.digest).ok_or_else(|| bad(format!("blob digest {:?}", d.digest)))?;
            let size = u64::try_from(d.size).map_err(|_| bad(format!("blob size {}", d.size)))?;
            let most = if i < total { self.settings.max_bytes } else { MAX_CONFIG };
            if most > 0 && size > most {
                return Err(bad(format!("its blob {} of {size} bytes is larger than this node takes ({most})", d.digest)));
            }
            // A sender that stalls gives up its turn: every pull of these blobs waits on it.
            let deadline = tokio::time::Instant::now() + LOCAL_GRACE + std::time::Duration::from_secs(size / LOCAL_RATE);
            let l = self.lock(&d.digest);
            let _blob = l.lock().await;
            // Kept only if the cache lacks it; read and checked either way.
            let keep = !path.exists();
            let tmp = self.root.join("tmp").join(fresh_name());
            let mut file = if keep { Some(tokio::fs::File::create(&tmp).await.map_err(cache_err(&tmp))?) } else { None };
            let mut hash = sha2::Sha256::new();
            let mut left = size;
            let mut buf = vec![0u8; 256 * 1024];
            let res: Result<(), Error> = async {
                while left > 0 {
                    let want = usize::try_from(left.min(buf.len() as u64)).expect("small");
                    let n = tokio::time::timeout_at(deadline, blobs.read(&mut buf[..want]))
                        .await
                        .map_err(|_| bad(format!("its blob {} came too slowly (under {} MiB/s)", d.digest, LOCAL_RATE >> 20)))?
                        .map_err(|e| bad(format!("reading its blob {}: {e}", d.digest)))?;
                    if n == 0 {
                        return Err(bad(format!("its blob {} ended {left} bytes short of its size", d.digest)));
                    }
                    hash.update(&buf[..n]);
                    if let Some(f) = file.as_mut() {
                        f.write_all(&buf[..n]).await.map_err(cache_err(&tmp))?;
                    }
                    left -= n as u64;
                }
                Ok(())
            }
            .await;
            let got = format!("sha256:{:x}", hash.finalize());
            let res = res.and_then(|()| {
                if got == d.digest {
                    Ok(())
                } else {
                    Err(Error::Digest { image: name.clone(), digest: d.digest.clone(), got: got.clone() })
                }
            });
            if let Err(e) = res {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
            if let Some(mut f) = file {
                f.flush().await.map_err(cache_err(&tmp))?;
                drop(f);
                std::fs::rename(&tmp, &path).map_err(cache_err(&path))?;
            }
        }
        if let Some(r) = self.ready(&id) {
            return Ok(r);
        }
        self.unpack_manifest(&name, &id, &mdigest, &m, progress).await
    }

    /// Keeps the cache under its bound ([`Settings::max_bytes`]): removes the least recently
    /// used images whose digest is not in `keep` (those that tasks run), then the blobs no
    /// image left needs. Returns the digests removed.
    pub async fn trim(&self, keep: &std::collections::HashSet<String>) -> Vec<String> {
        if self.settings.max_bytes == 0 {
            return Vec::new();
        }
        let _alone = self.trimming.write().await;
        let (root, max, keep) = (self.root.clone(), self.settings.max_bytes, keep.clone());
        tokio::task::spawn_blocking(move || trim_blocking(&root, max, &keep)).await.unwrap_or_default()
    }

    /// An image already unpacked (its record is written last).
    fn ready(&self, id: &str) -> Option<Ready> {
        let rec = self.root.join("rootfs").join(format!("{id}.json"));
        let r: Ready = serde_json::from_slice(&std::fs::read(&rec).ok()?).ok()?;
        // Used now: least recently used images go first when the cache is trimmed.
        let _ = std::fs::File::options().append(true).open(&rec).and_then(|f| f.set_modified(std::time::SystemTime::now()));
        r.rootfs.is_dir().then_some(r)
    }

    /// Fetches one layer into the cache unless a good copy is there.
    async fn fetch(
        &self,
        client: &Client,
        reference: &Reference,
        name: &str,
        layer: &oci_client::manifest::OciDescriptor,
    ) -> Result<(), Error> {
        let path = self
            .blob_path(&layer.digest)
            .ok_or_else(|| Error::Registry { image: name.into(), why: format!("layer digest {:?}", layer.digest) })?;
        let l = self.lock(&layer.digest);
        let _held = l.lock().await;
        if path.exists() {
            let p = path.clone();
            let got = tokio::task::spawn_blocking(move || sha256_file(&p)).await.ok().and_then(Result::ok);
            if got.as_deref() == Some(layer.digest.as_str()) {
                return Ok(());
            }
            // Corrupted (a disk error, a hand): fetched again.
            let _ = std::fs::remove_file(&path);
        }
        let tmp = self.root.join("tmp").join(fresh_name());
        let file = tokio::fs::File::create(&tmp).await.map_err(cache_err(&tmp))?;
        let res = client.pull_blob(reference, layer, file).await;
        if let Err(e) = res {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::Registry { image: name.into(), why: e.to_string() });
        }
        let t2 = tmp.clone();
        let got = tokio::task::spawn_blocking(move || sha256_file(&t2)).await.ok().and_then(Result::ok).unwrap_or_default();
        if got != layer.digest {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::Digest { image: name.into(), digest: layer.digest.clone(), got });
        }
        std::fs::rename(&tmp, &path).map_err(cache_err(&path))
    }
}

/// Bytes of the regular files under `dir` (not through links).
fn tree_bytes(dir: &Path) -> u64 {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => n += e.metadata().map(|m| m.len()).unwrap_or(0),
                _ => {}
            }
        }
    }
    n
}

/// [`Store::trim`]'s work on the files.
fn trim_blocking(root: &Path, max: u64, keep: &std::collections::HashSet<String>) -> Vec<String> {
    let mut images: Vec<(std::time::SystemTime, PathBuf, Ready)> = std::fs::read_dir(root.join("rootfs"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| {
            let r: Ready = serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
            Some((e.metadata().ok()?.modified().ok()?, e.path(), r))
        })
        .collect();
    images.sort_by_key(|(t, _, _)| *t);
    let blobs: HashMap<String, u64> = std::fs::read_dir(root.join("blobs/sha256"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((format!("sha256:{}", e.file_name().to_str()?), e.metadata().ok()?.len())))
        .collect();
    let mut total: u64 = images.iter().map(|(_, _, r)| r.bytes).sum::<u64>() + blobs.values().sum::<u64>();
    let mut removed = Vec::new();
    let mut left: Vec<&Ready> = images.iter().map(|(_, _, r)| r).collect();
    for (_, rec, r) in &images {
        if total <= max {
            break;
        }
        if keep.contains(&r.digest) {
            continue;
        }
        // The record first: from then on the image is not ready (a pull makes it again).
        if std::fs::remove_file(rec).is_err() {
            continue;
        }
        let gone = root.join("tmp").join(fresh_name());
        if std::fs::rename(&r.rootfs, &gone).is_ok() {
            let _ = std::fs::remove_dir_all(&gone);
        }
        total = total.saturating_sub(r.bytes);
        removed.push(r.digest.clone());
        left.retain(|x| x.digest != r.digest);
        let needed: std::collections::HashSet<&String> = left.iter().flat_map(|x| x.blobs.iter()).collect();
        for (d, size) in &blobs {
            if !needed.contains(d)
                && let Some(p) = root.join("blobs/sha256").join(hex_of(d).unwrap_or("-")).to_str().map(PathBuf::from)
                && std::fs::remove_file(&p).is_ok()
            {
                total = total.saturating_sub(*size);
            }
        }
    }
    removed
}

/// Unpacks `layers` in order into `tmp/…`, then renames it to `rootfs/ID` and writes its
/// record. A failure removes what was made.
fn unpack_all(root: &Path, name: &str, id: &str, layers: &[(String, String)], mut ready: Ready) -> Result<Ready, Error> {
    let tmp = root.join("tmp").join(format!("{}-rootfs", fresh_name()));
    let res = (|| {
        std::fs::create_dir(&tmp).map_err(cache_err(&tmp))?;
        for (digest, media) in layers {
            let blob = root.join("blobs/sha256").join(hex_of(digest).unwrap_or("-"));
            let err = |why: String| Error::Unpack { image: name.into(), digest: digest.clone(), why };
            // Checked again: the bytes unpacked are the bytes named.
            let got = sha256_file(&blob).map_err(|e| err(e.to_string()))?;
            if &got != digest {
                let _ = std::fs::remove_file(&blob);
                return Err(Error::Digest { image: name.into(), digest: digest.clone(), got });
            }
            apply_layer(&blob, media, &tmp).map_err(|e| err(e.to_string()))?;
        }
        for d in MOUNT_POINTS {
            let p = tmp.join(d);
            if std::fs::symlink_metadata(&p).is_err() {
                std::fs::create_dir(&p).map_err(cache_err(&p))?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).map_err(cache_err(&p))?;
            }
        }
        let t = tmp.join("tmp");
        if std::fs::symlink_metadata(&t).is_ok_and(|m| m.is_dir()) {
            let _ = std::fs::set_permissions(&t, std::fs::Permissions::from_mode(0o1777));
        }
        // Files the host provides, bound over at run time.
        for f in ["etc/hosts", "etc/resolv.conf", "etc/hostname"] {
            let p = tmp.join(f);
            if std::fs::symlink_metadata(&p).is_err() && std::fs::symlink_metadata(tmp.join("etc")).is_ok_and(|m| m.is_dir()) {
                std::fs::write(&p, b"").map_err(cache_err(&p))?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).map_err(cache_err(&p))?;
            }
        }
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).map_err(cache_err(&tmp))?;
        ready.bytes = tree_bytes(&tmp);
        let record = serde_json::to_vec(&ready).expect("serializable");
        let dst = root.join("rootfs").join(id);
        std::fs::rename(&tmp, &dst).map_err(cache_err(&dst))?;
        let rec = root.join("rootfs").join(format!("{id}.json"));
        let rec_tmp = root.join("tmp").join(fresh_name());
        std::fs::write(&rec_tmp, &record).map_err(cache_err(&rec_tmp))?;
        std::fs::rename(&rec_tmp, &rec).map_err(cache_err(&rec))
    })();
    if res.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    res.map(|()| ready)
}

/// Whether a whiteout: `.wh.NAME` removes NAME of the layers below; `.wh..wh..opq` empties
/// its directory of them.
fn whiteout(path: &Path) -> Option<(PathBuf, Option<String>)> {
    let file = path.file_name()?.to_str()?;
    let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
    if file == ".wh..wh..opq" {
        return Some((parent, None));
    }
    file.strip_prefix(".wh.").map(|n| (parent, Some(n.to_string())))
}

/// Whether a directory on the way to `rel` under `dst` is a symbolic link (made by an earlier
/// entry or layer): the entry would then be written, or a lower one removed, wherever the link
/// points, which may be the node's own files.
fn linked_parent(dst: &Path, rel: &Path) -> bool {
    let mut at = dst.to_path_buf();
    for c in rel.parent().into_iter().flat_map(Path::components) {
        at.push(c);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return true;
        }
    }
    false
}

fn through_link(path: &Path) -> std::io::Error {
    std::io::Error::other(format!("an entry goes through a symbolic link of the image: {}", path.display()))
}

fn safe_rel(p: &Path) -> bool {
    p.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir))
}

fn layer_reader(blob: &Path, media: &str) -> std::io::Result<Box<dyn Read>> {
    let f = std::io::BufReader::new(std::fs::File::open(blob)?);
    if media.ends_with("+zstd") || media.ends_with(".zstd") {
        return Err(std::io::Error::other(format!("zstd layers ({media}) are not supported: push the image with gzip layers")));
    }
    // gzip by its magic number whatever the media type says (Docker's types say gzip; some
    // registries serve plain tar).
    let mut head = [0u8; 2];
    let n = std::fs::File::open(blob)?.read(&mut head)?;
    if n == 2 && head == [0x1f, 0x8b] { Ok(Box::new(flate2::read::GzDecoder::new(f))) } else { Ok(Box::new(f)) }
}

/// Applies one layer: its whiteouts first (they remove what the layers below made), then its
/// entries.
fn apply_layer(blob: &Path, media: &str, dst: &Path) -> std::io::Result<()> {
    // Pass 1: whiteouts.
    let mut ar = tar::Archive::new(layer_reader(blob, media)?);
    for e in ar.entries()? {
        let e = e?;
        let path = e.path()?.into_owned();
        if !safe_rel(&path) {
            return Err(std::io::Error::other(format!("an entry outside the image: {}", path.display())));
        }
        let Some((dir, name)) = whiteout(&path) else { continue };
        if linked_parent(dst, &path) {
            return Err(through_link(&path));
        }
        let target = dst.join(&dir);
        // Never through a link: the directory must be a real one inside dst.
        if std::fs::symlink_metadata(&target).is_ok_and(|m| !m.is_dir()) {
            continue;
        }
        match name {
            None => {
                if let Ok(rd) = std::fs::read_dir(&target) {
                    for c in rd.flatten() {
                        remove_any(&c.path());
                    }
                }
            }
            Some(n) if n != "." && n != ".." && !n.contains('/') => remove_any(&target.join(n)),
            Some(_) => {}
        }
    }
    // Pass 2: entries.
    let mut ar = tar::Archive::new(layer_reader(blob, media)?);
    ar.set_preserve_permissions(true);
    ar.set_preserve_ownerships(false);
    ar.set_unpack_xattrs(false);
    ar.set_overwrite(true);
    // No set-user-id or set-group-id file on the node's disk.
    ar.set_mask(0o6000);
    for e in ar.entries()? {
        let mut e = e?;
        let path = e.path()?.into_owned();
        if whiteout(&path).is_some() {
            continue;
        }
        match e.header().entry_type() {
            // Device nodes are never made (a node is the host's, whoever reads it).
            tar::EntryType::Char | tar::EntryType::Block => continue,
            _ => {}
        }
        if linked_parent(dst, &path) {
            return Err(through_link(&path));
        }
        // A file replacing a directory of a lower layer, or the reverse.
        let target = dst.join(&path);
        if let Ok(m) = std::fs::symlink_metadata(&target) {
            let is_dir = e.header().entry_type() == tar::EntryType::Directory;
            if m.is_dir() != is_dir || m.file_type().is_symlink() {
                remove_any(&target);
            }
        }
        // Parents the layer does not list are made 0755 (not under the agent's umask).
        let mut at = dst.to_path_buf();
        if let Some(parent) = path.parent() {
            for c in parent.components() {
                at.push(c);
                if std::fs::symlink_metadata(&at).is_err() {
                    std::fs::create_dir(&at)?;
                    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o755))?;
                }
            }
        }
        e.unpack_in(dst)?;
    }
    Ok(())
}

fn remove_any(p: &Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(p);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(p);
        }
        Err(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(entries: &[(&str, Option<&[u8]>, u32)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data, mode) in entries {
            let mut h = tar::Header::new_gnu();
            match data {
                Some(d) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(d.len() as u64);
                    h.set_mode(*mode);
                    h.set_cksum();
                    b.append_data(&mut h, name, *d).unwrap();
                }
                None => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    h.set_mode(0o755);
                    h.set_cksum();
                    b.append_data(&mut h, name, &[][..]).unwrap();
                }
            }
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn layers_apply_in_order_with_whiteouts_and_lose_set_id_bits() {
        let d = std::env::temp_dir().join(format!("image-test-{}", fresh_name()));
        std::fs::create_dir_all(&d).unwrap();
        let l1 = d.join("l1");
        let l2 = d.join("l2");
        std::fs::write(
            &l1,
            layer(&[
                ("etc/", None, 0),
                ("etc/a", Some(b"1"), 0o644),
                ("bin/", None, 0),
                ("bin/su", Some(b"x"), 0o4755),
                ("opt/", None, 0),
                ("opt/old", Some(b"o"), 0o644),
            ]),
        )
        .unwrap();
        std::fs::write(
            &l2,
            layer(&[
                ("etc/.wh.a", Some(b""), 0o644),
                ("etc/b", Some(b"2"), 0o644),
                ("opt/.wh..wh..opq", Some(b""), 0o644),
                ("opt/new", Some(b"n"), 0o644),
            ]),
        )
        .unwrap();
        let root = d.join("root");
        std::fs::create_dir(&root).unwrap();
        apply_layer(&l1, "application/vnd.oci.image.layer.v1.tar", &root).unwrap();
        apply_layer(&l2, "application/vnd.oci.image.layer.v1.tar", &root).unwrap();
        assert!(!root.join("etc/a").exists());
        assert_eq!(std::fs::read(root.join("etc/b")).unwrap(), b"2");
        assert!(!root.join("opt/old").exists());
        assert!(root.join("opt/new").exists());
        let mode = std::fs::metadata(root.join("bin/su")).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o755, "{mode:o}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn entries_through_a_link_of_the_image_are_refused_and_touch_nothing_outside() {
        let d = std::env::temp_dir().join(format!("image-test-{}", fresh_name()));
        let outside = d.join("outside");
        std::fs::create_dir_all(outside.join("etc")).unwrap();
        std::fs::write(outside.join("etc/keep"), "x").unwrap();
        let dst = d.join("root");
        std::fs::create_dir_all(&dst).unwrap();
        // Layer 1: a link to the node's directory; layer 2 writes, replaces or whites out through it.
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        b.append_link(&mut h, "a", &outside).unwrap();
        let l1 = d.join("l1");
        std::fs::write(&l1, b.into_inner().unwrap()).unwrap();
        apply_layer(&l1, "tar", &dst).unwrap();
        for entries in [
            &[("a/etc", Some(&b"file"[..]), 0o644)][..],
            &[("a/etc/new", Some(&b"file"[..]), 0o644)][..],
            &[("a/etc/.wh.keep", Some(&b""[..]), 0o644)][..],
            &[("a/etc/.wh..wh..opq", Some(&b""[..]), 0o644)][..],
        ] {
            let l2 = d.join("l2");
            std::fs::write(&l2, layer(entries)).unwrap();
            let e = apply_layer(&l2, "tar", &dst).unwrap_err();
            assert!(e.to_string().contains("symbolic link"), "{e}");
            assert!(outside.join("etc/keep").exists() && !outside.join("etc/new").exists(), "{entries:?}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn entries_outside_the_image_are_refused() {
        let d = std::env::temp_dir().join(format!("image-test-{}", fresh_name()));
        std::fs::create_dir_all(d.join("root")).unwrap();
        // tar::Builder refuses to write "..", so the header is written by hand.
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..9].copy_from_slice(b"../escape");
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(1);
        h.set_mode(0o644);
        h.set_cksum();
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(b"x");
        bytes.resize(512 * 2, 0);
        bytes.extend_from_slice(&[0u8; 1024]);
        std::fs::write(d.join("l"), &bytes).unwrap();
        assert!(apply_layer(&d.join("l"), "tar", &d.join("root")).is_err());
        assert!(!d.join("escape").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_local_layout_is_checked_blob_by_blob_and_short_or_changed_blobs_leave_nothing() {
        let d = std::env::temp_dir().join(format!("image-test-{}", fresh_name()));
        let s = Store::open(&d, Settings::default()).unwrap();
        let lay = layer(&[("etc", None, 0), ("etc/os-release", Some(b"PRETTY_NAME=local\n"), 0o644)]);
        let cfg = br#"{"architecture":"amd64","os":"linux","config":{"Env":["A=1"]},"rootfs":{"type":"layers","diff_ids":[]}}"#.to_vec();
        let desc = |b: &[u8], t: &str| serde_json::json!({"mediaType": t, "digest": digest_of(b), "size": b.len()});
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": desc(&cfg, "application/vnd.oci.image.config.v1+json"),
            "layers": [desc(&lay, "application/vnd.oci.image.layer.v1.tar")],
        }))
        .unwrap();
        let image = ImageRef::parse("oci:/l:1").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let run = |stream: Vec<u8>| rt.block_on(s.ensure_local(&image, &manifest, &mut &stream[..], &|_| {}));
        // A changed layer; a short one: refused, nothing kept.
        let mut changed = lay.clone();
        changed[600] ^= 1;
        let e = run([changed, cfg.clone()].concat()).unwrap_err();
        assert!(matches!(e, Error::Digest { .. }), "{e}");
        let e = run(lay[..100].to_vec()).unwrap_err();
        assert!(e.to_string().contains("short"), "{e}");
        assert_eq!(std::fs::read_dir(d.join("tmp")).unwrap().count(), 0);
        assert!(!s.blob_path(&digest_of(&lay)).unwrap().exists());
        // Whole: unpacked, with the configuration's environment.
        let r = run([lay.clone(), cfg.clone()].concat()).unwrap();
        assert_eq!(r.digest, digest_of(&manifest));
        assert_eq!(std::fs::read_to_string(r.rootfs.join("etc/os-release")).unwrap(), "PRETTY_NAME=local\n");
        assert_eq!(r.env, vec!["A=1".to_string()]);
        // Cached now, but every blob must still come, and match.
        assert!(run(vec![]).is_err());
        assert!(run([lay, cfg].concat()).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_corrupted_blob_is_refused_and_nothing_is_left() {
        let d = std::env::temp_dir().join(format!("image-test-{}", fresh_name()));
        let s = Store::open(&d, Settings::default()).unwrap();
        let bytes = layer(&[("a", Some(b"1"), 0o644)]);
        let digest = format!("sha256:{:x}", Sha256::digest(&bytes));
        let blob = s.blob_path(&digest).unwrap();
        let mut bad = bytes.clone();
        bad[600] ^= 1;
        std::fs::write(&blob, &bad).unwrap();
        let ready = Ready {
            rootfs: d.join("rootfs/id"),
            digest: "sha256:id".into(),
            env: vec![],
            workdir: None,
            blobs: vec![digest.clone()],
            bytes: 0,
        };
        let e = unpack_all(&d, "x", "id", &[(digest.clone(), "tar".into())], ready.clone()).unwrap_err();
        assert!(matches!(e, Error::Digest { .. }), "{e}");
        assert!(!blob.exists(), "the bad blob is dropped, to be fetched again");
        assert_eq!(std::fs::read_dir(d.join("tmp")).unwrap().count(), 0);
        assert!(!d.join("rootfs/id").exists());
        std::fs::write(&blob, &bytes).unwrap();
        let r = unpack_all(&d, "x", "id", &[(digest, "tar".into())], ready).unwrap();
        assert!(d.join("rootfs/id/a").exists() && d.join("rootfs/id/proc").is_dir());
        assert!(r.bytes >= 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn trimming_removes_the_least_recently_used_image_no_task_runs_and_its_blobs() {
        let d = std::env::temp_dir().join(format!("image-test-{}", fresh_name()));
        let _ = Store::open(&d, Settings::default()).unwrap();
        let mut digests = Vec::new();
        // Three images of one 1,000-byte blob each (and one shared 10-byte blob), oldest first.
        let shared = format!("sha256:{}", "f".repeat(64));
        std::fs::write(d.join("blobs/sha256").join("f".repeat(64)), [0u8; 10]).unwrap();
        for (i, c) in ["a", "b", "c"].iter().enumerate() {
            let id = c.repeat(64);
            let blob = format!("sha256:{}", c.repeat(64));
            std::fs::write(d.join("blobs/sha256").join(&id), vec![0u8; 1000]).unwrap();
            std::fs::create_dir_all(d.join("rootfs").join(&id)).unwrap();
            let r = Ready {
                rootfs: d.join("rootfs").join(&id),
                digest: format!("sha256:{id}"),
                env: vec![],
                workdir: None,
                blobs: vec![blob, shared.clone()],
                bytes: 500,
            };
            let rec = d.join("rootfs").join(format!("{id}.json"));
            std::fs::write(&rec, serde_json::to_vec(&r).unwrap()).unwrap();
            let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000 + i as u64);
            std::fs::File::options().append(true).open(&rec).unwrap().set_modified(t).unwrap();
            digests.push(r.digest);
        }
        // 3 x 1,500 + 10 bytes; a bound of 2,000 needs two images out; the oldest runs.
        let keep = std::collections::HashSet::from([digests[0].clone()]);
        let removed = trim_blocking(&d, 2000, &keep);
        assert_eq!(removed, vec![digests[1].clone(), digests[2].clone()]);
        assert!(d.join("rootfs").join("a".repeat(64)).is_dir() && !d.join("rootfs").join("b".repeat(64)).exists());
        assert!(!d.join("blobs/sha256").join("b".repeat(64)).exists() && d.join("blobs/sha256").join("f".repeat(64)).exists());
        // Under the bound: nothing more.
        assert!(trim_blocking(&d, 2000, &std::collections::HashSet::new()).is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
