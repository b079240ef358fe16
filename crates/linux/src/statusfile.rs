//! A status file written from a thread of its own, so that an event loop
//! that keeps a lease or a timer never waits for the disk.
//!
//! Creating and renaming a file starts an ext4 journal handle, and a
//! handle waits while the journal commits: under heavy writeback on a slow
//! disk, seconds (seen in the lab: every agent and controller of a plane
//! asleep in their status-file writes for 4 s, then all at once "etcd lease
//! not renewed in time"). A daemon whose one thread renews its lease and
//! writes its status file then misses the renewal for the file's sake.
//!
//! [`StatusFile::publish`] hands the latest text to the writer thread and
//! returns at once; the thread writes it to `PATH.tmp` and renames that
//! over `PATH` (a reader sees the old text or the new, never half of
//! one). Texts published while a write is under way replace each other:
//! only the latest is written. Dropping the handle writes what is still
//! pending and ends the thread.
//!
//! | what | Linux API |
//! |---|---|
//! | the write | `open(2)`, `write(2)`, `rename(2)` on the writer's thread |
//!
//! Known issues:
//! - A disk that never comes back keeps the last text unwritten; the
//!   thread's write blocks, not the caller, and dropping the handle then
//!   blocks until the disk answers.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

#[derive(Default)]
struct Slot {
    pending: Option<String>,
    closed: bool,
}

/// The handle: [`StatusFile::publish`] never touches the disk.
pub struct StatusFile {
    shared: Arc<(Mutex<Slot>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StatusFile {
    /// Starts the writer thread for `path`.
    pub fn start(path: PathBuf) -> std::io::Result<StatusFile> {
        let shared = Arc::new((Mutex::new(Slot::default()), Condvar::new()));
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("status-file".into())
            .spawn(move || writer(&path, &theirs))?;
        Ok(StatusFile {
            shared,
            thread: Some(thread),
        })
    }

    /// Hands over `text` to be written (replacing any text not yet written).
    pub fn publish(&self, text: String) {
        let (m, cv) = &*self.shared;
        lock(m).pending = Some(text);
        cv.notify_one();
    }
}

impl Drop for StatusFile {
    fn drop(&mut self) {
        let (m, cv) = &*self.shared;
        lock(m).closed = true;
        cv.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock(m: &Mutex<Slot>) -> std::sync::MutexGuard<'_, Slot> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn writer(path: &std::path::Path, shared: &(Mutex<Slot>, Condvar)) {
    let (m, cv) = shared;
    let tmp = path.with_extension("tmp");
    loop {
        let text = {
            let mut slot = lock(m);
            loop {
                if let Some(t) = slot.pending.take() {
                    break t;
                }
                if slot.closed {
                    return;
                }
                slot = cv.wait(slot).unwrap_or_else(|p| p.into_inner());
            }
        };
        // A status file is best effort: a failed write leaves the last one.
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_text_is_written_and_drop_flushes() {
        let dir = std::env::temp_dir().join(format!("hf-status-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("status.json");
        let f = StatusFile::start(path.clone()).unwrap();
        for i in 0..1000 {
            f.publish(format!("{{\"n\":{i}}}"));
        }
        drop(f);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"n\":999}");
        assert!(!path.with_extension("tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn publish_returns_while_the_write_is_stuck() {
        // The temporary file is a FIFO with no reader: the thread's open
        // blocks as on a disk that does not answer.
        let dir = std::env::temp_dir().join(format!("hf-status-stuck-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("status.json");
        let tmp = path.with_extension("tmp");
        nix::unistd::mkfifo(&tmp, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let f = StatusFile::start(path.clone()).unwrap();
        f.publish("first".into());
        let taken = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while lock(&f.shared.0).pending.is_some() {
            assert!(
                std::time::Instant::now() < taken,
                "the writer never took it"
            );
            std::thread::yield_now();
        }
        let t0 = std::time::Instant::now();
        for i in 0..10_000 {
            f.publish(format!("{i}"));
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(1));
        // A reader lets the stuck write through; the latest text follows.
        assert_eq!(std::fs::read_to_string(&tmp).unwrap(), "first");
        drop(f);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "9999");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
