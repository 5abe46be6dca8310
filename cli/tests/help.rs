//! `sparsek`'s help: `--help` wraps to the terminal's width (read from COLUMNS when the output is not a terminal,
//! as here) and to at most 100 columns on wide ones; `-h` is a summary, shorter than `--help`; the options for
//! comparisons and measurement sit under their own headings, after the problem's options.

use std::process::Command;

/// The commands whose help is checked: the top level and every subcommand.
const COMMANDS: [&[&str]; 5] = [&[], &["info"], &["run"], &["bench"], &["tune"]];

fn help(command: &[&str], flag: &str, columns: usize) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sparsek"))
        .args(command)
        .arg(flag)
        .env("COLUMNS", columns.to_string())
        .output()
        .expect("start sparsek");
    assert!(out.status.success(), "sparsek {command:?} {flag} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

#[test]
fn help_wraps_to_the_terminal() {
    for columns in [60, 80, 100, 200] {
        let width = columns.min(100);
        for command in COMMANDS {
            for flag in ["-h", "--help"] {
                let text = help(command, flag, columns);
                for line in text.lines() {
                    assert!(
                        line.chars().count() <= width,
                        "sparsek {command:?} {flag} at COLUMNS={columns}: a line of {} characters (> {width}):\n{line}",
                        line.chars().count()
                    );
                }
            }
        }
    }
    // The wrapping follows the terminal: the same help is longer (more lines) on a narrower one.
    let (narrow, wide) = (help(&["run"], "--help", 60), help(&["run"], "--help", 100));
    assert!(narrow.lines().count() > wide.lines().count(), "run --help does not rewrap at 60 columns");
}

#[test]
fn short_help_is_a_summary_of_the_long_one() {
    for command in COMMANDS {
        let (short, long) = (help(command, "-h", 100), help(command, "--help", 100));
        assert!(
            short.lines().count() < long.lines().count(),
            "sparsek {command:?}: -h ({} lines) is not shorter than --help ({} lines)",
            short.lines().count(),
            long.lines().count()
        );
        assert!(short.contains("see more with '--help'"), "sparsek {command:?} -h does not point to --help");
    }
}

/// The line of `text` where `needle` first appears.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle:?} not in:\n{text}"))
}

#[test]
fn expert_options_have_their_own_headings() {
    for flag in ["-h", "--help"] {
        let run = help(&["run"], flag, 100);
        let heading = line_of(&run, "Kernel choice (for comparisons):");
        let measurement = line_of(&run, "Measurement:");
        for option in ["--m <M>", "--n <N>", "--k <K>", "--bs <BS>", "--density <DENSITY>"] {
            let at = line_of(&run, option);
            assert!(at < heading && at < measurement, "run {flag}: {option} is not among the first options");
        }
        for option in ["--module <MODULE>", "--split <", "--schedule <SCHEDULE>"] {
            assert!(line_of(&run, option) > heading, "run {flag}: {option} is not under the kernel-choice heading");
        }
        assert!(line_of(&run, "--iters <ITERS>") > measurement, "run {flag}: --iters is not under Measurement");

        let bench = help(&["bench"], flag, 100);
        let heading = line_of(&bench, "Kernel choice (for comparisons):");
        for option in ["--module <MODULE>", "--split <", "--schedule <SCHEDULE>", "--cusparse <CUSPARSE>"] {
            assert!(line_of(&bench, option) > heading, "bench {flag}: {option} is not under the kernel-choice heading");
        }
        let tune = help(&["tune"], flag, 100);
        assert!(line_of(&tune, "      --configs") > line_of(&tune, "Configuration sweep"), "tune {flag}: --configs");
    }
}
