//! `sparsek run` on the CPU backend with edge shapes and hostile sizes: every run ends with a verdict or a clear
//! refusal, never a panic or an abort.

mod common;

fn run(args: &[&str]) -> (bool, String) {
    common::run_cpu(args)
}

#[test]
fn empty_dimensions_pass() {
    for args in [
        ["--m", "256", "--k", "256", "--n", "0"],
        ["--m", "0", "--k", "256", "--n", "64"],
        ["--m", "256", "--k", "0", "--n", "64"],
        ["--m", "0", "--k", "0", "--n", "0"],
    ] {
        let (ok, text) = run(&args);
        assert!(ok && text.contains("check     PASS"), "{args:?}:\n{text}");
    }
    let (ok, text) = run(&["--m", "256", "--k", "256", "--n", "64", "--pattern", "empty", "--beta", "1"]);
    assert!(ok && text.contains("check     PASS"), "{text}");
}

#[test]
fn sizes_beyond_memory_are_refused_before_allocating() {
    for args in [
        ["--m", "100000000000", "--k", "1000000000", "--n", "4"],
        ["--m", "1024", "--k", "1024", "--n", "100000000000"],
        ["--m", "18446744073709551552", "--k", "64", "--n", "4"],
    ] {
        let (ok, text) = run(&args);
        assert!(!ok, "{args:?} should be refused:\n{text}");
        assert!(text.contains("sparsek run:") || text.contains("sparsek: error:"), "{args:?}:\n{text}");
    }
}

#[test]
fn bad_arguments_are_errors() {
    for args in [["--bs", "48"], ["--density", "2"], ["--density", "NaN"]] {
        let (ok, text) = run(&args);
        assert!(!ok && text.contains("error"), "{args:?}:\n{text}");
    }
}
