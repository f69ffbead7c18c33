//! The controller's private state on disk (SECURITY.md, "State"): the data directory is the
//! controller user's, mode 0711 (others may reach the Unix socket in it, not list it); every
//! file in it but the socket is 0600: the database with its WAL and SHM, the cluster secret, the
//! token key, the CA's key, the address file (the CA's certificate, `ca.pem`, is public: 0644). Checked at each start: a directory or file of another owner, or one others may
//! write, is refused; one others may only read is narrowed, with a warning.

use anyhow::{Context, Result, bail};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The data directory's mode.
pub(crate) const DIR_MODE: u32 = 0o711;

/// The files in the data directory that must be private, if they exist.
pub(crate) const FILES: [&str; 7] = ["state.db", "state.db-wal", "state.db-shm", "nodes.key", "jwt.key", "ca.key", "addr"];

/// What an older version kept in the data directory and this one removes at start: the shared
/// cluster secret that every agent held (nodes now join with single-use tokens, SECURITY.md N1).
pub(crate) const LEGACY: [&str; 1] = ["secret"];

/// Creates the data directory (0711) or checks an existing one: owned by this process's user
/// and not writable by anyone else; then narrows every private file in it to 0600.
pub(crate) fn prepare_dir(dir: &Path) -> Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))?;
        }
        Err(e) => return Err(e).with_context(|| format!("checking {}", dir.display())),
        Ok(m) => {
            if !m.is_dir() {
                bail!("{} is not a directory (a symbolic link is not accepted as the data directory)", dir.display());
            }
            check_owner(dir, &m)?;
            if m.mode() & 0o022 != 0 {
                bail!(
                    "{} is writable by other users (mode {:o}): refusing to keep the cluster's state there",
                    dir.display(),
                    m.mode() & 0o7777
                );
            }
            if m.mode() & 0o7777 != DIR_MODE {
                tracing::warn!("{} had mode {:o}; now {DIR_MODE:o}", dir.display(), m.mode() & 0o7777);
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))?;
            }
        }
    }
    for name in FILES {
        let path = dir.join(name);
        let Ok(m) = std::fs::symlink_metadata(&path) else { continue };
        if !m.is_file() {
            bail!("{} is not a regular file", path.display());
        }
        check_owner(&path, &m)?;
        if m.mode() & 0o077 != 0 {
            tracing::warn!("{} had mode {:o}; now 600", path.display(), m.mode() & 0o7777);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

fn check_owner(path: &Path, m: &std::fs::Metadata) -> Result<()> {
    let me = nix::unistd::geteuid().as_raw();
    if m.uid() != me {
        bail!("{} belongs to uid {}, not to this process's uid {me}: refusing to use it", path.display(), m.uid());
    }
    Ok(())
}

/// The key in `path` (made of 32 random bytes, written hex, the first time).
pub(crate) fn key(path: &Path) -> Result<String> {
    if let Some(k) = std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| s.len() >= 32) {
        return Ok(k);
    }
    let k = random_hex(32)?;
    write(path, &k)?;
    Ok(k)
}

/// `n` random bytes from the kernel, in hex.
pub(crate) fn random_hex(n: usize) -> Result<String> {
    let mut buf = vec![0u8; n];
    use std::io::Read;
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)).context("reading /dev/urandom")?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `text` to `path` as a fresh 0600 file (an existing one is replaced; never written
/// through a link).
pub(crate) fn write(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("new");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn wide_modes_are_narrowed_and_writable_directories_refused() {
        let d = std::env::temp_dir().join(format!("tandem-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        prepare_dir(&d).unwrap();
        assert_eq!(mode(&d), 0o711);
        std::fs::write(d.join("state.db"), "x").unwrap();
        std::fs::set_permissions(d.join("state.db"), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare_dir(&d).unwrap();
        assert_eq!((mode(&d), mode(&d.join("state.db"))), (0o711, 0o600));
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare_dir(&d).unwrap_err().to_string();
        assert!(e.contains("writable by other users"), "{e}");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        write(&d.join("secret"), "s").unwrap();
        assert_eq!((mode(&d.join("secret")), std::fs::read_to_string(d.join("secret")).unwrap().as_str()), (0o600, "s"));
        // A link in place of the directory is refused.
        let link = d.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(prepare_dir(&link).unwrap_err().to_string().contains("not a directory"));
        std::fs::remove_file(link).ok();
        std::fs::remove_dir_all(d).ok();
    }
}
