//! `sqlock completions SHELL` and `sqlock man`: shell completion scripts and manual
//! pages, generated from the clap definitions in `args.rs`.
//!
//! Generated at run time rather than at build time, so that what they say is always
//! the installed binary's command line, and a packager needs no build script: the
//! binary prints them (or writes the pages into a directory) on demand.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::args::Cli;
use crate::failure::Failure;

/// `completions SHELL`: the completion script on stdout.
pub(crate) fn completions(shell: Shell) -> Result<i32, Failure> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "sqlock", &mut out);
    write_stdout(&out)
}

/// `man [COMMAND]`: sqlock(1), or a command's page, on stdout; `man --dir DIR`: every
/// page written into DIR.
pub(crate) fn man(command: Option<&str>, dir: Option<&Path>) -> Result<i32, Failure> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Builds the subcommands' names (sqlock-run) that their pages are titled with.
    cmd.build();
    if let Some(dir) = dir {
        let cannot = |e: std::io::Error| {
            Failure::Other(format!(
                "cannot write the manual pages into {}: {e}",
                dir.display()
            ))
        };
        for page in std::iter::once(cmd.clone()).chain(cmd.get_subcommands().cloned()) {
            let man = page_of(page);
            std::fs::write(dir.join(man.get_filename()), render(&man)?).map_err(cannot)?;
        }
        return Ok(0);
    }
    let page = match command {
        None => cmd,
        Some(name) => cmd.find_subcommand(name).cloned().ok_or_else(|| {
            let names: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
            Failure::Usage(format!(
                "no command {name:?}: expected one of {}",
                names.join(", ")
            ))
        })?,
    };
    write_stdout(&render(&page_of(page))?)
}

/// A page, its footer naming sqlock and its version (a command's own would say only
/// "run").
fn page_of(cmd: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd)
        .source(format!("sqlock {}", env!("CARGO_PKG_VERSION")))
        .manual("sqlock manual")
}

/// The page's roff, with the help text's indented lines (the exit codes, `run`'s list
/// of signals) kept as written: roff would fill them into the paragraph around them.
fn render(man: &clap_mangen::Man) -> Result<Vec<u8>, Failure> {
    let mut roff = Vec::new();
    man.render(&mut roff)?;
    let roff = String::from_utf8_lossy(&roff);
    let mut out = String::with_capacity(roff.len() + 64);
    let mut unfilled = false;
    for line in roff.lines() {
        // Text lines only: a control line starts with '.' (or '\'').
        let indented = line.starts_with(' ');
        if indented != unfilled {
            out.push_str(if indented { ".nf\n" } else { ".fi\n" });
            unfilled = indented;
        }
        out.push_str(line);
        out.push('\n');
    }
    if unfilled {
        out.push_str(".fi\n");
    }
    Ok(out.into_bytes())
}

/// Writes all of `bytes` on stdout; a closed pipe (`sqlock man | head`) is no error.
fn write_stdout(bytes: &[u8]) -> Result<i32, Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(e.into()),
    }
}
