//! Man pages and shell completions of Holdfast's binaries, generated from
//! their own clap definitions.
//!
//! Every shipped binary (`holdfastd`, `holdfast`, `holdfast-ctl`,
//! `holdfast-agent`, `holdfast-controller`, `holdfast-bfd-relay`) calls
//! [`intercept`] first thing in `main`: started as `BIN --generate-docs DIR`
//! it writes, under `DIR`,
//!
//! - `man/BIN.1`, and `man/BIN-SUB.1` for each subcommand (recursively), with
//!   clap_mangen;
//! - `completions/bash/BIN`, `completions/zsh/_BIN`,
//!   `completions/fish/BIN.fish`, with clap_complete;
//!
//! and exits. `make deb` runs it before cargo-deb (packaging/gen-docs.sh), so
//! the pages and completions are build outputs that always match the
//! arguments the binary parses. The argument is handled before clap parses
//! anything, so it works for binaries with required arguments; it is not
//! listed in `--help`.
//!
//! # Known issues
//! - None known.

use clap::Command;
use clap_complete::Shell;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The argument that asks a binary for its man pages and completions.
pub const FLAG: &str = "--generate-docs";

/// If the process was started as `BIN --generate-docs DIR`, writes the man
/// pages and completions of `cmd()` under `DIR` and exits (1 with a message
/// on an I/O error); otherwise returns without building the command.
pub fn intercept(cmd: impl FnOnce() -> Command) {
    let Some(dir) = requested(std::env::args_os()) else {
        return;
    };
    let cmd = cmd();
    let name = cmd.get_name().to_string();
    match generate(cmd, &dir) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("{name}: {FLAG} {}: {e}", dir.display());
            std::process::exit(1);
        }
    }
}

/// The output directory when the arguments are exactly `BIN --generate-docs DIR`.
fn requested(args: impl IntoIterator<Item = OsString>) -> Option<PathBuf> {
    let mut it = args.into_iter().skip(1);
    let flag = it.next()?;
    let dir = it.next()?;
    (flag == FLAG && it.next().is_none()).then(|| PathBuf::from(dir))
}

/// Writes the man pages and completions of `cmd` under `dir`; returns the
/// files written.
pub fn generate(cmd: Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut cmd = cmd;
    cmd.build();
    let mut files = Vec::new();
    let man = dir.join("man");
    fs::create_dir_all(&man)?;
    let name = cmd.get_name().to_string();
    let source = match cmd.get_version() {
        Some(v) => format!("{name} {v}"),
        None => format!("{name} {}", env!("CARGO_PKG_VERSION")),
    };
    man_pages(&cmd, name.clone(), &source, &man, &mut files)?;
    for (shell, sub, file) in [
        (Shell::Bash, "bash", name.clone()),
        (Shell::Zsh, "zsh", format!("_{name}")),
        (Shell::Fish, "fish", format!("{name}.fish")),
    ] {
        let d = dir.join("completions").join(sub);
        fs::create_dir_all(&d)?;
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut cmd, name.clone(), &mut buf);
        let path = d.join(file);
        fs::write(&path, buf)?;
        files.push(path);
    }
    Ok(files)
}

/// One page for `cmd` named `title`, then one per visible subcommand
/// (`title-sub`), recursively; `source` (the binary and its version) in
/// each page's footer.
fn man_pages(
    cmd: &Command,
    title: String,
    source: &str,
    dir: &Path,
    files: &mut Vec<PathBuf>,
) -> io::Result<()> {
    let page = cmd
        .clone()
        .display_name(title.clone())
        .bin_name(title.replace('-', " "));
    let mut buf = Vec::new();
    clap_mangen::Man::new(page)
        .title(title.clone())
        .source(source.to_string())
        .manual("Holdfast")
        .render(&mut buf)?;
    let path = dir.join(format!("{title}.1"));
    fs::write(&path, buf)?;
    files.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        man_pages(
            sub,
            format!("{title}-{}", sub.get_name()),
            source,
            dir,
            files,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction};

    fn sample() -> Command {
        Command::new("holdfast-sample")
            .version("1.2.3")
            .about("A sample")
            .arg(Arg::new("config").long("config").required(true))
            .subcommand(
                Command::new("show").about("Show state").subcommand(
                    Command::new("summary")
                        .arg(Arg::new("json").long("json").action(ArgAction::SetTrue)),
                ),
            )
            .subcommand(Command::new("secret").hide(true))
    }

    #[test]
    fn only_the_exact_form_is_a_request() {
        let a = |v: &[&str]| requested(v.iter().map(OsString::from));
        assert_eq!(a(&["x", FLAG, "/tmp/d"]), Some(PathBuf::from("/tmp/d")));
        assert_eq!(a(&["x", FLAG]), None);
        assert_eq!(a(&["x", "--config", "f"]), None);
        assert_eq!(a(&["x", FLAG, "/tmp/d", "more"]), None);
        assert_eq!(a(&["x"]), None);
    }

    #[test]
    fn writes_pages_per_subcommand_and_three_completions() {
        let dir = std::env::temp_dir().join(format!("holdfast-docgen-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let files = generate(sample(), &dir).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|f| f.strip_prefix(&dir).unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "man/holdfast-sample.1",
                "man/holdfast-sample-show.1",
                "man/holdfast-sample-show-summary.1",
                "completions/bash/holdfast-sample",
                "completions/zsh/_holdfast-sample",
                "completions/fish/holdfast-sample.fish",
            ]
        );
        let top = fs::read_to_string(dir.join("man/holdfast-sample.1")).unwrap();
        assert!(top.starts_with(".ie \\n(.g .ds Aq"), "{top}");
        assert!(top.contains("\\-\\-config"), "{top}");
        assert!(top.contains("1.2.3"), "{top}");
        let sub = fs::read_to_string(dir.join("man/holdfast-sample-show-summary.1")).unwrap();
        assert!(sub.contains("\\-\\-json"), "{sub}");
        assert!(sub.contains("\"holdfast-sample 1.2.3\" Holdfast"), "{sub}");
        let bash = fs::read_to_string(dir.join("completions/bash/holdfast-sample")).unwrap();
        assert!(bash.contains("complete -F"), "{bash}");
        assert!(bash.contains("--config"), "{bash}");
        let fish = fs::read_to_string(dir.join("completions/fish/holdfast-sample.fish")).unwrap();
        assert!(fish.contains("-l config"), "{fish}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
