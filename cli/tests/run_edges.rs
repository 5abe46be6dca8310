//! `sparsek run` on the CPU backend with edge shapes and hostile sizes: every run ends with a verdict or a clear
//! refusal, never a panic or an abort.

mod common;

/// How a run must end.
#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    /// A passing check.
    Pass,
    /// A refusal before allocating: a failed run naming `sparsek run:` or `sparsek: error:`.
    Refused,
    /// An argument error.
    Error,
}

/// The runs (arguments after `sparsek run --cpu --iters 1 --warmup 0`) and how each must end.
const RUNS: &[(End, &[&str])] = &[
    // Empty dimensions.
    (End::Pass, &["--m", "256", "--k", "256", "--n", "0"]),
    (End::Pass, &["--m", "0", "--k", "256", "--n", "64"]),
    (End::Pass, &["--m", "256", "--k", "0", "--n", "64"]),
    (End::Pass, &["--m", "0", "--k", "0", "--n", "0"]),
    (End::Pass, &["--m", "256", "--k", "256", "--n", "64", "--pattern", "empty", "--beta", "1"]),
    // Sizes beyond memory.
    (End::Refused, &["--m", "100000000000", "--k", "1000000000", "--n", "4"]),
    (End::Refused, &["--m", "1024", "--k", "1024", "--n", "100000000000"]),
    (End::Refused, &["--m", "18446744073709551552", "--k", "64", "--n", "4"]),
    // Bad arguments.
    (End::Error, &["--bs", "48"]),
    (End::Error, &["--density", "2"]),
    (End::Error, &["--density", "NaN"]),
];

/// Every run of [`RUNS`] that must end with `end` does.
fn runs_end_with(end: End) {
    for (_, args) in RUNS.iter().filter(|(e, _)| *e == end) {
        let (ok, text) = common::run_cpu(args);
        let ended = match end {
            End::Pass => ok && text.contains("check     PASS"),
            End::Refused => !ok && (text.contains("sparsek run:") || text.contains("sparsek: error:")),
            End::Error => !ok && text.contains("error"),
        };
        assert!(ended, "{args:?} should end with {end:?}:\n{text}");
    }
}

#[test]
fn empty_dimensions_pass() {
    runs_end_with(End::Pass);
}

#[test]
fn sizes_beyond_memory_are_refused_before_allocating() {
    runs_end_with(End::Refused);
}

#[test]
fn bad_arguments_are_errors() {
    runs_end_with(End::Error);
}
