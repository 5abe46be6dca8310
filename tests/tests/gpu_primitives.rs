//! Every PTX wrapper of kernels-gpu driven by a small test kernel (tests/ptx/primitives_sm80.ptx, built from
//! kernels-gpu/src/test_kernels.rs) with iota or integer inputs, asserting exact results: lane ownership of
//! ldmatrix with and without .trans, cp.async zero-fill and wait_group ordering, one mma tile bit for bit, the
//! special registers, f16 conversions. Without a GPU each test prints a skip line.

use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaFunction, CudaModule, LaunchConfig, PushKernelArg};
use sparsek::f16;
use sparsek_layout::{mma_a_element, mma_b_element, mma_c_element};
use sparsek_tests::gpu;

const PTX: &str = include_str!("../ptx/primitives_sm80.ptx");

fn module(test: &str) -> Option<(&'static sparsek::gpu::Gpu, Arc<CudaModule>)> {
    static MODULE: OnceLock<Arc<CudaModule>> = OnceLock::new();
    let g = gpu(test)?;
    let m =
        MODULE.get_or_init(|| g.context().load_module(cudarc::nvrtc::Ptx::from_src(PTX)).expect("load primitives PTX"));
    Some((g, m.clone()))
}

fn func(m: &Arc<CudaModule>, name: &str) -> CudaFunction {
    m.load_function(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn cfg(threads: u32, smem: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (1, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: smem }
}

#[test]
fn special_registers() {
    let Some((g, m)) = module("special_registers") else { return };
    let s = g.stream();
    let (gx, gy, threads) = (3u32, 2u32, 96u32);
    let total = (gx * gy * threads) as usize;
    let mut out = s.clone_htod(&vec![u32::MAX; 6 * total]).unwrap();
    let f = func(&m, "test_indices");
    let mut b = s.launch_builder(&f);
    b.arg(&mut out).arg(&gx);
    let launch = LaunchConfig { grid_dim: (gx, gy, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
    unsafe { b.launch(launch) }.unwrap();
    let v = s.clone_dtoh(&out).unwrap();
    for by in 0..gy {
        for bx in 0..gx {
            for t in 0..threads {
                let i = (((by * gx + bx) * threads + t) * 6) as usize;
                assert_eq!(&v[i..i + 6], &[t, bx, by, threads, t % 32, t / 32], "block ({bx}, {by}) thread {t}");
            }
        }
    }
}

/// Element (row, col) of matrix j in the iota source: value = 64 * j + 8 * row + col.
fn iota(j: u32, row: u32, col: u32) -> u32 {
    64 * j + 8 * row + col
}

#[test]
fn ldmatrix_lane_ownership_all_variants() {
    let Some((g, m)) = module("ldmatrix_lane_ownership_all_variants") else { return };
    let s = g.stream();
    let src: Vec<u16> = (0..256u16).collect(); // 4 matrices of 8x8, row-major, matrix after matrix
    let src_d = s.clone_htod(&src).unwrap();
    let f = func(&m, "test_ldmatrix");
    for variant in 0u32..6 {
        let (count, trans) = ([1, 2, 4][variant as usize % 3], variant >= 3);
        let mut out = s.clone_htod(&[0xDEAD_BEEFu32; 128]).unwrap();
        let mut b = s.launch_builder(&f);
        b.arg(&src_d).arg(&mut out).arg(&variant);
        unsafe { b.launch(cfg(32, 512)) }.unwrap();
        let v = s.clone_dtoh(&out).unwrap();
        for lane in 0..32u32 {
            for j in 0..4u32 {
                let got = v[(4 * lane + j) as usize];
                if j >= count {
                    assert_eq!(got, 0xDEAD_BEEF, "variant {variant}: register {j} should not be written");
                    continue;
                }
                let (lo, hi) = if trans {
                    (iota(j, 2 * (lane % 4), lane / 4), iota(j, 2 * (lane % 4) + 1, lane / 4))
                } else {
                    (iota(j, lane / 4, 2 * (lane % 4)), iota(j, lane / 4, 2 * (lane % 4) + 1))
                };
                assert_eq!(got, lo | hi << 16, "variant {variant} (x{count}, trans {trans}) lane {lane} reg {j}");
            }
        }
    }
}

#[test]
fn cp_async_zero_fill_and_wait_group() {
    let Some((g, m)) = module("cp_async_zero_fill_and_wait_group") else { return };
    let s = g.stream();
    let src: Vec<u8> = (0..2048u32).map(|i| (i * 7 + 3) as u8 | 1).collect(); // never zero
    let sizes: Vec<u32> = (0..128u32).map(|i| [16, 0, 8, 4, 12, 2, 16, 14][(i % 8) as usize]).collect();
    let src_d = s.clone_htod(&src).unwrap();
    let sizes_d = s.clone_htod(&sizes).unwrap();
    let mut out = s.clone_htod(&vec![0x5Au8; 4096]).unwrap();
    let f = func(&m, "test_cp_async");
    let mut b = s.launch_builder(&f);
    b.arg(&src_d).arg(&sizes_d).arg(&mut out);
    unsafe { b.launch(cfg(64, 0)) }.unwrap();
    let v = s.clone_dtoh(&out).unwrap();
    for half in 0..2 {
        for chunk in 0..128usize {
            for byte in 0..16usize {
                let expect = if byte < sizes[chunk] as usize { src[16 * chunk + byte] } else { 0 };
                let got = v[2048 * half + 16 * chunk + byte];
                assert_eq!(
                    got,
                    expect,
                    "{} chunk {chunk} byte {byte} (src_bytes {})",
                    ["own", "other thread's"][half],
                    sizes[chunk]
                );
            }
        }
    }
}

fn mma_case(mode: u32, seed: u64) {
    let Some((g, m)) = module("mma_m16n8k16_bit_exact") else { return };
    let s = g.stream();
    let mut rng = sparsek::rng::Rng::new(seed);
    let a: Vec<i64> = (0..256).map(|_| rng.int_in(-8, 8)).collect(); // 16x16
    let b: Vec<i64> = (0..128).map(|_| rng.int_in(-8, 8)).collect(); // 16x8, [k][n]
    let c: Vec<i64> = (0..128).map(|_| rng.int_in(-100, 100)).collect(); // 16x8
    let h = |v: &[i64]| v.iter().map(|&x| f16::from_f64(x as f64)).collect::<Vec<_>>();
    let (a_d, b_d) = (s.clone_htod(&h(&a)).unwrap(), s.clone_htod(&h(&b)).unwrap());
    let c_d = s.clone_htod(&c.iter().map(|&x| x as f32).collect::<Vec<_>>()).unwrap();
    let mut d_d = s.clone_htod(&[f32::NAN; 128]).unwrap();
    let f = func(&m, "test_mma");
    let mut bld = s.launch_builder(&f);
    bld.arg(&a_d).arg(&b_d).arg(&c_d).arg(&mut d_d).arg(&mode);
    unsafe { bld.launch(cfg(32, 0)) }.unwrap();
    let d = s.clone_dtoh(&d_d).unwrap();
    for r in 0..16 {
        for col in 0..8 {
            let expect: i64 = (0..16).map(|k| a[16 * r + k] * b[8 * k + col]).sum::<i64>() + c[8 * r + col];
            assert_eq!(d[8 * r + col].to_bits(), (expect as f32).to_bits(), "mode {mode} seed {seed} D[{r}][{col}]");
        }
    }
}

#[test]
fn mma_m16n8k16_bit_exact() {
    if module("mma_m16n8k16_bit_exact").is_none() {
        return;
    }
    for seed in 0..4 {
        mma_case(0, seed); // fragments from plain loads: mma alone
        mma_case(1, seed); // fragments through ldmatrix / ldmatrix.trans, as in the SpMM kernel
    }
}

/// The host-side fragment maps (the sparsek-layout crate, used by kernels and tests) are bijections onto their tiles.
#[test]
fn fragment_maps_are_bijections() {
    let mut a = [[false; 16]; 16];
    let mut b = [[false; 8]; 16];
    let mut c = [[false; 8]; 16];
    for lane in 0..32 {
        for h in 0..8 {
            let (r, k) = mma_a_element(lane, h);
            assert!(!std::mem::replace(&mut a[r as usize][k as usize], true), "A ({r}, {k}) twice");
        }
        for h in 0..4 {
            let (k, n) = mma_b_element(lane, h);
            assert!(!std::mem::replace(&mut b[k as usize][n as usize], true), "B ({k}, {n}) twice");
            let (r, n) = mma_c_element(lane, h);
            assert!(!std::mem::replace(&mut c[r as usize][n as usize], true), "C ({r}, {n}) twice");
        }
    }
}

#[test]
fn f16_conversions() {
    let Some((g, m)) = module("f16_conversions") else { return };
    let s = g.stream();
    let inp: Vec<f32> = vec![1.0, -2.5, 65504.0, 1e-7, 0.1, 3.0e5, -0.0, 1.0 / 3.0];
    let inp_d = s.clone_htod(&inp).unwrap();
    let mut out = s.clone_htod(&[0u32; 4]).unwrap();
    let mut back = s.clone_htod(&[0f32; 8]).unwrap();
    let f = func(&m, "test_cvt");
    let mut bld = s.launch_builder(&f);
    bld.arg(&inp_d).arg(&mut out).arg(&mut back);
    unsafe { bld.launch(cfg(4, 0)) }.unwrap();
    let (o, bk) = (s.clone_dtoh(&out).unwrap(), s.clone_dtoh(&back).unwrap());
    for i in 0..4 {
        let (lo, hi) = (f16::from_f32(inp[2 * i]), f16::from_f32(inp[2 * i + 1]));
        assert_eq!(o[i], u32::from(lo.to_bits()) | u32::from(hi.to_bits()) << 16, "pair {i}");
        assert_eq!(bk[2 * i].to_bits(), lo.to_f32().to_bits());
        assert_eq!(bk[2 * i + 1].to_bits(), hi.to_f32().to_bits());
    }
}
