//! The SGD loop of `train_sgd.rs` on the GPU (issue 44): one block-sparse layer learns a teacher's values, the
//! structure fixed, every product on the device through the raw (view) API a framework would use, over buffers the
//! example owns: the student's f16 values are trained in place.
//!
//! A teacher `T` (512 x 768, 32 x 32 blocks, 30% of them, f16) makes the targets; the student has its structure and
//! fresh values. One step, for a batch `X` (768 x 64, a column per example, f16):
//!
//! 1. the targets `Y* = T @ X` ([`Gpu::spmm`], f16 out);
//! 2. the output's gradient in one launch, through the epilogue: `G = (1 / batch) * (S @ X) - (1 / batch) * Y*`
//!    ([`Gpu::spmm_raw`] with `alpha = 1 / batch`, `beta = -1 / batch` over the buffer holding `Y*`), f16;
//! 3. the weight's gradient applied as it is computed: one SDDMM writes `values = -lr * (G @ X^T) + values` into
//!    the student's own values ([`Gpu::sddmm_raw`], `Epilogue::new(-lr, 1.0)`);
//! 4. the input's gradient `dX = S^T @ G` ([`Gpu::spmm_t_raw`] over the transposed index made once for the
//!    structure, [`Gpu::transpose_index`]), checked once against the f64 oracle.
//!
//! The loss `0.5 * ||Y - Y*||^2 / batch = 0.5 * batch * ||G||^2` is read back every 25 steps. PASS when it fell
//! below 1e-4 of its start and the input gradient matched the oracle; without a GPU it says so and exits 0.
//! `cargo run -p sparsek --example train_sgd_gpu --release`.

use std::process::ExitCode;

use sparsek::check::{Tolerance, compare};
use sparsek::format::{Bsr, Pattern, generate};
use sparsek::gpu::{BsrArrays, BsrView, DenseView, DenseViewMut, Gpu, IndexType};
use sparsek::{Epilogue, Layout, Matrix, cpu, f16};

const M: usize = 512;
const K: usize = 768;
const BS: usize = 32;
const DENSITY: f64 = 0.30;
const BATCH: usize = 64;
const STEPS: usize = 200;
const LR: f32 = 0.5;

fn main() -> ExitCode {
    let gpu = match Gpu::new(0) {
        Ok(g) => g,
        Err(e) => {
            println!("train_sgd_gpu: no GPU ({e}): nothing to run");
            return ExitCode::SUCCESS;
        }
    };
    match run(&gpu) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("train_sgd_gpu: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A buffer's device address (its stream's; every launch here is on that stream).
fn addr<T>(stream: &std::sync::Arc<cudarc::driver::CudaStream>, s: &cudarc::driver::CudaSlice<T>) -> u64 {
    use cudarc::driver::DevicePtr;
    s.device_ptr(stream).0
}

fn run(gpu: &Gpu) -> Result<bool, Box<dyn std::error::Error>> {
    let stream = gpu.stream().clone();
    let teacher = generate::<f16>(Pattern::Uniform, M, K, BS, DENSITY, 1)?;
    let fresh = Matrix::<f16>::random(1, teacher.values().len(), 2)?;
    let values: Vec<f16> = fresh.as_slice().iter().map(|v| f16::from_f32(0.1 * v.to_f32())).collect();
    let student = Bsr::try_new(M, K, BS, teacher.row_ptr().to_vec(), teacher.col_idx().to_vec(), values)?;
    let nnzb = student.nnzb();
    // The student's arrays, owned here; the values are trained in place.
    let s_values = stream.clone_htod(student.values())?;
    let (s_row_ptr, s_col_idx) = (stream.clone_htod(student.row_ptr())?, stream.clone_htod(student.col_idx())?);
    let (values_ptr, row_ptr, col_idx) =
        (addr(&stream, &s_values), addr(&stream, &s_row_ptr), addr(&stream, &s_col_idx));
    let arrays = BsrArrays { values: values_ptr, row_ptr, col_idx, index: IndexType::U32 };
    // SAFETY: the arrays hold the student's validated structure and its values for the whole run; every launch
    // below is on `stream`, in order, and the host reads them back only after synchronising.
    let s_view: BsrView<'_, f16> = unsafe { BsrView::from_raw(arrays, M, K, BS, nnzb)? };
    // The transposed index, made once for the structure (from an upload of it; its values are not used).
    let structure = gpu.upload(&student)?;
    let transposed = gpu.transpose_index(&structure)?;
    let t_d = gpu.upload(&teacher)?;
    println!(
        "train_sgd_gpu: {M} x {K} BSR on {}, {BS} x {BS} blocks, {nnzb} of {} kept, batch {BATCH}, {STEPS} SGD steps, lr {LR}",
        gpu.info().name,
        (M / BS) * (K / BS)
    );
    let mut g_d = gpu.zeros::<f16>(M, BATCH)?;
    let mut dx: cudarc::driver::CudaSlice<f32> = stream.alloc_zeros(K * BATCH)?;
    let (mut first_loss, mut last_loss, mut input_grad_ok) = (None, f64::NAN, false);
    let inv = 1.0 / BATCH as f32;
    for step in 0..STEPS {
        let x = Matrix::<f16>::random(K, BATCH, 1000 + step as u64)?;
        let x_d = gpu.upload_matrix(&x)?;
        // 1. Y* = T @ X into G's buffer.
        gpu.spmm(&t_d, &x_d, &mut g_d, Epilogue::default())?;
        let s = stream.cu_stream();
        // 2. G = (S @ X - Y*) / batch, in place over Y*.
        {
            let mut g = g_d.view_mut();
            // SAFETY: the student's arrays as above; X and G are owned matrices described by safe views.
            unsafe { gpu.spmm_raw(s, &s_view, &x_d.view(), &mut g, None, Epilogue::new(inv, -inv))? };
        }
        let loss = if step % 25 == 0 || step + 1 == STEPS {
            let g = g_d.to_host()?;
            let sum: f64 = g.as_slice().iter().map(|v| f64::from(v.to_f32()).powi(2)).sum();
            let loss = 0.5 * BATCH as f64 * sum;
            println!("  step {step:>3}: loss {loss:.6e}");
            Some(loss)
        } else {
            None
        };
        if let Some(l) = loss {
            first_loss.get_or_insert(l);
            last_loss = l;
        }
        if step == 0 {
            // 4. dX = S^T @ G against the f64 oracle of the same (rounded) inputs.
            let mut dxv = DenseViewMut::from_cuda_slice(&mut dx, K, BATCH, BATCH, Layout::RowMajor)?;
            // SAFETY: as above.
            unsafe { gpu.spmm_t_raw(s, &s_view, &transposed.view(), &g_d.view(), &mut dxv, Epilogue::default())? };
            let (g, got) = (g_d.to_host()?, stream.clone_dtoh(&dx)?);
            let s_now = Bsr::try_new(M, K, BS, student.row_ptr().to_vec(), student.col_idx().to_vec(), {
                stream.clone_dtoh(&s_values)?
            })?;
            let zero = Matrix::<f32>::zeros(K, BATCH)?;
            let want = cpu::reference_t(&s_now, &g, &zero, Epilogue::default())?;
            let got = Matrix::from_fn(K, BATCH, |r, c| got[r * BATCH + c])?;
            let report = compare(&got, &want, Tolerance::for_operands_t(&s_now, &g, &zero, Epilogue::default()));
            println!("  input gradient dX = S^T @ G ({K} x {BATCH}) against the f64 oracle: {report}");
            input_grad_ok = report.passed();
        }
        // 3. values = -lr * (G @ X^T) + values, in place (the values are not read by anything else meanwhile).
        let g_view = DenseView::from_cuda_slice(g_d.as_slice(), M, BATCH, g_d.ld(), Layout::RowMajor)?;
        // SAFETY: the student's values buffer, nnzb * BS x BS row-major, owned here; only this launch touches it.
        let mut values = unsafe { DenseViewMut::<f16>::from_raw(values_ptr, nnzb * BS, BS, BS, Layout::RowMajor)? };
        // SAFETY: as above.
        unsafe { gpu.sddmm_raw(s, &g_view, &x_d.view(), &s_view, &mut values, Epilogue::new(-LR, 1.0))? };
    }
    stream.synchronize()?;
    let trained = stream.clone_dtoh(&s_values)?;
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (a, b) in trained.iter().zip(teacher.values()) {
        diff += f64::from(a.to_f32() - b.to_f32()).powi(2);
        norm += f64::from(b.to_f32()).powi(2);
    }
    let first = first_loss.unwrap_or(f64::NAN);
    let pass = last_loss < 1e-4 * first && input_grad_ok;
    println!(
        "{}: loss {first:.3e} -> {last_loss:.3e} ({:.1e} of its start), weight error {:.3e}",
        if pass { "PASS" } else { "FAIL" },
        last_loss / first,
        (diff / norm).sqrt()
    );
    Ok(pass)
}
