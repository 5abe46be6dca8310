//! Hostile Matrix Market input: whatever the bytes, `MatrixMarket::parse`/`read`, `to_bsr`, `to_bsr_limited` and
//! `Bsr::from_matrix_market(_limited)` return Ok or a typed error, never panic, abort or hang, and cost memory
//! proportional to the file and to the blocks it touches.
//!
//! The test binary's global allocator can refuse, per thread, every request above a cap ([`capped`]): a fallible
//! allocation then fails with `Error::OutOfMemory`, while an infallible one would abort the whole binary. So a
//! passing test also shows that no input-sized allocation bypasses the fallible path, and that the huge sizes a
//! tiny file declares are never asked of the allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{BufReader, Cursor, Read};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use sparsek::format::mtx::MAX_LINE_BYTES;
use sparsek::format::{MatrixMarket, Pattern, generate};
use sparsek::{Bsr, BsrError, Error, bf16, f16};

// ---------------------------------------------------------------------------------------------------------------
// A per-thread allocation cap.

struct Capped;

thread_local! {
    static CAP: Cell<usize> = const { Cell::new(usize::MAX) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// Records the request and says whether it is admitted under this thread's cap.
fn admit(size: usize) -> bool {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    CAP.try_with(|c| size <= c.get()).unwrap_or(true)
}

// SAFETY: every call is forwarded to the system allocator unchanged, or refused with a null pointer, which the
// GlobalAlloc contract allows for any request.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if admit(layout.size()) { unsafe { System.alloc(layout) } } else { std::ptr::null_mut() }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if admit(layout.size()) { unsafe { System.alloc_zeroed(layout) } } else { std::ptr::null_mut() }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if admit(new_size) { unsafe { System.realloc(ptr, layout, new_size) } } else { std::ptr::null_mut() }
    }
}

#[global_allocator]
static ALLOC: Capped = Capped;

/// Restores the previous cap, even when the closure panics.
struct Restore(usize);
impl Drop for Restore {
    fn drop(&mut self) {
        CAP.with(|c| c.set(self.0));
    }
}

/// Runs `f` with every allocation of this thread above `cap` bytes refused; returns its result and the largest
/// allocation it asked for (refused or not).
fn capped<R>(cap: usize, f: impl FnOnce() -> R) -> (R, usize) {
    let _restore = Restore(CAP.with(|c| c.replace(cap)));
    LARGEST.with(|l| l.set(0));
    let r = f();
    (r, LARGEST.with(|l| l.get()))
}

const MIB: usize = 1 << 20;

// ---------------------------------------------------------------------------------------------------------------
// Helpers.

fn parse(text: impl AsRef<[u8]>) -> sparsek::Result<MatrixMarket> {
    MatrixMarket::parse(Cursor::new(text.as_ref()), "h.mtx")
}

/// A fresh file name under the system temp dir.
fn temp_path(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("sparsek-hostile-{tag}-{}-{n}.mtx", std::process::id()))
}

/// The error is one of the typed outcomes a hostile file may produce, and its message is short.
fn typed(e: &Error) -> std::result::Result<(), String> {
    let ok = matches!(
        e,
        Error::Io { .. }
            | Error::InvalidBsr(_)
            | Error::TooLarge { .. }
            | Error::OutOfMemory { .. }
            | Error::NonFinite { .. }
    );
    let msg = e.to_string();
    if !ok {
        return Err(format!("unexpected error variant: {e:?}"));
    }
    if msg.len() >= 300 {
        return Err(format!("message of {} bytes: {msg:.400}", msg.len()));
    }
    Ok(())
}

/// An Io error whose reason starts with "line {line}:".
fn names_line(r: sparsek::Result<MatrixMarket>, line: usize) -> std::result::Result<String, String> {
    match r {
        Err(Error::Io { path, reason }) if path == "h.mtx" && reason.starts_with(&format!("line {line}:")) => {
            Ok(reason)
        }
        other => Err(format!("expected an Io error naming line {line}, got {other:?}")),
    }
}

/// Every conversion of a parsed file, each under the cap: Ok or a typed, short error.
fn convert_all(m: &MatrixMarket) -> std::result::Result<(), String> {
    for bs in [16usize, 32, 64, 128] {
        let results = [
            m.to_bsr_limited::<f16>(bs, MIB).map(|_| ()),
            m.to_bsr_limited::<f32>(bs, 4096).map(|_| ()),
            m.to_bsr::<f32>(bs).map(|_| ()),
            m.to_bsr::<f64>(bs).map(|_| ()),
        ];
        for r in results {
            if let Err(e) = r {
                typed(&e)?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// Generated near-valid files: valid headers and size lines with hostile numbers, entry lines of hostile tokens.

/// A header: (text, pattern field, general symmetry).
fn header() -> impl Strategy<Value = (String, bool, bool)> {
    let field = prop::sample::select(vec!["real", "REAL", "double", "integer", "pattern"]);
    let sym = prop::sample::select(vec!["general", "general", "symmetric", "Skew-Symmetric"]);
    let banner = prop::sample::select(vec!["%%MatrixMarket matrix coordinate", "%%matrixmarket MATRIX coordinate"]);
    let junk = prop::sample::select(vec![
        "%%MatrixMarket matrix coordinate complex general",
        "%%MatrixMarket matrix coordinate real hermitian",
        "%%MatrixMarket matrix array real general",
        "%%MatrixMarket matrix coordinate real",
        "%MatrixMarket matrix coordinate real general",
        "",
    ]);
    prop_oneof![
        9 => (banner, field, sym).prop_map(|(b, f, s)| (format!("{b} {f} {s}"), f == "pattern", s == "general")),
        1 => junk.prop_map(|j| (j.to_string(), false, true)),
    ]
}

/// Small numbers mostly (so that entries land inside the shape), and sizes far beyond memory.
fn count() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0usize..40).prop_map(|n| n.to_string()),
        1 => prop::sample::select(vec![
            "68719476720", // 16 * u32::MAX: u32::MAX block rows of 16, a 16 GiB row_ptr
            "68719476736", // 2^36: more than u32::MAX block rows of 16
            "1099511627776",
            "1073741824",
            "18446744073709551615",
            "18446744073709551616",
            "-1",
            "1e3",
            "",
        ])
        .prop_map(str::to_string),
    ]
}

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (1usize..40).prop_map(|n| n.to_string()),
        2 => (-1e6f64..1e6).prop_map(|v| format!("{v:e}")),
        2 => prop::sample::select(vec![
            "0", "-0", "1e400", "-1e309", "1e-400", "nan", "NaN", "-inf", "Infinity", "65504", "65520", "-70000",
            "1e39", "3.5e38", "1.7976931348623157e308", "99999999999999999999", "9223372036854775807", "0x10", "1_0",
            "x", "%", "\u{e9}", "\u{0}", "1.5.5", "+3", ".5", "5.",
        ])
        .prop_map(str::to_string),
    ]
}

/// A value: mostly finite and in range.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (-100i32..100).prop_map(|n| n.to_string()),
        3 => (-7e4f64..7e4).prop_map(|v| format!("{v:e}")),
        1 => token(),
    ]
}

/// An index: mostly inside the shape (5 to 9 rows and columns, most of the time).
fn index() -> impl Strategy<Value = String> {
    prop_oneof![12 => (1usize..6).prop_map(|n| n.to_string()), 1 => token()]
}

/// An entry line (rendered for the file's field: no value in a pattern file, mostly) or another line.
fn line() -> impl Strategy<Value = (Option<(String, String, String)>, String)> {
    prop_oneof![
        10 => (index(), index(), value()).prop_map(|e| (Some(e), String::new())),
        1 => prop::collection::vec(token(), 0..5).prop_map(|t| (None, t.join(" "))),
        1 => Just((None, "% a comment".to_string())),
        1 => Just((None, String::new())),
        1 => "[ -~\t]{0,30}".prop_map(|l| (None, l)),
    ]
}

/// A header, a size line (the entry count, most of the time, that of the lines that follow) and entry lines.
fn near_valid_file() -> impl Strategy<Value = Vec<u8>> {
    let dim = prop_oneof![8 => (5usize..10).prop_map(|n| n.to_string()), 1 => count()];
    let nnz = prop_oneof![3 => Just(None), 1 => count().prop_map(Some)];
    let lines = prop::collection::vec(line(), 0..12);
    let flags = (prop::bool::weighted(0.9), prop::bool::weighted(0.05), prop::bool::ANY);
    (header(), dim.clone(), dim, nnz, lines, flags).prop_map(
        |((h, pattern, general), r, c, z, lines, (square, mismatch, crlf))| {
            let nl = if crlf { "\r\n" } else { "\n" };
            let c = if square || !general { r.clone() } else { c };
            let lines: Vec<String> = lines
                .into_iter()
                .map(|(entry, other)| match entry {
                    Some((i, j, _)) if pattern != mismatch => format!("{i}\t{j}"),
                    Some((i, j, v)) => format!("{i} {j} {v}"),
                    None => other,
                })
                .collect();
            let data = lines.iter().filter(|l| !l.trim().is_empty() && !l.trim().starts_with('%')).count();
            let z = z.unwrap_or_else(|| data.to_string());
            let mut s = format!("{h}{nl}% comment{nl}{r} {c} {z}{nl}");
            for l in lines {
                s.push_str(&l);
                s.push_str(nl);
            }
            s.into_bytes()
        },
    )
}

/// Parses `data` (also through a 1-byte buffer: the answer must not depend on buffering) and converts the result,
/// everything under a 16 MiB cap.
fn check_bytes(data: &[u8]) -> std::result::Result<(), String> {
    let (res, _) = capped(16 * MIB, || {
        let whole = MatrixMarket::parse(Cursor::new(data), "h.mtx");
        let chunked = MatrixMarket::parse(BufReader::with_capacity(1, Cursor::new(data)), "h.mtx");
        match (&whole, &chunked) {
            (Ok(a), Ok(b)) if a == b => {}
            (Err(a), Err(b)) if a.to_string() == b.to_string() => {}
            _ => return Err(format!("buffering changes the answer: {whole:?} vs {chunked:?}")),
        }
        match whole {
            Err(e) => {
                if !matches!(e, Error::Io { .. } | Error::OutOfMemory { .. }) {
                    return Err(format!("parse gave {e:?}"));
                }
                typed(&e)
            }
            Ok(m) => {
                for &(r, c, v) in &m.entries {
                    if r >= m.rows || c >= m.cols || !v.is_finite() {
                        return Err(format!("entry ({r}, {c}, {v}) in a {}x{} matrix", m.rows, m.cols));
                    }
                }
                convert_all(&m)
            }
        }
    });
    res
}

/// Any f64 a hand-built matrix may hold: mostly moderate, sometimes NaN, infinite or beyond f16 and f32.
fn any_value() -> impl Strategy<Value = f64> {
    let odd = vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::MAX, 1e39, 70000.0];
    prop_oneof![4 => -1e5f64..1e5, 1 => prop::sample::select(odd)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..600)) {
        check_bytes(&data).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_header_never_panic(tail in prop::collection::vec(any::<u8>(), 0..400)) {
        let mut data = b"%%MatrixMarket matrix coordinate real general\n4 4 3\n".to_vec();
        data.extend_from_slice(&tail);
        check_bytes(&data).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn near_valid_files_never_panic(data in near_valid_file()) {
        check_bytes(&data).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn hand_built_matrices_never_panic(
        rows in prop_oneof![0usize..300, Just(usize::MAX), Just(1usize << 40)],
        cols in prop_oneof![0usize..300, Just(usize::MAX - 5), Just(68719476720usize)],
        entries in prop::collection::vec((0usize..320, 0usize..320, any_value()), 0..20),
    ) {
        let m = MatrixMarket { rows, cols, entries };
        let (res, _) = capped(16 * MIB, || convert_all(&m));
        res.map_err(TestCaseError::fail)?;
    }

    #[test]
    fn entries_outside_the_shape_are_rejected(rows in 0usize..100, cols in 0usize..100,
                                              entries in prop::collection::vec((0usize..120, 0usize..120), 0..12),
                                              bs in prop::sample::select(vec![16usize, 32, 64, 128])) {
        let entries: Vec<(usize, usize, f64)> = entries.into_iter().map(|(r, c)| (r, c, 1.0)).collect();
        let first_out = entries.iter().position(|&(r, c, _)| r >= rows || c >= cols);
        let m = MatrixMarket { rows, cols, entries: entries.clone() };
        match (m.to_bsr::<f32>(bs), first_out) {
            (Ok(a), None) => {
                prop_assert_eq!((a.rows(), a.cols()), m.padded_shape(bs));
            }
            (Err(Error::InvalidBsr(BsrError::EntryOutOfRange { index, row, col, rows: r, cols: c })), Some(i)) => {
                prop_assert_eq!((index, row, col, r, c), (i, entries[i].0, entries[i].1, rows, cols));
            }
            (other, _) => prop_assert!(false, "{:?} for first outside entry {:?}", other, first_out),
        }
    }

    #[test]
    fn non_finite_literals_name_their_line(comments in 0usize..4,
                                           bad in prop::sample::select(vec![
                                               "1e400", "-1e400", "1e309", "2e308", "inf", "-inf", "+Inf", "infinity",
                                               "-INFINITY", "nan", "NaN", "-nan"])) {
        let text = format!(
            "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n{}2 3 {bad}\n",
            "% c\n".repeat(comments)
        );
        let reason = names_line(parse(&text), 4 + comments).map_err(TestCaseError::fail)?;
        prop_assert!(reason.contains(bad) && reason.contains("finite"), "{}", reason);
    }

    #[test]
    fn matrix_market_round_trip(pattern in prop::sample::select(Pattern::ALL.to_vec()),
                                bs in prop::sample::select(vec![16usize, 32, 64]), br in 0usize..3, bc in 0usize..3,
                                density in 0.0f64..=1.0, seed in any::<u64>()) {
        let a = generate::<f16>(pattern, br * bs, bc * bs, bs, density, seed).unwrap();
        let path = temp_path("rt");
        a.write_matrix_market(&path).unwrap();
        let back = Bsr::<f16>::from_matrix_market(&path, bs);
        let limited = Bsr::<f16>::from_matrix_market_limited(&path, bs, 1 << 30);
        let mm = MatrixMarket::read(&path);
        let _ = std::fs::remove_file(&path);
        prop_assert_eq!(back.unwrap(), a.clone());
        prop_assert_eq!(limited.unwrap(), a.clone());
        let mm = mm.unwrap();
        prop_assert_eq!((mm.rows, mm.cols, mm.entries.len()), (a.rows(), a.cols(), a.values().len()));
    }

    #[test]
    fn hand_built_round_trip(rows in 0usize..70, cols in 0usize..70, seed in any::<u64>(),
                             bs in prop::sample::select(vec![16usize, 32])) {
        // Integers, so the f64 -> f32 -> text -> f64 trip is exact.
        let mut s = seed;
        let mut next = || { s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); s >> 33 };
        let n = if rows * cols == 0 { 0 } else { (next() % 30) as usize };
        let entries: Vec<_> = (0..n)
            .map(|_| ((next() as usize) % rows, (next() as usize) % cols, (next() % 2001) as f64 - 1000.0))
            .collect();
        let m = MatrixMarket { rows, cols, entries };
        let a = m.to_bsr::<f32>(bs).unwrap();
        prop_assert_eq!((a.rows(), a.cols()), m.padded_shape(bs));
        let path = temp_path("hb");
        a.write_matrix_market(&path).unwrap();
        let back = Bsr::<f32>::from_matrix_market(&path, bs);
        let _ = std::fs::remove_file(&path);
        prop_assert_eq!(back.unwrap(), a);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Huge declared sizes, tiny files.

#[test]
fn huge_declared_sizes_fail_fast_without_big_allocations() {
    let t0 = Instant::now();
    let h = "%%MatrixMarket matrix coordinate real general\n";

    // u32::MAX block rows of 16: a 16 GiB row_ptr, from a 63-byte file. Refused by a budget before allocating;
    // without one, the fallible allocation fails under the cap (OutOfMemory), no abort.
    let text = format!("{h}68719476720 16 0\n");
    assert_eq!(text.len(), 63);
    let m = parse(&text).unwrap();
    let (r, largest) = capped(MIB, || m.to_bsr_limited::<f32>(16, 1 << 30));
    let e = r.unwrap_err();
    let want = (u32::MAX as u128 + 1) * 4;
    assert!(matches!(e, Error::TooLarge { requested, limit, .. } if requested == want && limit == 1 << 30), "{e}");
    assert!(largest < MIB, "asked for {largest} bytes");
    let (r, _) = capped(64 * MIB, || m.to_bsr::<f32>(16));
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");

    // More block rows or columns than u32 can count: refused whatever the budget.
    for (rows, cols) in [("68719476736", "1"), ("1", "1099511627776"), ("18446744073709551615", "3")] {
        let m = parse(format!("{h}{rows} {cols} 0\n")).unwrap();
        let (r, largest) = capped(MIB, || m.to_bsr::<f16>(16));
        assert!(matches!(r, Err(Error::InvalidBsr(BsrError::TooLarge { .. }))), "{rows}x{cols}: {r:?}");
        assert!(largest < MIB);
    }

    // A declared entry count far beyond the file: the reservation follows the file, not the header.
    for (sym, nnz) in [("general", "1000000000000000000"), ("symmetric", "18446744073709551615")] {
        let text = format!("%%MatrixMarket matrix coordinate real {sym}\n5 5 {nnz}\n1 1 1\n");
        let (r, largest) = capped(MIB, || parse(&text));
        let reason = match r {
            Err(Error::Io { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(reason.contains("declares"), "{reason}");
        assert!(largest < MIB, "parse asked for {largest} bytes");
        // Through a file too (its size caps the reservation).
        let path = temp_path("nnz");
        std::fs::write(&path, &text).unwrap();
        let (r, largest) = capped(MIB, || MatrixMarket::read(&path));
        let _ = std::fs::remove_file(&path);
        assert!(matches!(r, Err(Error::Io { .. })), "{r:?}");
        assert!(largest < MIB, "read asked for {largest} bytes");
    }
    assert!(t0.elapsed() < Duration::from_secs(1), "took {:?}", t0.elapsed());
}

#[test]
fn many_distinct_blocks_under_a_small_limit() {
    // 81920 entries (a 1.3 MB file), each in its own 128x128 block: f16 values of ~2.7 GB, f32 ~5.4 GB.
    let k = 81920usize;
    let n = k * 128;
    let mut text = format!("%%MatrixMarket matrix coordinate real general\n{n} {n} {k}\n");
    for i in 0..k {
        text.push_str(&format!("{} {} 1\n", i * 128 + 1, (k - 1 - i) * 128 + 1));
    }
    assert!(text.len() > 1_300_000, "{}", text.len());
    let path = temp_path("blocks");
    std::fs::write(&path, &text).unwrap();

    let want = |elem: u128| (k as u128 + 1 + k as u128) * 4 + k as u128 * 128 * 128 * elem;
    let limit = 256 * MIB;
    let (r, largest) = capped(32 * MIB, || Bsr::<f16>::from_matrix_market_limited(&path, 128, limit));
    let e = r.unwrap_err();
    match &e {
        Error::TooLarge { requested, limit: l, .. } => {
            assert_eq!((*requested, *l), (want(2), limit as u128));
            let msg = e.to_string();
            assert!(msg.contains(&want(2).to_string()) && msg.contains(&limit.to_string()), "{msg}");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(largest <= 32 * MIB, "asked for {largest} bytes");

    // Without a budget: the allocation of the values fails under the cap, OutOfMemory, no abort.
    let m = MatrixMarket::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let (r, _) = capped(32 * MIB, || m.to_bsr::<f32>(128));
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");

    // The same entries with a budget that fits (bs 16: 512 bytes of f16 per block).
    let a = m.to_bsr_limited::<f16>(16, 64 * MIB).unwrap();
    assert_eq!(a.nnzb(), k);
    let need = (n as u128 / 16 + 1 + k as u128) * 4 + k as u128 * 256 * 2;
    let e = m.to_bsr_limited::<f16>(16, need as usize - 1).unwrap_err();
    assert!(matches!(e, Error::TooLarge { requested, .. } if requested == need), "{e}");
    assert!(m.to_bsr_limited::<f16>(16, need as usize).is_ok());
}

// ---------------------------------------------------------------------------------------------------------------
// Long lines.

/// `prefix` followed by `len` copies of `byte`, produced lazily (never held in memory).
fn lazy(prefix: &str, byte: u8, len: u64) -> impl std::io::BufRead + use<> {
    BufReader::new(Cursor::new(prefix.as_bytes().to_vec()).chain(std::io::repeat(byte).take(len)))
}

#[test]
fn very_long_lines_are_bounded_errors() {
    let t0 = Instant::now();
    let h = "%%MatrixMarket matrix coordinate real general\n";
    let gib = 1u64 << 30;
    let cases: Vec<(Box<dyn std::io::BufRead>, usize)> = vec![
        (Box::new(lazy("", b'a', gib)), 1),
        (Box::new(lazy(h, b'7', gib)), 2),
        (Box::new(lazy(&format!("{h}% c\n3 3 1\n% c\n1 1 "), b'1', gib)), 5),
        (Box::new(lazy(&format!("{h}%"), b'%', gib)), 2), // a comment too: every line is bounded
        (Box::new(lazy(&format!("{h}3 3 1\n1 1 1"), b' ', gib)), 3),
    ];
    for (reader, line) in cases {
        let (r, largest) = capped(4 * MIB, || MatrixMarket::parse(reader, "h.mtx"));
        let reason = names_line(r, line).unwrap();
        assert!(reason.contains("longer than") && reason.contains(&MAX_LINE_BYTES.to_string()), "{reason}");
        assert!(reason.len() < 300, "{} bytes", reason.len());
        assert!(largest <= 4 * MIB, "asked for {largest} bytes");
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "took {:?}", t0.elapsed());

    // Long lines within the limit: the messages quote a short prefix.
    let big = "9".repeat(900_000);
    let wide = "\u{20ac}".repeat(200_000);
    let texts = [
        format!("%%MatrixMarket matrix coordinate real general {big}\n"),
        format!("%%MatrixMarket matrix coordinate {big} general\n"),
        format!("%%MatrixMarket matrix coordinate real {wide}\n"),
        format!("{h}{big} 2\n"),
        format!("{h}1 {big}1 1\n"),
        format!("{h}2 2 1\n1 {big}\n"),
        format!("{h}2 2 1\n1 1 {big}\n"),
        format!("{h}2 2 1\n1 1 1 {big}\n"),
        format!("{h}2 2 1\n1 1 1{wide}\n"),
        format!("%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 {big}\n"),
        format!("%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n1 1 0.{big}\n"),
    ];
    for text in &texts {
        let e = parse(text).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::Io { .. }) && msg.len() < 300, "{} bytes: {msg:.400}", msg.len());
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Values.

#[test]
fn out_of_range_literals_are_errors() {
    let real = |v: &str| format!("%%MatrixMarket matrix coordinate real general\n2 2 1\n% c\n2 1 {v}\n");
    for bad in ["1e400", "-1e400", "1.8e308", "nan", "inf", "-Infinity"] {
        let reason = names_line(parse(real(bad)), 4).unwrap();
        assert!(reason.contains(bad), "{reason}");
    }
    // The extremes of f64 are fine; a literal below the smallest subnormal rounds to zero.
    assert_eq!(parse(real("1.7976931348623157e308")).unwrap().entries, vec![(1, 0, f64::MAX)]);
    assert_eq!(parse(real("-1e-400")).unwrap().entries, vec![(1, 0, -0.0)]);
    let int = |v: &str| format!("%%MatrixMarket matrix coordinate integer general\n2 2 1\n2 1 {v}\n");
    for bad in ["9223372036854775808", "-9223372036854775809", "1e3", "nan", "1.0"] {
        names_line(parse(int(bad)), 3).unwrap();
    }
    assert_eq!(parse(int("-9223372036854775808")).unwrap().entries, vec![(1, 0, i64::MIN as f64)]);
}

#[test]
fn values_beyond_the_element_type_are_errors() {
    let file = |entries: &str| format!("%%MatrixMarket matrix coordinate real general\n40 40 2\n{entries}");
    let non_finite = |r: sparsek::Result<Bsr<f16>>| match r {
        Err(Error::NonFinite { value, index, .. }) => (value, index),
        other => panic!("expected NonFinite, got {other:?}"),
    };
    // One entry beyond f16's range, another within: named by (0-based) position.
    let m = parse(file("1 1 1\n3 35 -70000\n")).unwrap();
    assert_eq!(non_finite(m.to_bsr::<f16>(32)), ("-7e4".to_string(), (2, 34)));
    assert_eq!(m.to_bsr::<f32>(32).unwrap().max_abs(), 70000.0);
    // Duplicates summing past the range.
    let m = parse(file("5 6 60000\n5 6 6000\n")).unwrap();
    assert_eq!(non_finite(m.to_bsr::<f16>(16)).1, (4, 5));
    // Rounding: 65519 rounds down to f16::MAX, 65520 up to infinity.
    let m = parse(file("1 1 65519\n2 2 65504\n")).unwrap();
    assert_eq!(m.to_bsr::<f16>(16).unwrap().max_abs(), 65504.0);
    let m = parse(file("1 1 65520\n2 2 1\n")).unwrap();
    assert_eq!(non_finite(m.to_bsr::<f16>(16)).1, (0, 0));
    // f32 and bf16: beyond ~3.4e38.
    let m = parse(file("1 1 1e39\n2 2 1\n")).unwrap();
    assert!(matches!(m.to_bsr::<f32>(16), Err(Error::NonFinite { index: (0, 0), .. })));
    assert!(matches!(m.to_bsr::<bf16>(16), Err(Error::NonFinite { index: (0, 0), .. })));
    assert!(m.to_bsr::<f64>(16).is_ok());
    // f64 sums overflow too.
    let m = parse(file("1 1 1.7e308\n1 1 1.7e308\n")).unwrap();
    assert!(matches!(m.to_bsr::<f64>(16), Err(Error::NonFinite { index: (0, 0), .. })));
    // A hand-built matrix with a NaN.
    let m = MatrixMarket { rows: 2, cols: 2, entries: vec![(1, 1, f64::NAN)] };
    assert!(matches!(m.to_bsr::<f64>(16), Err(Error::NonFinite { index: (1, 1), .. })));
}

#[test]
fn from_coo_keeps_non_finite_inputs_but_refuses_overflow() {
    let h = |v: f64| f16::from_f64(v);
    let e = Bsr::<f16>::from_coo(16, 16, 16, &[(3, 4, h(60000.0)), (3, 4, h(60000.0))]).unwrap_err();
    assert!(matches!(e, Error::NonFinite { index: (3, 4), .. }), "{e}");
    let a = Bsr::<f16>::from_coo(16, 16, 16, &[(3, 4, h(f64::NAN)), (5, 5, h(f64::INFINITY))]).unwrap();
    assert!(a.values()[3 * 16 + 4].is_nan());
    assert!(a.values()[5 * 16 + 5].is_infinite());
    let e = Bsr::<f64>::from_coo(16, 16, 16, &[(0, 1, f64::MAX), (0, 1, f64::MAX)]).unwrap_err();
    assert!(matches!(e, Error::NonFinite { index: (0, 1), .. }), "{e}");
}

// ---------------------------------------------------------------------------------------------------------------
// Edge cases that are valid.

#[test]
fn empty_matrices_parse_and_convert() {
    for (shape, sym) in [("0 0 0", "general"), ("0 7 0", "general"), ("7 0 0", "general"), ("5 5 0", "symmetric")] {
        let m = parse(format!("%%MatrixMarket matrix coordinate pattern {sym}\n{shape}\n")).unwrap();
        assert!(m.entries.is_empty());
        for bs in [16usize, 32, 64, 128] {
            let a = m.to_bsr::<f16>(bs).unwrap();
            assert_eq!((a.rows(), a.cols(), a.nnzb()), (m.rows.div_ceil(bs) * bs, m.cols.div_ceil(bs) * bs, 0));
            let b = m.to_bsr_limited::<f32>(bs, 4 + 4 * m.rows.div_ceil(bs)).unwrap();
            assert_eq!((b.rows(), b.cols(), b.row_ptr()), (a.rows(), a.cols(), a.row_ptr()));
        }
    }
}

#[test]
fn encodings_and_terminators() {
    // Non-UTF-8 bytes in a comment are fine; in an entry line, an error naming the line.
    let mut text = b"%%MatrixMarket matrix coordinate real general\r\n% caf\xe9\r\n2 2 1\r\n".to_vec();
    let mut ok = text.clone();
    ok.extend_from_slice(b"1 2 3.5");
    assert_eq!(parse(&ok).unwrap().entries, vec![(0, 1, 3.5)]);
    text.extend_from_slice(b"1 2 3\xff\n");
    let reason = names_line(parse(&text), 4).unwrap();
    assert!(reason.contains("UTF-8"), "{reason}");
}
