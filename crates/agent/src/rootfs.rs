//! The root filesystem a container task runs on, built inside the user and mount namespaces
//! that `unshare` made for it (`tandem __container-root`): the node's unpacked image is shared
//! by every user and job and is root's, so it is never written, not even to make the mount
//! points a task's `--container-mounts` need. Instead the root is a small tmpfs of the task's
//! own holding, for each entry of the image's top directory, a bind mount of it (or a copy of
//! a symbolic link); where a mount destination needs a directory the image lacks, each image
//! directory on its way is replaced the same way, one level at a time, by a tmpfs of binds of
//! its entries, and the missing directory is made there. Every mount stays in the task's mount
//! namespace (`unshare` makes its mounts private) and goes with it.

use anyhow::{Context, Result, anyhow};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

fn tmpfs(at: &Path) -> Result<()> {
    mount(Some("tmpfs"), at, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some("mode=0755,size=4m"))
        .with_context(|| format!("mounting a tmpfs at {}", at.display()))
}

fn bind(src: &Path, dst: &Path) -> Result<()> {
    mount(Some(src), dst, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)
        .with_context(|| format!("binding {} at {}", src.display(), dst.display()))
}

/// Fills the (empty, tmpfs) directory `dst` with `src`'s entries: directories and files bound,
/// links copied; other kinds (sockets, fifos) left out.
fn farm(src: &Path, dst: &Path) -> Result<()> {
    for e in std::fs::read_dir(src).with_context(|| format!("reading {}", src.display()))? {
        let e = e?;
        let (from, to) = (e.path(), dst.join(e.file_name()));
        let ft = e.file_type()?;
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from)?, &to)?;
        } else if ft.is_dir() {
            std::fs::create_dir(&to)?;
            bind(&from, &to)?;
        } else if ft.is_file() {
            std::fs::File::create(&to)?;
            bind(&from, &to)?;
        }
    }
    Ok(())
}

/// Builds the root at `root` (an empty directory) from the image at `image`, with a mount
/// point for each of `dests` (a destination and whether its source is a file).
pub(crate) fn build(image: &Path, root: &Path, dests: &[(PathBuf, bool)]) -> Result<()> {
    tmpfs(root)?;
    farm(image, root)?;
    let mut own: HashSet<PathBuf> = HashSet::from([root.to_path_buf()]);
    for (d, file) in dests {
        make_point(image, root, d, *file, &mut own).with_context(|| format!("the mount destination {}", d.display()))?;
    }
    Ok(())
}

/// Makes `dest` exist under `root`; `own`: the directories that are the task's own (tmpfs).
fn make_point(image: &Path, root: &Path, dest: &Path, file: bool, own: &mut HashSet<PathBuf>) -> Result<()> {
    let parts: Vec<_> = dest.components().filter(|c| !matches!(c, Component::RootDir | Component::CurDir)).collect();
    if parts.iter().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(anyhow!("must be an absolute path without \"..\""));
    }
    let (mut at, mut src) = (root.to_path_buf(), image.to_path_buf());
    for (i, c) in parts.iter().enumerate() {
        let (next, next_src) = (at.join(c), src.join(c));
        let last = i + 1 == parts.len();
        match std::fs::symlink_metadata(&next) {
            Err(_) => {
                // `at` is the task's own: the missing piece is made there.
                if last && file {
                    std::fs::File::create(&next)?;
                } else {
                    std::fs::create_dir(&next)?;
                    own.insert(next.clone());
                }
            }
            Ok(m) if m.file_type().is_symlink() => return Err(anyhow!("{} is a symbolic link in the image", next.display())),
            Ok(m) if !last && !m.is_dir() => return Err(anyhow!("{} is not a directory in the image", next.display())),
            Ok(_) if !last && !own.contains(&next) => {
                // An image directory on the way: made the task's own, one level down.
                umount2(&next, MntFlags::MNT_DETACH).with_context(|| format!("unmounting {}", next.display()))?;
                tmpfs(&next)?;
                farm(&next_src, &next)?;
                own.insert(next.clone());
            }
            Ok(_) => {}
        }
        at = next;
        src = next_src;
    }
    Ok(())
}
