//! Command-line tools that write to a pipe: `SIGPIPE` back to its default
//! action, so `holdfast show ... | head` ends the tool quietly when `head`
//! closes the pipe, as it ends `ls` or `cat`. (The Rust runtime ignores
//! `SIGPIPE`; every later write then fails with `EPIPE`, and `println!`
//! panics on it.)
//!
//! Standards: POSIX `signal(3p)`; `SIG_DFL` for `SIGPIPE` terminates the
//! process.
//!
//! # Known issues
//! - None known. Not for daemons: a peer closing its end must not end one.

/// Restores the default action of `SIGPIPE` (termination). Call it first
/// thing in `main`, before any thread starts.
pub fn default_action() {
    // SAFETY: `signal` only swaps the process's disposition of SIGPIPE for
    // the default one; no handler runs Rust code, no memory is passed, and
    // the previous disposition (a pointer-sized value) is discarded.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};

    const CHILD: &str = "HOLDFAST_SIGPIPE_CHILD";

    /// Run as a child by the test below: writes to standard output until
    /// the write fails (exit 3) or a signal ends it.
    #[test]
    #[ignore = "run as a child process by a_closed_pipe_ends_the_writer_by_sigpipe"]
    fn sigpipe_child() {
        match std::env::var(CHILD).as_deref() {
            Ok("default") => super::default_action(),
            Ok("ignored") => {}
            _ => return,
        }
        let mut out = std::io::stdout();
        let line = [b'x'; 4096];
        for _ in 0..100_000 {
            if out.write_all(&line).and_then(|()| out.flush()).is_err() {
                std::process::exit(3);
            }
        }
        std::process::exit(4);
    }

    /// How the child ends when its reader closes the pipe.
    fn child_end(mode: &str) -> std::process::ExitStatus {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "sigpipe::tests::sigpipe_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, mode)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the test binary");
        // The harness prints its own lines first; the pipe closes once the
        // child's writes have begun.
        let mut pipe = child.stdout.take().expect("stdout");
        let mut buf = [0u8; 8192];
        loop {
            let n = pipe.read(&mut buf).expect("read");
            assert!(n > 0, "the child wrote nothing of its own");
            if buf[..n].contains(&b'x') {
                break;
            }
        }
        drop(pipe);
        child.wait().expect("wait")
    }

    #[test]
    fn a_closed_pipe_ends_the_writer_by_sigpipe() {
        // As the Rust runtime leaves it: the write fails, the tool goes on
        // (and `println!` would panic).
        assert_eq!(child_end("ignored").code(), Some(3));
        // With the default action: SIGPIPE ends it quietly.
        assert_eq!(child_end("default").signal(), Some(libc::SIGPIPE));
    }
}
