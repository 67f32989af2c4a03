//! A collection in a local directory, confined to it.
//!
//! The directory is opened once, and every later open, create, rename and delete goes
//! through that handle one path component at a time, each opened with `O_NOFOLLOW`: a
//! symbolic link anywhere under the root — an object's file, a tenant's directory, an
//! upload's part — is refused, never followed, whether it points outside the root or at
//! another tenant's objects inside it. Anything else that is not a plain directory or file
//! where one is expected (a FIFO, a device) is refused the same way. The refusal names the
//! path under the root where it was met, for the operator; the caller turns it into a
//! fixed code.
//!
//! An object is written as `<key>.part` (created exclusively) and renamed to its key
//! within its directory when complete, so a reader never meets part of one; the collector
//! deletes a key's part with it, so a host that died mid-write leaves nothing behind.
//!
//! Every call here blocks on the filesystem: callers run them on blocking threads.

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt as _;
use std::path::Path;

/// The suffix of an object being written.
const PART: &str = ".part";

#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A symbolic link, or something else than a directory or a plain file, where the
    /// host expects one: the path under the root where it was met.
    #[error("{0} under the collection is not a plain directory or file")]
    Refused(String),
    #[error("no such object")]
    NotFound,
    #[error("the local storage failed: {0}")]
    Io(std::io::ErrorKind),
}

/// An open collection directory: the handle every path under it is resolved from.
pub struct LocalDir {
    root: OwnedFd,
}

/// An object being written under its part name.
#[derive(Debug)]
pub struct LocalWrite {
    dir: OwnedFd,
    name: String,
    file: File,
    /// Renamed to its key: nothing left to clean up.
    done: bool,
}

impl LocalDir {
    /// Opens `base` (made if missing; the directory itself, not a link to one), then each
    /// of `below` under it the confined way (made if missing).
    pub fn open(base: &Path, below: &[&str]) -> Result<LocalDir, String> {
        std::fs::create_dir_all(base).map_err(|e| format!("{}: {e}", base.display()))?;
        let root =
            rustix::fs::openat(rustix::fs::CWD, base, dir_flags(), Mode::empty()).map_err(|e| {
                match e {
                    Errno::LOOP | Errno::NOTDIR => format!(
                        "{} is a symbolic link or not a directory: give the directory itself",
                        base.display()
                    ),
                    e => format!("{}: {e}", base.display()),
                }
            })?;
        let mut dir = LocalDir { root };
        if !below.is_empty() {
            let opened = dir.walk(below, true).map_err(|e| match e {
                LocalError::Refused(path) => format!(
                    "{} is a symbolic link or not a directory",
                    base.join(path).display()
                ),
                e => format!("{}: {e}", base.join(below.join("/")).display()),
            })?;
            dir = LocalDir { root: opened };
        }
        Ok(dir)
    }

    /// Bytes `start..end` of the object `key` (shorter if the file is).
    pub fn read(&self, key: &str, start: u64, end: u64) -> Result<Vec<u8>, LocalError> {
        let (dir, name) = self.parent(key, false)?;
        let file = open_file(&dir, name, OFlags::RDONLY, key)?;
        let mut bytes = vec![0; end.saturating_sub(start) as usize];
        let mut filled = 0;
        while filled < bytes.len() {
            match file.read_at(&mut bytes[filled..], start + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(LocalError::Io(e.kind())),
            }
        }
        bytes.truncate(filled);
        Ok(bytes)
    }

    /// Starts writing the object `key`: its directories are made as needed, its part
    /// file created new (never an existing file, never through a link).
    pub fn create(&self, key: &str) -> Result<LocalWrite, LocalError> {
        let (dir, name) = self.parent(key, true)?;
        let part = format!("{name}{PART}");
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
        let file = open_file(&dir, &part, flags, &format!("{key}{PART}"))?;
        Ok(LocalWrite {
            dir,
            name: name.to_string(),
            file,
            done: false,
        })
    }

    /// Deletes the object `key` and any part of it left by an unfinished write. A link in
    /// its place, or on the way to it, is refused and left alone: unlinking it would
    /// delete the operator's evidence, and following it someone else's file.
    pub fn delete(&self, key: &str) -> Result<(), LocalError> {
        let (dir, name) = match self.parent(key, false) {
            Ok(found) => found,
            Err(LocalError::NotFound) => return Ok(()),
            Err(e) => return Err(e),
        };
        for (entry, path) in [
            (name.to_string(), key.to_string()),
            (format!("{name}{PART}"), format!("{key}{PART}")),
        ] {
            match kind_of(&dir, &entry) {
                Ok(FileType::RegularFile) => {}
                Ok(_) => return Err(LocalError::Refused(path)),
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(io(e)),
            }
            match rustix::fs::unlinkat(&dir, entry.as_str(), AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(io(e)),
            }
        }
        Ok(())
    }

    /// The directory holding `key`'s file (made if `create`), and the file's name.
    fn parent<'k>(&self, key: &'k str, create: bool) -> Result<(OwnedFd, &'k str), LocalError> {
        let parts: Vec<&str> = key.split('/').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == ".." || p.contains('\0'))
        {
            return Err(LocalError::NotFound);
        }
        let (name, dirs) = parts.split_last().expect("split yields one part at least");
        Ok((self.walk(dirs, create)?, name))
    }

    /// Opens the directories `parts` one under the other from the root, each without
    /// following a link (making each first if `create`).
    fn walk(&self, parts: &[&str], create: bool) -> Result<OwnedFd, LocalError> {
        let mut dir = self
            .root
            .try_clone()
            .map_err(|e| LocalError::Io(e.kind()))?;
        for (depth, part) in parts.iter().enumerate() {
            if create {
                match rustix::fs::mkdirat(&dir, *part, Mode::from_raw_mode(0o750)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(io(e)),
                }
            }
            dir = match rustix::fs::openat(&dir, *part, dir_flags(), Mode::empty()) {
                Ok(opened) => opened,
                Err(Errno::NOENT) => return Err(LocalError::NotFound),
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    return Err(LocalError::Refused(parts[..=depth].join("/")));
                }
                Err(e) => return Err(io(e)),
            };
        }
        Ok(dir)
    }
}

impl LocalWrite {
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), LocalError> {
        self.file
            .write_all(chunk)
            .map_err(|e| LocalError::Io(e.kind()))
    }

    /// Gives the complete object its key, in one rename within its directory.
    pub fn finish(mut self) -> Result<(), LocalError> {
        let part = format!("{}{PART}", self.name);
        rustix::fs::renameat(&self.dir, part.as_str(), &self.dir, self.name.as_str())
            .map_err(io)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for LocalWrite {
    /// An object never finished is discarded with its part.
    fn drop(&mut self) {
        if !self.done {
            let part = format!("{}{PART}", self.name);
            let _ = rustix::fs::unlinkat(&self.dir, part.as_str(), AtFlags::empty());
        }
    }
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens the file `name` in `dir` without following a link, refusing anything but a
/// plain file (non-blocking, so a FIFO put in an object's place cannot hold the call).
fn open_file(dir: &OwnedFd, name: &str, flags: OFlags, path: &str) -> Result<File, LocalError> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o640)) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Err(LocalError::NotFound),
        Err(Errno::LOOP) => return Err(LocalError::Refused(path.to_string())),
        // An exclusive create met something already there: a link planted at the part's
        // name, or a file; either way not ours to write.
        Err(Errno::EXIST) => return Err(LocalError::Refused(path.to_string())),
        Err(e) => return Err(io(e)),
    };
    let stat = rustix::fs::fstat(fd.as_fd()).map_err(io)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(LocalError::Refused(path.to_string()));
    }
    Ok(File::from(fd))
}

/// What `name` in `dir` is, without following a link.
fn kind_of(dir: &OwnedFd, name: &str) -> Result<FileType, Errno> {
    let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(FileType::from_raw_mode(stat.st_mode))
}

fn io(e: Errno) -> LocalError {
    LocalError::Io(std::io::Error::from(e).kind())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn refused(result: Result<impl std::fmt::Debug, LocalError>) -> String {
        match result {
            Err(LocalError::Refused(path)) => path,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn objects_are_written_whole_read_and_deleted_under_the_root() {
        let home = tempfile::tempdir().unwrap();
        let dir = LocalDir::open(home.path(), &["files", "docs"]).unwrap();
        let mut write = dir.create("acme/k1").unwrap();
        write.write(b"hello ").unwrap();
        assert!(matches!(
            dir.read("acme/k1", 0, 5),
            Err(LocalError::NotFound)
        ));
        write.write(b"world").unwrap();
        write.finish().unwrap();
        assert_eq!(dir.read("acme/k1", 6, 100).unwrap(), b"world");
        // Dropped unfinished: nothing is left.
        drop(dir.create("acme/k2").unwrap());
        let root = home.path().join("files/docs/acme");
        let mut left: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["k1"]);
        dir.delete("acme/k1").unwrap();
        dir.delete("acme/k1").unwrap();
        dir.delete("nobody/k1").unwrap();
        assert!(matches!(
            dir.read("acme/k1", 0, 1),
            Err(LocalError::NotFound)
        ));
    }

    #[test]
    fn a_link_at_any_level_is_refused_and_never_followed() {
        let home = tempfile::tempdir().unwrap();
        let outside = home.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), "secret").unwrap();
        std::fs::write(outside.join("k"), "theirs").unwrap();
        let dir = LocalDir::open(&home.path().join("root"), &[]).unwrap();
        let mut write = dir.create("acme/k").unwrap();
        write.write(b"mine").unwrap();
        write.finish().unwrap();
        let root = home.path().join("root");
        // The object's file.
        std::fs::remove_file(root.join("acme/k")).unwrap();
        symlink(outside.join("secret"), root.join("acme/k")).unwrap();
        assert_eq!(refused(dir.read("acme/k", 0, 6)), "acme/k");
        assert_eq!(refused(dir.delete("acme/k")), "acme/k");
        assert!(outside.join("secret").exists());
        // A tenant's directory, pointing outside or at another tenant inside.
        symlink(&outside, root.join("evil")).unwrap();
        assert_eq!(refused(dir.read("evil/k", 0, 6)), "evil");
        assert_eq!(refused(dir.create("evil/new")), "evil");
        assert_eq!(refused(dir.delete("evil/k")), "evil");
        symlink("acme", root.join("inner")).unwrap();
        assert_eq!(refused(dir.read("inner/k", 0, 6)), "inner");
        assert!(outside.join("k").exists());
        assert!(!outside.join("new.part").exists() && !outside.join("new").exists());
        // A link planted at an upload's part name.
        symlink(outside.join("planted"), root.join("acme/p.part")).unwrap();
        assert_eq!(refused(dir.create("acme/p")), "acme/p.part");
        assert!(!outside.join("planted").exists());
        // The root itself, and a directory on the way to it.
        assert!(LocalDir::open(&root.join("evil"), &[]).is_err());
        symlink(&outside, home.path().join("files")).unwrap();
        assert!(LocalDir::open(home.path(), &["files", "docs"]).is_err());
        assert!(!outside.join("docs").exists());
    }
}
