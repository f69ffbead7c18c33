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

/// Binds `src` at `dst`, read-only: the node's unpacked image is shared by every user and job,
/// and a read-only root (runc remounts `/` alone) would leave the binds under it writable
/// wherever the image lets anyone write (its `/tmp`, a world-writable file).
fn bind(src: &Path, dst: &Path) -> Result<()> {
    use nix::sys::statvfs::{FsFlags, statvfs};
    mount(Some(src), dst, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)
        .with_context(|| format!("binding {} at {}", src.display(), dst.display()))?;
    // A remount in a user namespace must keep the flags the mount was made with.
    let have = statvfs(dst).with_context(|| format!("reading {}'s mount flags", dst.display()))?.flags();
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    for (f, m) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if have.contains(f) {
            flags |= m;
        }
    }
    mount(None::<&str>, dst, None::<&str>, flags, None::<&str>).with_context(|| format!("making {} read-only", dst.display()))
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
    // The image's /tmp and /var/tmp, the container's own (an empty tmpfs each, writable by all
    // as a /tmp is): the image's are the node's shared copy.
    for t in ["tmp", "var/tmp"] {
        let in_image = std::fs::symlink_metadata(image.join(t)).is_ok_and(|m| m.is_dir());
        if in_image {
            make_point(image, root, &Path::new("/").join(t), false, &mut own)?;
            let at = root.join(t);
            umount2(&at, MntFlags::MNT_DETACH).with_context(|| format!("unmounting {}", at.display()))?;
            mount(Some("tmpfs"), &at, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some("mode=1777"))
                .with_context(|| format!("mounting a tmpfs at {}", at.display()))?;
            own.insert(at);
        }
    }
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

/// A writable root (`--container-writable`) at `root`: an overlay of the image under the
/// container's own upper directory (`DIR/upper`, kept with a named container from step to
/// step). Between the two lies a skeleton of the image's directories (`DIR/skel`, with their
/// modes) made by the namespace's root, so every directory is root's inside and root may add,
/// replace and remove entries anywhere; files of the image stay the image's owner's, which
/// the namespace does not map (`nobody` inside): they are replaced, not changed in place.
/// Mount destinations the image lacks are made in the skeleton.
pub(crate) fn overlay(image: &Path, dir: &Path, root: &Path, dests: &[(PathBuf, bool)]) -> Result<()> {
    let (skel, upper, work) = (dir.join("skel"), dir.join("upper"), dir.join("work"));
    let _ = std::fs::remove_dir_all(&skel);
    std::fs::create_dir(&skel).with_context(|| format!("making {}", skel.display()))?;
    skeleton(image, &skel).context("the image's directories")?;
    for (d, file) in dests {
        skeleton_point(image, &skel, d, *file).with_context(|| format!("the mount destination {}", d.display()))?;
    }
    std::fs::create_dir_all(&upper)?;
    std::fs::create_dir_all(&work)?;
    let mut lowers = Vec::new();
    for p in [&skel, &image.to_path_buf(), &upper, &work] {
        let s = p.to_str().ok_or_else(|| anyhow!("{} is not UTF-8", p.display()))?;
        if s.contains([':', ',', '\\']) {
            return Err(anyhow!("{s}: an overlay cannot take a path with ':', ',' or '\\'"));
        }
        lowers.push(s.to_string());
    }
    let options = format!("lowerdir={}:{},upperdir={},workdir={}", lowers[0], lowers[1], lowers[2], lowers[3]);
    mount(Some("overlay"), root, Some("overlay"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(options.as_str()))
        .with_context(|| format!("mounting the writable root (an overlay in a user namespace, Linux 5.11 or later) at {}", root.display()))
}

/// Makes, under `skel`, each directory of `src` with its mode.
fn skeleton(src: &Path, skel: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(src).with_context(|| format!("reading {}", src.display()))? {
        let e = e?;
        if e.file_type()?.is_dir() {
            let to = skel.join(e.file_name());
            std::fs::create_dir(&to)?;
            let mode = e.metadata()?.permissions().mode() & 0o7777;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode))?;
            skeleton(&e.path(), &to)?;
        }
    }
    Ok(())
}

/// Makes `dest` under `skel` where the image lacks it.
fn skeleton_point(image: &Path, skel: &Path, dest: &Path, file: bool) -> Result<()> {
    let parts: Vec<_> = dest.components().filter(|c| !matches!(c, Component::RootDir | Component::CurDir)).collect();
    if parts.iter().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(anyhow!("must be an absolute path without \"..\""));
    }
    let (mut at, mut src) = (skel.to_path_buf(), image.to_path_buf());
    for (i, c) in parts.iter().enumerate() {
        let (next, next_src) = (at.join(c), src.join(c));
        let last = i + 1 == parts.len();
        match std::fs::symlink_metadata(&next_src) {
            Ok(m) if m.file_type().is_symlink() => return Err(anyhow!("{} is a symbolic link in the image", dest.display())),
            Ok(m) if !last && !m.is_dir() => return Err(anyhow!("{} is not a directory in the image", dest.display())),
            Ok(_) => {}
            Err(_) if last && file => {
                std::fs::File::create(&next)?;
            }
            Err(_) => {
                if !next.exists() {
                    std::fs::create_dir(&next)?;
                }
            }
        }
        at = next;
        src = next_src;
    }
    Ok(())
}
