//! Trains one block-sparse layer with a plain SGD loop, on the CPU backend (issue 44: the backward products; the
//! GPU kernels for them come next, the loop stays the same).
//!
//! A teacher layer `T` (a 512 x 768 BSR matrix of 32 x 32 blocks, 30% of them, f32) makes the targets; a student
//! with the same block structure and fresh random values learns them from random inputs, the structure fixed and
//! only the stored values trained. One step, for a batch `X` (768 x 64, a column per example):
//!
//! 1. forward: `Y = S @ X` ([`cpu::spmm`]), the targets `Y* = T @ X`, the loss `0.5 * ||Y - Y*||^2 / batch`;
//! 2. the output's gradient `G = (Y - Y*) / batch`;
//! 3. the weight's gradient at the student's blocks, `dS = G @ X^T`, applied as it is computed: one SDDMM writes
//!    `values = -lr * (G @ X^T) + 1 * values` ([`cpu::sddmm`] with `Epilogue::new(-lr, 1.0)`);
//! 4. the input's gradient `dX = S^T @ G` ([`cpu::spmm_t`] over the transposed index, built once for the
//!    structure), which a layer below would take as its output gradient; here it is checked once against the
//!    f64 oracle.
//!
//! It prints the loss every 25 steps and the relative weight error, then PASS when the loss fell below 1e-4 of
//! its start (the student's values reach the teacher's) and the input gradient matched the oracle, else FAIL.
//! Run it with `cargo run -p sparsek --example train_sgd --release`.

use std::process::ExitCode;

use sparsek::check::Tolerance;
use sparsek::format::{Bsr, BsrTranspose, Pattern, generate};
use sparsek::{Epilogue, Matrix, cpu};

const M: usize = 512;
const K: usize = 768;
const BS: usize = 32;
const DENSITY: f64 = 0.30;
const BATCH: usize = 64;
const STEPS: usize = 200;
const LR: f32 = 0.5;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("train_sgd: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> sparsek::Result<bool> {
    let teacher = generate::<f32>(Pattern::Uniform, M, K, BS, DENSITY, 1)?;
    // The student: the teacher's structure, other values (a draw of another seed), scaled down.
    let fresh = Matrix::<f32>::random(1, teacher.values().len(), 2)?;
    let values: Vec<f32> = fresh.as_slice().iter().map(|v| 0.1 * v).collect();
    let mut student = Bsr::try_new(M, K, BS, teacher.row_ptr().to_vec(), teacher.col_idx().to_vec(), values)?;
    let transposed = BsrTranspose::new(&student)?;
    println!(
        "train_sgd: {M} x {K} BSR, {BS} x {BS} blocks, {} of {} kept ({:.0}%), batch {BATCH}, {STEPS} SGD steps, lr {LR}",
        student.nnzb(),
        (M / BS) * (K / BS),
        100.0 * student.nnzb() as f64 / ((M / BS) * (K / BS)) as f64
    );
    let mut first_loss = None;
    let mut last_loss = f64::NAN;
    let mut input_grad_ok = false;
    for step in 0..STEPS {
        let x = Matrix::<f32>::random(K, BATCH, 1000 + step as u64)?;
        let (mut y, mut target) = (Matrix::<f32>::zeros(M, BATCH)?, Matrix::<f32>::zeros(M, BATCH)?);
        cpu::spmm(&student, &x, &mut y, Epilogue::default())?;
        cpu::spmm(&teacher, &x, &mut target, Epilogue::default())?;
        let mut g = Matrix::<f32>::zeros(M, BATCH)?;
        let mut loss = 0.0f64;
        for ((gv, yv), tv) in g.as_mut_slice().iter_mut().zip(y.as_slice()).zip(target.as_slice()) {
            let d = yv - tv;
            loss += 0.5 * f64::from(d) * f64::from(d);
            *gv = d / BATCH as f32;
        }
        loss /= BATCH as f64;
        first_loss.get_or_insert(loss);
        last_loss = loss;
        if step == 0 {
            // The input's gradient, dX = S^T @ G, against the f64 oracle of the same inputs.
            let mut dx = Matrix::<f32>::zeros(K, BATCH)?;
            cpu::spmm_t(&student, &transposed, &g, &mut dx, Epilogue::default())?;
            let expected = cpu::reference_t(&student, &g, &Matrix::<f32>::zeros(K, BATCH)?, Epilogue::default())?;
            let zero = Matrix::<f32>::zeros(K, BATCH)?;
            let tol = Tolerance::for_operands_t(&student, &g, &zero, Epilogue::default());
            let report = sparsek::check::compare(&dx, &expected, tol);
            println!("  input gradient dX = S^T @ G ({K} x {BATCH}) against the f64 oracle: {report}");
            input_grad_ok = report.passed();
        }
        if step % 25 == 0 || step + 1 == STEPS {
            println!("  step {step:>3}: loss {loss:.6e}, weight error {:.3e}", weight_error(&student, &teacher));
        }
        // The weight's gradient at the student's blocks, applied in place: values = -lr * (G @ X^T) + values.
        cpu::sddmm(&g, &x, &mut student, Epilogue::new(-LR, 1.0))?;
    }
    let first = first_loss.unwrap_or(f64::NAN);
    let pass = last_loss < 1e-4 * first && input_grad_ok;
    println!(
        "{}: loss {first:.3e} -> {last_loss:.3e} ({:.1e} of its start), weight error {:.3e}",
        if pass { "PASS" } else { "FAIL" },
        last_loss / first,
        weight_error(&student, &teacher)
    );
    Ok(pass)
}

/// `||S - T|| / ||T||` over the stored values (the same structure).
fn weight_error(s: &Bsr<f32>, t: &Bsr<f32>) -> f64 {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (a, b) in s.values().iter().zip(t.values()) {
        diff += f64::from(a - b).powi(2);
        norm += f64::from(*b).powi(2);
    }
    (diff / norm).sqrt()
}
