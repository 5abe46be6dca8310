//! The dense `Matrix` constructors and accessors, with shapes from tiny to overflowing.
//!
//! Every shape is classified here, in u128 arithmetic, before the call:
//! - invalid arguments (`ld < max(cols, 1)`, `lo_hi` outside `0..=2048`, data too short): the call is made
//!   whatever the sizes, and must be a typed Err without allocating for the shape;
//! - element count overflowing usize, or bytes beyond `isize::MAX`: must be `Error::TooLarge` (`from_vec`:
//!   `InvalidMatrix` or `TooLarge`), checked before allocating;
//! - bytes beyond 2^47 (no x86-64 or aarch64 process can map that much) but within `isize::MAX`: must be
//!   `Error::OutOfMemory` (the allocation is attempted fallibly and fails; the target makes AddressSanitizer
//!   return null instead of aborting);
//! - at most `CAP` elements: must be Ok, with the shape, leading dimension and contents checked: `from_vec`
//!   keeps the data; `filled` fills everything, padding included; `zeros` is zeros; `from_fn` calls `f` once
//!   per element in row-major order; `random` lies in [-1, 1]; `random_int` gives integers in
//!   `[-lo_hi, lo_hi]`; `with_ld` copies the elements and fills the padding; `convert` to f16 is `NonFinite`
//!   exactly at the first finite value that overflows, else rounds once; `first_non_finite` finds the first
//!   NaN/Inf in row-major order; `row`, `get`, `set` address `data[r * ld + c]`; `needed_len` is exact;
//! - anything else (legitimately huge) is not run.
#![no_main]

use arbitrary::Arbitrary;
use sparsek::{Error, Matrix, Scalar, bf16, f16};
use sparsek_fuzz::{Rng, SPECIAL_F32, span};

/// Largest element count of a constructor call expected to succeed.
const CAP: u128 = 1 << 16;
/// Requests above this many bytes cannot be mapped on a 48-bit address space: they must fail cleanly.
const UNMAPPABLE: u128 = 1 << 47;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Dim {
    Small(u8),
    /// 2^(16 + k % 48): from legitimately large to overflowing in products.
    Pow2(u8),
    /// usize::MAX - k.
    Max(u8),
    Any(u64),
}

impl Dim {
    fn get(self) -> usize {
        match self {
            Dim::Small(k) => k as usize % 40,
            Dim::Pow2(k) => 1usize << (16 + k as u32 % 48),
            Dim::Max(k) => usize::MAX - k as usize,
            Dim::Any(x) => x as usize,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Elem {
    F32,
    F16,
    Bf16,
    F64,
}

#[derive(Arbitrary, Debug)]
enum Op {
    FromVec { rows: Dim, cols: Dim, ld: Dim, len: u16, exact: bool, seed: u64, new_ld: Dim },
    Filled { rows: Dim, cols: Dim, ld: Dim, v: u8 },
    Zeros { rows: Dim, cols: Dim },
    FromFn { rows: Dim, cols: Dim },
    Random { rows: Dim, cols: Dim, seed: u64 },
    RandomInt { rows: Dim, cols: Dim, lo_hi: i64, seed: u64 },
    NeededLen { rows: Dim, cols: Dim, ld: Dim },
}

#[derive(Arbitrary, Debug)]
struct Input {
    elem: Elem,
    op: Op,
}

/// What a sized constructor must do.
#[derive(Debug, PartialEq)]
enum Class {
    Ok,
    TooLarge,
    OutOfMemory,
    Skip,
}

fn classify<T>(elements: u128) -> Class {
    let bytes = elements.saturating_mul(std::mem::size_of::<T>() as u128);
    if elements > usize::MAX as u128 || bytes > isize::MAX as u128 {
        Class::TooLarge
    } else if bytes > UNMAPPABLE {
        Class::OutOfMemory
    } else if elements <= CAP {
        Class::Ok
    } else {
        Class::Skip
    }
}

fn check_class<T: std::fmt::Debug>(what: &str, got: &sparsek::Result<T>, class: &Class) {
    let ok = match (got, class) {
        (Ok(_), Class::Ok) => true,
        (Err(Error::TooLarge { .. }), Class::TooLarge) => true,
        (Err(Error::OutOfMemory { .. }), Class::OutOfMemory) => true,
        _ => false,
    };
    assert!(ok, "{what}: got {got:?}, expected {class:?}");
}

fn value<T: Scalar>(rng: &mut Rng) -> T {
    if rng.below(3) == 0 {
        T::from_f32(SPECIAL_F32[rng.below(SPECIAL_F32.len())])
    } else {
        T::from_f64(rng.int(100) as f64 / 8.0)
    }
}

/// The bytes of a value (bit-for-bit comparisons, NaN payloads included).
fn bits<T: Scalar>(v: T) -> Vec<u8> {
    bytemuck::bytes_of(&v).to_vec()
}

/// The logical elements at a few rows: first, last and some in between (rows may be huge when cols == 0).
fn sample_rows(rows: usize, rng: &mut Rng) -> Vec<usize> {
    if rows == 0 {
        return Vec::new();
    }
    if rows <= 64 {
        return (0..rows).collect();
    }
    let mut v = vec![0, rows - 1];
    v.extend((0..6).map(|_| rng.below(rows)));
    v
}

/// Checks a matrix against its documented layout: `row(r)` is `data[r*ld .. r*ld + cols]`.
fn check_layout<T: Scalar>(m: &Matrix<T>, rows: usize, cols: usize, ld: usize, rng: &mut Rng) {
    assert_eq!((m.rows(), m.cols(), m.ld()), (rows, cols, ld), "shape");
    let need = span(rows, cols, ld);
    assert!(m.as_slice().len() as u128 >= need, "storage {} shorter than {need}", m.as_slice().len());
    for r in sample_rows(rows, rng) {
        let row = m.row(r);
        assert_eq!(row.len(), cols);
        if cols > 0 {
            let want = &m.as_slice()[r * ld..r * ld + cols];
            assert!(row.iter().zip(want).all(|(a, b)| bits(*a) == bits(*b)), "row {r}");
            let c = rng.below(cols);
            assert_eq!(bits(m.get(r, c)), bits(m.as_slice()[r * ld + c]), "get({r}, {c})");
        }
    }
}

/// Every (row, col) in row-major order: nothing at all when a dimension is 0, however large the other (the
/// target's own loops stay proportional to the elements).
fn cells(rows: usize, cols: usize) -> impl Iterator<Item = (usize, usize)> {
    let rows = if cols == 0 { 0 } else { rows };
    (0..rows).flat_map(move |r| (0..cols).map(move |c| (r, c)))
}

fn first_non_finite<T: Scalar>(m: &Matrix<T>) -> Option<(usize, usize)> {
    cells(m.rows(), m.cols()).find(|&(r, c)| !m.as_slice()[r * m.ld() + c].to_f64().is_finite())
}

fn run<T: Scalar>(op: Op) {
    let mut rng = Rng::new(0x5eed);
    match op {
        Op::FromVec { rows, cols, ld, len, exact, seed, new_ld } => {
            let (rows, cols, ld) = (rows.get(), cols.get(), ld.get());
            let need = span(rows, cols, ld);
            let len = if exact && need <= 4096 { need as usize } else { len as usize % 4096 };
            let mut vrng = Rng::new(seed);
            let data: Vec<T> = (0..len).map(|_| value(&mut vrng)).collect();
            let got = Matrix::from_vec(rows, cols, ld, data.clone());
            let valid = ld >= cols.max(1) && need <= usize::MAX as u128 && len as u128 >= need;
            let m = match got {
                Ok(m) => {
                    assert!(valid, "from_vec({rows}, {cols}, {ld}, {len} elements) succeeded");
                    m
                }
                Err(Error::InvalidMatrix { .. } | Error::TooLarge { .. }) if !valid => return,
                Err(e) => panic!("from_vec({rows}, {cols}, {ld}, {len} elements): {e:?} (valid: {valid})"),
            };
            check_layout(&m, rows, cols, ld, &mut rng);
            assert!(m.as_slice().iter().zip(&data).all(|(a, b)| bits(*a) == bits(*b)) && m.as_slice().len() == len);

            // set / get.
            let mut m2 = m.clone();
            if rows > 0 && cols > 0 {
                let (r, c) = (rng.below(rows), rng.below(cols));
                let v = T::from_f64(7.5);
                m2.set(r, c, v);
                assert_eq!(bits(m2.get(r, c)), bits(v));
                assert_eq!(bits(m2.as_slice()[r * ld + c]), bits(v));
                m2.row_mut(r)[c] = T::from_f64(-1.0);
                assert_eq!(m2.get(r, c).to_f64(), -1.0);
            }

            let elements = rows as u128 * cols as u128;
            if elements <= CAP {
                assert_eq!(m.first_non_finite().map(|(r, c, _)| (r, c)), first_non_finite(&m), "first_non_finite");
                // convert to f16: NonFinite at the first finite value that overflows, else rounded once.
                let first_bad = cells(rows, cols).find(|&(r, c)| {
                    let v = m.get(r, c).to_f64();
                    v.is_finite() && f16::from_f64(v).is_infinite()
                });
                match (m.convert::<f16>(), first_bad) {
                    (Ok(h), None) => {
                        check_layout(&h, rows, cols, cols.max(1), &mut rng);
                        for (r, c) in cells(rows, cols) {
                            let (x, y) = (h.get(r, c), f16::from_f64(m.get(r, c).to_f64()));
                            assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()), "convert ({r}, {c})");
                        }
                    }
                    (Err(Error::NonFinite { index, .. }), Some(at)) => assert_eq!(index, at, "convert: position"),
                    (got, want) => panic!("convert::<f16>: {:?}, first overflow {want:?}", got.err()),
                }
            }

            // with_ld: like filled for the new leading dimension, then the elements copied.
            let new_ld = new_ld.get();
            let pad = T::from_f64(-3.0);
            let got = if new_ld < cols.max(1) {
                let got = m.with_ld(new_ld, pad);
                let refused = matches!(got, Err(Error::InvalidMatrix { .. } | Error::TooLarge { .. }));
                assert!(refused, "with_ld({new_ld}) of {cols} columns: {got:?}");
                return;
            } else {
                let class = classify::<T>(span(rows, cols, new_ld));
                if class == Class::Skip {
                    return;
                }
                let got = m.with_ld(new_ld, pad);
                check_class("with_ld", &got, &class);
                got
            };
            if let Ok(w) = got {
                check_layout(&w, rows, cols, new_ld, &mut rng);
                for r in sample_rows(rows, &mut rng) {
                    assert!(w.row(r).iter().zip(m.row(r)).all(|(a, b)| bits(*a) == bits(*b)), "with_ld row {r}");
                    let next = (r + 1).saturating_mul(new_ld).min(w.as_slice().len());
                    let padding = &w.as_slice()[r.saturating_mul(new_ld).saturating_add(cols).min(next)..next];
                    assert!(padding.iter().all(|p| bits(*p) == bits(pad)), "with_ld padding of row {r}");
                }
            }
        }
        Op::Filled { rows, cols, ld, v } => {
            let (rows, cols, ld) = (rows.get(), cols.get(), ld.get());
            let v = T::from_f32(SPECIAL_F32[v as usize % SPECIAL_F32.len()]);
            if ld < cols.max(1) {
                let got = Matrix::filled(rows, cols, ld, v);
                // Refused as such, not after trying to allocate (an OutOfMemory or a huge allocation here is a bug).
                let refused = matches!(got, Err(Error::InvalidMatrix { .. } | Error::TooLarge { .. }));
                assert!(refused, "filled({rows}, {cols}, ld {ld}): {got:?}");
                return;
            }
            let class = classify::<T>(span(rows, cols, ld));
            if class == Class::Skip {
                return;
            }
            let got = Matrix::filled(rows, cols, ld, v);
            check_class(&format!("filled({rows}, {cols}, {ld})"), &got, &class);
            if let Ok(m) = got {
                check_layout(&m, rows, cols, ld, &mut rng);
                assert!(m.as_slice().iter().all(|x| bits(*x) == bits(v)), "filled: every element, padding included");
            }
        }
        Op::Zeros { rows, cols } => {
            let (rows, cols) = (rows.get(), cols.get());
            let class = classify::<T>(rows as u128 * cols as u128);
            if class == Class::Skip {
                return;
            }
            let got = Matrix::<T>::zeros(rows, cols);
            check_class(&format!("zeros({rows}, {cols})"), &got, &class);
            if let Ok(m) = got {
                check_layout(&m, rows, cols, cols.max(1), &mut rng);
                assert!(m.as_slice().iter().all(|x| x.to_f64() == 0.0 && x.to_f64().is_sign_positive()));
            }
        }
        Op::FromFn { rows, cols } => {
            let (rows, cols) = (rows.get(), cols.get());
            let class = classify::<T>(rows as u128 * cols as u128);
            if class == Class::Skip {
                return;
            }
            let mut calls = Vec::new();
            let got = Matrix::<T>::from_fn(rows, cols, |r, c| {
                calls.push((r, c));
                T::from_f64((r * 64 + c) as f64)
            });
            check_class(&format!("from_fn({rows}, {cols})"), &got, &class);
            if let Ok(m) = got {
                check_layout(&m, rows, cols, cols.max(1), &mut rng);
                let want: Vec<(usize, usize)> = cells(rows, cols).collect();
                assert!(calls == want, "from_fn: f called out of row-major order or not once per element");
                for (r, c) in cells(rows, cols) {
                    assert_eq!(bits(m.get(r, c)), bits(T::from_f64((r * 64 + c) as f64)));
                }
            } else {
                assert!(calls.is_empty(), "from_fn called f before failing");
            }
        }
        Op::Random { rows, cols, seed } => {
            let (rows, cols) = (rows.get(), cols.get());
            let class = classify::<T>(rows as u128 * cols as u128);
            if class == Class::Skip {
                return;
            }
            let got = Matrix::<T>::random(rows, cols, seed);
            check_class(&format!("random({rows}, {cols})"), &got, &class);
            if let Ok(m) = got {
                check_layout(&m, rows, cols, cols.max(1), &mut rng);
                assert!(m.as_slice().iter().all(|x| (-1.0..=1.0).contains(&x.to_f64())), "random: outside [-1, 1]");
                let again = Matrix::<T>::random(rows, cols, seed).expect("random again");
                assert!(
                    m.as_slice().iter().zip(again.as_slice()).all(|(a, b)| bits(*a) == bits(*b)),
                    "random: not deterministic"
                );
            }
        }
        Op::RandomInt { rows, cols, lo_hi, seed } => {
            let (rows, cols) = (rows.get(), cols.get());
            let lo_hi = if lo_hi.unsigned_abs() % 4 == 0 { lo_hi } else { lo_hi % 2100 };
            if !(0..=2048).contains(&lo_hi) {
                let got = Matrix::<T>::random_int(rows, cols, lo_hi, seed);
                assert!(matches!(got, Err(Error::InvalidArgument { .. })), "random_int lo_hi {lo_hi}: {got:?}");
                return;
            }
            let class = classify::<T>(rows as u128 * cols as u128);
            if class == Class::Skip {
                return;
            }
            let got = Matrix::<T>::random_int(rows, cols, lo_hi, seed);
            check_class(&format!("random_int({rows}, {cols}, {lo_hi})"), &got, &class);
            if let Ok(m) = got {
                check_layout(&m, rows, cols, cols.max(1), &mut rng);
                // Integers in range (bf16 holds every integer only up to 256: rounded ones are still integers).
                let bound = T::from_f64(lo_hi as f64).to_f64();
                assert!(
                    m.as_slice().iter().all(|x| x.to_f64().fract() == 0.0 && x.to_f64().abs() <= bound),
                    "random_int: outside the integers of [-{lo_hi}, {lo_hi}]"
                );
            }
        }
        Op::NeededLen { rows, cols, ld } => {
            let (rows, cols, ld) = (rows.get(), cols.get(), ld.get());
            let want = span(rows, cols, ld);
            let want = (want <= usize::MAX as u128).then_some(want as usize);
            assert_eq!(Matrix::<T>::needed_len(rows, cols, ld), want, "needed_len({rows}, {cols}, {ld})");
        }
    }
}

sparsek_fuzz::target!(|input: Input| {
    match input.elem {
        Elem::F32 => run::<f32>(input.op),
        Elem::F16 => run::<f16>(input.op),
        Elem::Bf16 => run::<bf16>(input.op),
        Elem::F64 => run::<f64>(input.op),
    }
});
