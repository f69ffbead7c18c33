//! Whether a site's program or script may be run with root's (or a daemon's) rights: only
//! root or that daemon's own user may be able to change it, nor any directory above it.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// `path` if root or `trusted` (a daemon's own uid) alone controls it: an absolute path to a
/// regular file (executable too, when `executable`), owned by one of them, with no write bit
/// for its group or others, and every directory above it (once links are resolved) likewise,
/// or sticky and theirs. Returns the resolved path, which is what to run or read, so nothing
/// can be swapped between the check and the use. The error says why, naming the path.
pub fn trusted_file(path: &str, trusted: u32, executable: bool) -> Result<PathBuf, String> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(format!("{path} is not an absolute path"));
    }
    let ok = |uid: u32| uid == 0 || uid == trusted;
    let real = std::fs::canonicalize(p).map_err(|e| format!("{path}: {e}"))?;
    let m = std::fs::metadata(&real).map_err(|e| format!("{path}: {e}"))?;
    if !m.is_file() {
        return Err(format!("{path} is not a regular file"));
    }
    if executable && m.permissions().mode() & 0o111 == 0 {
        return Err(format!("{path} is not executable"));
    }
    if !ok(m.uid()) {
        return Err(format!("{path} is owned by uid {}, not root: refused", m.uid()));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!("{path} is writable by its group or others (mode {:o}): refused", m.mode() & 0o7777));
    }
    for dir in real.ancestors().skip(1) {
        let d = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if !ok(d.uid()) || (d.mode() & 0o022 != 0 && d.mode() & 0o1000 == 0) {
            return Err(format!("{path} is under {}, which others may change: refused", dir.display()));
        }
    }
    Ok(real)
}
