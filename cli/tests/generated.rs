//! `sqlock completions SHELL` and `sqlock man`: generated from the command line, they
//! name every command; bash's script loads and completes (zsh's and fish's parse where
//! those shells are installed), the pages are valid roff.
//! Neither needs a database.

mod common;

use std::process::{Command, Output, Stdio};

use common::{scratch_dir, stderr, stdout, BIN};

/// Every command a user types.
const COMMANDS: &[&str] = &[
    "run",
    "list",
    "status",
    "release",
    "sweep",
    "migrate",
    "schema",
    "completions",
    "man",
];

/// `sqlock ARGS...` with a database URL that cannot be used: these commands must not
/// need one.
fn sqlock(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("SQLOCK_DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .output()
        .expect("sqlock runs")
}

#[test]
fn completions_name_every_command_and_bash_completes_them() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = sqlock(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        for cmd in COMMANDS {
            assert!(script.contains(cmd), "{shell}: {cmd} missing");
        }
        assert!(
            script.contains("at-least"),
            "{shell}: run's options missing"
        );
    }
    // Where zsh and fish are installed, they parse their scripts too.
    let dir = scratch_dir("generated_shells");
    for (shell, check) in [("zsh", &["-n"][..]), ("fish", &["--no-execute"])] {
        let file = dir.join(format!("sqlock.{shell}"));
        std::fs::write(&file, stdout(&sqlock(&["completions", shell]))).unwrap();
        match Command::new(shell).args(check).arg(&file).output() {
            Ok(o) => assert!(o.status.success(), "{shell}: {}", stderr(&o)),
            Err(_) => eprintln!("NOTE: {shell} is not installed: its script was not parsed"),
        }
    }
    let o = sqlock(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));

    // bash parses the script, and once loaded, completes commands and options.
    let script = stdout(&sqlock(&["completions", "bash"]));
    let dir = scratch_dir("generated_bash");
    let file = dir.join("sqlock.bash");
    std::fs::write(&file, &script).unwrap();
    let check = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(check.status.success(), "bash -n: {}", stderr(&check));
    let complete = |words: &str| -> String {
        // COMP_WORDS as bash's completion would set them, the cursor on the last.
        let program = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}; \
             _sqlock sqlock \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display()
        );
        let o = Command::new("bash")
            .arg("-c")
            .arg(program)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success(), "{words}: {}", stderr(&o));
        stdout(&o)
    };
    let commands = complete("sqlock st");
    assert!(commands.lines().any(|l| l == "status"), "{commands}");
    let options = complete("sqlock run --at");
    assert!(options.lines().any(|l| l == "--at-least"), "{options}");
    let options = complete("sqlock status --");
    assert!(options.lines().any(|l| l == "--json"), "{options}");
}

#[test]
fn man_pages_cover_every_command() {
    let o = sqlock(&["man"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let page = stdout(&o);
    assert!(
        page.contains("\n.TH sqlock 1 "),
        "{}",
        &page[..page.len().min(200)]
    );
    for cmd in COMMANDS {
        assert!(
            page.contains(&format!("sqlock\\-{cmd}(1)")),
            "{cmd} missing"
        );
    }
    assert!(page.contains("Exit status"), "the exit codes are missing");
    // The help's indented lists stay lists: roff would fill them into one paragraph.
    assert!(
        page.contains("\n.nf\n  0    success"),
        "the exit codes are filled"
    );

    let o = sqlock(&["man", "run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run = stdout(&o);
    assert!(
        run.contains("\n.TH sqlock-run 1 "),
        "{}",
        &run[..run.len().min(200)]
    );
    assert!(run.contains("\\-\\-at\\-least"), "run's options missing");

    let o = sqlock(&["man", "frobnicate"]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(stderr(&o).contains("status"), "{}", stderr(&o));

    // --dir writes one page per command, each the same as printed alone.
    let dir = scratch_dir("generated_man");
    let o = sqlock(&["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(dir.join("sqlock.1")).unwrap(), page);
    assert_eq!(
        std::fs::read_to_string(dir.join("sqlock-run.1")).unwrap(),
        run
    );
    for cmd in COMMANDS {
        assert!(dir.join(format!("sqlock-{cmd}.1")).exists(), "{cmd}");
    }
    let o = sqlock(&["man", "--dir", dir.join("missing").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not an existing directory"),
        "{}",
        stderr(&o)
    );

    // Where groff is installed, every page renders without a warning.
    if Command::new("groff").arg("--version").output().is_ok() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let o = Command::new("groff")
                .args(["-man", "-Tutf8", "-ww", "-z"])
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                o.status.success() && o.stderr.is_empty(),
                "{}: {}",
                path.display(),
                stderr(&o)
            );
        }
    } else {
        eprintln!("NOTE: groff is not installed: the pages were not rendered");
    }
}
