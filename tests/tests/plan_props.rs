//! Properties of the planning room, on an estimated H100 and H200 (no GPU), for generated problems (block sizes,
//! shapes, densities, row lengths, capture and tile-counter states). Under an SM limit (`Policy::sm_limit`): a limit
//! never makes a plan fail where the unlimited one succeeds, a forward sm_90a grid never holds more CTAs than the
//! limit's SMs can take, the plan reports the limit exactly when it is below the device's SMs, and a limit at or
//! above them changes nothing. Under CUDA graph capture: a launch makes every choice it makes outside a graph (kernel,
//! decomposition, grid, tile counter, order), on a graph-owned workspace exactly where it takes some workspace.

use std::num::NonZeroU32;

use proptest::prelude::*;
use sparsek::plan::{Decomposition, DeviceFacts, LaunchPlan, Policy, Preset, Problem, plan};

/// Block rows' lengths (longest first) for `rows` block rows of `cols` block columns at about `density`, some rows
/// long where `skew`.
fn lengths(rows: usize, cols: usize, density: f64, skew: bool, seed: u64) -> Vec<u32> {
    let mut x = seed | 1;
    let mut v: Vec<u32> = (0..rows)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let jitter = (x % 1000) as f64 / 1000.0;
            let base = density * cols as f64 * (0.5 + jitter);
            let l = if skew && i % 17 == 0 { cols as f64 } else { base };
            (l.round() as usize).min(cols) as u32
        })
        .collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v
}

/// A product of `lens.len()` block rows of those lengths (longest first, the order and lengths known) and `cols`
/// block columns at block size `bs`, times `n` columns.
fn ordered(bs: usize, (cols, n): (usize, usize), lens: &[u32]) -> Problem<'_> {
    let nnzb: usize = lens.iter().map(|&l| l as usize).sum();
    Problem {
        max_row_blocks: Some(lens.first().copied().unwrap_or(0) as usize),
        row_lengths: Some(lens),
        row_order: true,
        ..Problem::new(bs, (lens.len() * bs, cols * bs, n), nnzb)
    }
}

fn sm90_ctas_per_sm(device: &DeviceFacts, p: &LaunchPlan) -> Option<u32> {
    device.hopper.iter().find(|l| l.variant.name == p.kernel).map(|l| l.ctas_per_sm)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn an_sm_limit_holds_the_grid_and_never_breaks_a_plan(
        bs in prop::sample::select(vec![16usize, 32, 64, 128]),
        (rows, cols) in (1usize..300, 1usize..300),
        n in prop::sample::select(vec![1usize, 8, 16, 33, 64, 65, 200, 256, 1000, 4096]),
        density in 0.01f64..1.0,
        skew in any::<bool>(),
        captured in any::<bool>(),
        counter_free in any::<bool>(),
        limit in 1u32..300,
        h200 in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let device = DeviceFacts::estimated(if h200 { Preset::H200 } else { Preset::H100 });
        let lens = lengths(rows, cols, density, skew, seed);
        let problem = Problem { captured, tile_counter_free: counter_free, ..ordered(bs, (cols, n), &lens) };
        let free = plan(&problem, &device, &Policy::default(), None);
        let held = plan(&problem, &device, &Policy { sm_limit: NonZeroU32::new(limit), ..Policy::default() }, None);
        match (free, held) {
            (Ok(free), Ok(held)) => {
                let sms = limit.min(device.sm_count);
                if limit >= device.sm_count {
                    prop_assert_eq!(&held, &free);
                } else {
                    prop_assert_eq!(held.sm_limit, Some(sms), "{}", held);
                    let tail = format!("; planned for {sms} SMs (limit)");
                    prop_assert!(held.to_string().ends_with(&tail), "{}", held);
                }
                // Held to the limit (without one, a CTA per tile may exceed the SMs: the hardware queues them).
                if let (true, Some(per_sm)) = (limit < device.sm_count, sm90_ctas_per_sm(&device, &held)) {
                    prop_assert!(held.ctas <= sms * per_sm.max(1), "{} CTAs for {} SMs: {}", held.ctas, sms, held);
                }
            }
            (Err(e), Err(f)) => prop_assert_eq!(e.to_string(), f.to_string()),
            (free, held) => prop_assert!(false, "without a limit {:?}, with {}: {:?}", free.map(|p| p.to_string()),
                limit, held.map(|p| p.to_string())),
        }
    }

    #[test]
    fn a_captured_launch_makes_the_choices_it_makes_outside_a_graph(
        bs in prop::sample::select(vec![16usize, 32, 64, 128]),
        (rows, cols) in (1usize..400, 1usize..200),
        n in prop::sample::select(vec![1usize, 8, 16, 48, 64, 256, 1000, 4096]),
        density in 0.01f64..1.0,
        skew in any::<bool>(),
        h200 in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let device = DeviceFacts::estimated(if h200 { Preset::H200 } else { Preset::H100 });
        let lens = lengths(rows, cols, density, skew, seed);
        let problem = Problem { tile_counter_free: true, ..ordered(bs, (cols, n), &lens) };
        let Ok(queued) = plan(&problem, &device, &Policy::default(), None) else { return Ok(()) };
        let captured = Problem { captured: true, follows_kernels: true, ..problem };
        let captured = plan(&captured, &device, &Policy::default(), None).unwrap();
        let balanced = queued.tile_counter || queued.decomposition != Decomposition::WholeRows;
        prop_assert!(!queued.graph_workspace, "queued {}", queued);
        prop_assert_eq!(captured.graph_workspace, balanced, "captured {} (queued {})", captured, queued);
        prop_assert_eq!(LaunchPlan { graph_workspace: false, ..captured.clone() }, queued.clone(),
            "captured {} (queued {})", captured, queued);
    }
}
