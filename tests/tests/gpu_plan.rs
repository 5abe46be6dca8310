//! One truth about what ran: `Gpu::plan` returns the plan a launch runs, and `Gpu::last_plan` the plan the last
//! launch ran; on shapes that take each decision (the decode kernels, the narrow tile with split rows, the flat
//! block list, bs 64's tile of 32 for a dominating row, the mid tiles, the wide or sm_90a kernels with and without
//! split rows) the two are the same value, and the output is right (checked against the f64 oracle). Without a
//! GPU every test prints a skip line (SPARSEK_REQUIRE_GPU=1 makes that a failure).

use sparsek::check::{Expected, RowSample};
use sparsek::format::{Pattern, generate};
use sparsek::gpu::{Decomposition, Gpu, LaunchPlan};
use sparsek::{Epilogue, Layout, Matrix, f16};
use sparsek_tests::{gpu, gpu_shared};

/// `C = A @ B` through `Gpu::spmm` on a fresh random problem; returns the plan `Gpu::plan` predicted and the one
/// the launch ran, after checking C against the oracle.
fn predicted_and_ran(
    gpu: &Gpu,
    (m, k, n): (usize, usize, usize),
    bs: usize,
    density: f64,
    pattern: Pattern,
    seed: u64,
) -> (LaunchPlan, LaunchPlan) {
    let a = generate::<f16>(pattern, m, k, bs, density, seed).unwrap();
    let b = Matrix::<f16>::random(k, n, seed ^ 0xB).unwrap();
    let c0 = Matrix::<f32>::filled(m, n, n, f32::NAN).unwrap();
    let (a_d, b_d) = (gpu.upload(&a).unwrap(), gpu.upload_matrix(&b).unwrap());
    let mut c_d = gpu.upload_matrix(&c0).unwrap();
    let ep = Epilogue::default();
    let layouts = (Layout::RowMajor, Layout::RowMajor);
    let predicted = gpu.plan::<f16, f32>(&a_d, n, layouts, ep).unwrap();
    gpu.spmm(&a_d, &b_d, &mut c_d, ep).unwrap();
    let ran = gpu.last_plan().expect("a launch records its plan");
    let got = c_d.to_host().unwrap();
    let expected = Expected::compute(&a, &b, &c0, ep, RowSample::auto(m, n, 128, seed), |_, _| {}).unwrap();
    let report = expected.check(&got);
    assert!(report.passed(), "{m}x{n}x{k} bs {bs} {density} {pattern:?}: {report}\nplan: {ran}");
    (predicted, ran)
}

/// (M, K, N), bs, density, pattern.
type Case = ((usize, usize, usize), usize, f64, Pattern);

#[test]
fn the_plan_predicted_is_the_plan_that_ran() {
    let Some(gpu) = gpu("the_plan_predicted_is_the_plan_that_ran") else { return };
    let _shared = gpu_shared();
    let cases: [Case; 9] = [
        ((1536, 384, 1), 32, 0.5, Pattern::Uniform),     // decode kernels
        ((4096, 16384, 8), 64, 0.22, Pattern::Skewed),   // narrow tile, split rows (or flat)
        ((16384, 16384, 16), 64, 0.22, Pattern::Skewed), // flat block list
        ((4096, 4096, 48), 64, 0.22, Pattern::Skewed),   // mid tiles, the tile of 32 for a dominating row
        ((2048, 2048, 40), 16, 0.3, Pattern::Uniform),   // bs 16's mid tile
        ((4096, 4096, 256), 64, 0.22, Pattern::Uniform), // wide or sm_90a
        ((8192, 8192, 512), 128, 0.22, Pattern::Skewed), // sm_90a split rows
        ((2048, 2048, 300), 32, 0.1, Pattern::Banded),   // wide tile
        ((1024, 1024, 64), 128, 0.0, Pattern::Empty),    // no blocks
    ];
    let mut decompositions = Vec::new();
    for (i, &(shape, bs, density, pattern)) in cases.iter().enumerate() {
        let (predicted, ran) = predicted_and_ran(gpu, shape, bs, density, pattern, 0x9_1A0 + i as u64);
        eprintln!("{shape:?} bs {bs} {density} {pattern:?}: {ran}");
        assert_eq!(predicted, ran, "Gpu::plan differs from the plan that ran");
        assert!(ran.ctas > 0 && ran.threads > 0 && ran.group_rows > 0, "{ran}");
        assert!(ran.choice.is_some(), "a launch that resolves its kernel knows its family and source: {ran}");
        decompositions.push(ran.decomposition);
    }
    // The cases take more than one decomposition (on any GPU with the split workspace: split rows or the flat
    // list at least once).
    assert!(decompositions.contains(&Decomposition::WholeRows), "{decompositions:?}");
    assert!(decompositions.iter().any(|d| *d != Decomposition::WholeRows), "{decompositions:?}");
}
