//! [`Gpu::tune`]: every kernel family and rasterization group that can serve a product, run on the caller's
//! matrix, checked against the f64 oracle, then timed interleaved launch by launch (CUDA events, median); the
//! fastest becomes the product's plan when it beats the built-in heuristic's by more than the noise
//! ([`TuneReport`]), and is remembered in this process and in the plan cache file.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use sparsek_layout::{Layout, Op, OutType};

use super::buffers::{DeviceBsr, DeviceMatrix, InputElement, OutputElement};
use super::driver::cuda;
use super::timing::{EventTimer, median};
use crate::check::{Expected, RowSample};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::plan::Choice;
use crate::tune::{CachedPlan, KernelFamily, Plan, PlanEntry, PlanKey};
use crate::{Bsr, Epilogue, Matrix};

/// A tuned plan must be this much faster than the heuristic's (median against median, same run) to replace it:
/// interleaved medians of the same kernel differ by about 1% from run to run on an H100.
const MARGIN: f64 = 0.03;
/// Timed launches per candidate at least (even past the budget) and at most.
const MIN_ROUNDS: usize = 5;
const MAX_ROUNDS: usize = 200;
/// Timed launches of a candidate in one block at least, after as many untimed launches of it as there are input
/// sets: every timed launch reads a set last read by the same candidate ([`EventTimer::time_in_blocks`]).
const BLOCK: usize = 5;
/// Input sets rotated through at most (a product of 1 MB needs 100 to span twice an H100's 50 MB L2).
const MAX_SETS: usize = 128;
/// Rasterization groups (block rows) measured besides the launcher's choice and plain row order.
const GROUPS: [u32; 4] = [4, 8, 16, 32];

/// The product to tune for, besides A: N, the layouts of B and C, and C's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TuneProblem {
    /// Columns of B and C.
    pub n: usize,
    /// B's storage order.
    pub b_layout: Layout,
    /// C's storage order.
    pub c_layout: Layout,
    /// C's element type (f32 or the inputs' own).
    pub out: OutType,
}

impl TuneProblem {
    /// `C = A @ B` with `n` columns, B and C row-major, C in f32 ([`Gpu::spmm`]).
    pub fn new(n: usize) -> TuneProblem {
        TuneProblem { n, b_layout: Layout::RowMajor, c_layout: Layout::RowMajor, out: OutType::F32 }
    }

    /// The linear layer `y = x @ W^T` over `tokens` rows of x, y of type `out` ([`Gpu::spmm_raw`] with B = x^T
    /// and C = y^T: both column-major).
    pub fn linear(tokens: usize, out: OutType) -> TuneProblem {
        TuneProblem { n: tokens, b_layout: Layout::ColMajor, c_layout: Layout::ColMajor, out }
    }

    /// The same problem with B and C stored `b_layout` and `c_layout`.
    pub fn with_layouts(self, b_layout: Layout, c_layout: Layout) -> TuneProblem {
        TuneProblem { b_layout, c_layout, ..self }
    }

    /// The same problem with C of type `out`.
    pub fn with_output(self, out: OutType) -> TuneProblem {
        TuneProblem { out, ..self }
    }
}

/// How long to tune, and what to say and keep.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    /// Time for the whole tuning (checks included); the timed launches are fitted into what the checks leave, but
    /// every candidate gets at least 5 timed launches, so a product of long launches may take longer.
    pub budget: Duration,
    /// Progress lines on stderr.
    pub progress: bool,
    /// Write the plan to the cache file (when the [`PlanCache`](crate::tune::PlanCache) has one).
    pub save: bool,
    /// Seed of the random B.
    pub seed: u64,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions { budget: Duration::from_secs(2), progress: false, save: true, seed: 0x5eed }
    }
}

impl TuneOptions {
    /// The defaults (2 s, quiet, saved) with `budget`.
    pub fn with_budget(budget: Duration) -> TuneOptions {
        TuneOptions { budget, ..TuneOptions::default() }
    }

    /// The same options with progress lines on stderr.
    pub fn verbose(self) -> TuneOptions {
        TuneOptions { progress: true, ..self }
    }
}

/// One measured candidate.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The plan.
    pub plan: Plan,
    /// Its entry point.
    pub kernel: &'static str,
    /// Whether its output matched the oracle (a candidate that did not is never timed nor chosen).
    pub passed: bool,
    /// The check's summary (worst error, or what failed).
    pub check: String,
    /// Median launch time in microseconds (NaN when not timed).
    pub median_us: f64,
}

/// What [`Gpu::tune`] measured and chose.
#[derive(Clone, Debug)]
pub struct TuneReport {
    /// The problem's key in the plan cache.
    pub key: PlanKey,
    /// The built-in heuristic's plan.
    pub heuristic: Plan,
    /// The chosen plan: the fastest candidate when it beats the heuristic's median by more than 3%, else the
    /// heuristic's.
    pub plan: Plan,
    /// Every candidate, in the order measured (the heuristic's first).
    pub candidates: Vec<Candidate>,
    /// Median time of the heuristic's plan, microseconds.
    pub heuristic_us: f64,
    /// Median time of the chosen plan, microseconds.
    pub tuned_us: f64,
    /// Timed launches per candidate, in blocks of at least five, each after one untimed launch per input set, the
    /// blocks of the candidates alternating.
    pub rounds: usize,
    /// Identical input sets the timed launches rotated through (together at least twice the L2, at most 128).
    pub input_sets: usize,
    /// Wall time of the whole tuning.
    pub elapsed: Duration,
    /// Where the plan was saved, or why it could not be (`None`: plans are not kept in a file, or
    /// [`TuneOptions::save`] was off). The plan serves this process either way.
    pub saved: Option<std::result::Result<PathBuf, String>>,
}

impl TuneReport {
    /// Heuristic time over tuned time (1.0 when the heuristic's plan was kept).
    pub fn speedup(&self) -> f64 {
        self.heuristic_us / self.tuned_us
    }
}

impl fmt::Display for TuneReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} candidates, {} timed launches each, {:.2} s",
            self.key,
            self.candidates.len(),
            self.rounds,
            self.elapsed.as_secs_f64()
        )?;
        let mut order: Vec<&Candidate> = self.candidates.iter().collect();
        order.sort_by(|a, b| a.median_us.total_cmp(&b.median_us));
        writeln!(f, "  {:<34} {:<28} {:>11} {:>9}  check", "plan", "kernel", "median us", "vs heur.")?;
        for c in order {
            let mark = if c.plan == self.plan { "*" } else { " " };
            writeln!(
                f,
                "{mark} {:<34} {:<28} {:>11.2} {:>8.3}x  {}",
                c.plan.to_string(),
                c.kernel,
                c.median_us,
                self.heuristic_us / c.median_us,
                c.check
            )?;
        }
        write!(
            f,
            "chosen: {} ({:.2} us; heuristic {} {:.2} us: {:.3}x)",
            self.plan,
            self.tuned_us,
            self.heuristic,
            self.heuristic_us,
            self.speedup()
        )
    }
}

impl Gpu {
    /// Measures every kernel family and rasterization group that can serve `A @ B` for `problem` on this GPU
    /// ([`KernelFamily`]), on `a` itself and a random B: each candidate's output is first checked against the
    /// f64 oracle (sampled rows; C poisoned before each run), then the candidates that passed are timed in
    /// alternating blocks of at least five launches, each block after one untimed launch per input set (CUDA
    /// events, median: every timed launch reads a set last read by the same candidate, so none finds lines another
    /// candidate left in L2), each launch on the next of identical input sets that together span twice the L2 (so
    /// weights come from memory, as between a model's layers), in as many blocks as `opts.budget` leaves after the
    /// checks. The fastest becomes the plan for the problem's [`PlanKey`] when it beats the built-in heuristic's by
    /// more than 3%, else the heuristic's plan is kept (so tuning never makes a product slower beyond noise).
    /// The plan serves this `Gpu`'s later launches of problems with the same key (unless plans are off:
    /// [`Gpu::with_plan_cache`]), and launches on views of the same shape and block count (whose row lengths
    /// the host does not know: the key with an unknown row-length ratio), and is saved under both keys to the
    /// cache file when there is one and `opts.save` is set.
    ///
    /// Allocates B, C and the input sets (at most about twice the L2 beyond one set) on the GPU and the oracle's
    /// operands on the host, and synchronises: call it ahead of
    /// the launches it tunes, not inside a CUDA graph capture. Errors: an empty problem
    /// ([`Error::InvalidArgument`]), an output type the kernels do not write, memory, the driver. A failure to
    /// save the plan is not an error ([`TuneReport::saved`]).
    pub fn tune<TA: InputElement + OutputElement>(
        &self,
        a: &DeviceBsr<TA>,
        problem: &TuneProblem,
        opts: &TuneOptions,
    ) -> Result<TuneReport> {
        match problem.out {
            OutType::F32 => self.tune_typed::<TA, f32>(a, problem, opts),
            out if out == TA::OUT_TYPE => self.tune_typed::<TA, TA>(a, problem, opts),
            out => Err(Error::InvalidArgument {
                name: "output type",
                reason: format!(
                    "{} inputs with a {} output are not supported: C is f32 or the inputs' own type",
                    TA::IN_TYPE.name(),
                    out.name()
                ),
            }),
        }
    }

    /// The plans [`Gpu::tune`] measures for a product of `n` columns with `a`, B stored `b_layout`, C of type
    /// `TC`, the heuristic's first: each family the planner could use, each with the work decompositions
    /// that give it another launch (the rules', whole rows, split rows, the flat list, one tile per CTA for the
    /// sm_90a kernels), and for those with rasterization groups groups of 4, 8, 16 and 32 block rows (those below
    /// the block row count) and plain row order.
    pub fn tune_candidates<TA: InputElement, TC: OutputElement>(
        &self,
        a: &DeviceBsr<TA>,
        n: usize,
        b_layout: Layout,
    ) -> Vec<Plan> {
        let (Ok(bs), Some(block_rows)) = (u32::try_from(a.shape.bs), a.shape.rows.checked_div(a.shape.bs)) else {
            return Vec::new();
        };
        let types = (TA::IN_TYPE, b_layout, TC::OUT_TYPE);
        let mut plans = Vec::new();
        let rows = (block_rows, Some(a.max_row_blocks()));
        let heuristic = self.room().heuristic_plan(Op::BsrSpmm, bs, types, n, a.shape.nnzb, rows);
        if let Some((h, _)) = heuristic.filter(|(_, (r, _))| self.kernel_at(*r).is_some()) {
            plans.push(h);
        }
        let families = self.room().tune_families(bs, types, n, a.shape.nnzb);
        for (family, _) in families.into_iter().filter(|(_, (r, _))| self.kernel_at(*r).is_some()) {
            plans.push(Plan::new(family));
            if family == KernelFamily::Decode {
                continue;
            }
            let plain = u32::try_from(block_rows.max(1)).unwrap_or(u32::MAX);
            for r in GROUPS.into_iter().filter(|&r| r < plain).chain([plain]) {
                plans.push(Plan::new(family).with_group_rows(Some(r)));
            }
        }
        // Each plan of the launcher's groups with every decomposition that changes its launch.
        let view = a.view();
        let problem = crate::plan::Problem {
            input: TA::IN_TYPE,
            output: TC::OUT_TYPE,
            b_layout,
            max_row_blocks: Some(a.max_row_blocks()),
            row_lengths: view.row_lengths,
            row_order: view.row_order != 0,
            ..crate::plan::Problem::new(a.shape.bs, (a.shape.rows, a.shape.cols, n), a.shape.nnzb)
        };
        let room = self.room();
        let plans: Vec<Plan> = plans
            .into_iter()
            .flat_map(|p| match p.group_rows {
                None => crate::plan::tune_decompositions(room, &problem, p),
                Some(_) => vec![p],
            })
            .collect();
        let mut plans = plans;
        let mut seen = Vec::with_capacity(plans.len());
        plans.retain(|p| {
            let new = !seen.contains(p);
            seen.push(*p);
            new
        });
        plans
    }

    fn tune_typed<TA: InputElement, TC: OutputElement>(
        &self,
        a: &DeviceBsr<TA>,
        problem: &TuneProblem,
        opts: &TuneOptions,
    ) -> Result<TuneReport> {
        let start = Instant::now();
        let (m, k, n, bs) = (a.shape.rows, a.shape.cols, problem.n, a.shape.bs);
        if m == 0 || k == 0 || n == 0 {
            return Err(Error::InvalidArgument {
                name: "problem",
                reason: format!("A is {m}x{k} and N is {n}: an empty product has nothing to tune"),
            });
        }
        let layouts = (problem.b_layout, problem.c_layout);
        let key = PlanKey::new(
            (TA::IN_TYPE, layouts.0, TC::OUT_TYPE, layouts.1),
            bs,
            (m, k, n),
            a.shape.nnzb,
            Some(a.max_row_blocks()),
        );
        let plans = self.tune_candidates::<TA, TC>(a, n, layouts.0);
        let Some(&heuristic) = plans.first() else {
            return Err(Error::InvalidBsr(crate::BsrError::UnsupportedBlockSize { bs }));
        };
        let say = |line: String| {
            if opts.progress {
                eprintln!("sparsek tune: {line}");
            }
        };
        say(format!("{key} on {}: {} candidates", self.info().name, plans.len()));

        // Operands: A back from the device, a random B, the oracle on sampled rows.
        let a_host = self.download_bsr(a)?;
        let b_host = Matrix::<TA>::random(k, n, opts.seed)?;
        let ep = Epilogue::default();
        let expected = Expected::compute(
            &a_host,
            &b_host,
            &Matrix::<TC>::zeros(m, n)?,
            ep,
            RowSample::auto(m, n, 24, opts.seed ^ 1),
            |_, _| {},
        )?;
        // B as stored on the device: K x N row-major, or its transpose N x K for a column-major B.
        let b_host_stored = match layouts.0 {
            Layout::RowMajor => b_host.clone(),
            Layout::ColMajor => Matrix::from_fn(n, k, |r, c| b_host.get(c, r))?,
        };
        let b_d = self.upload_matrix(&b_host_stored)?;
        let mut c_d: DeviceMatrix<TC> = match layouts.1 {
            Layout::RowMajor => self.zeros(m, n)?,
            Layout::ColMajor => self.zeros(n, m)?,
        };
        let poison = Matrix::<TC>::filled(c_d.rows(), c_d.cols(), c_d.ld(), TC::from_f64(f64::NAN))?;
        let stream = self.stream().clone();

        let mut candidates = Vec::with_capacity(plans.len());
        for (i, plan) in plans.iter().enumerate() {
            let chosen = self.choose::<TA, TC>(a.shape, layouts, n, None, Choice::Fixed(*plan))?;
            c_d.copy_from_host(&poison)?;
            self.launch_owned(&stream, (&chosen, None), a, (&b_d, &mut c_d), layouts, ep)?;
            let got = c_d.to_host()?;
            let report = match layouts.1 {
                Layout::RowMajor => expected.check(&got),
                Layout::ColMajor => expected.check_with(n, |r, c| got.get(c, r).to_f64()),
            };
            let passed = report.passed();
            say(format!(
                "[{}/{}] {plan}: {}",
                i + 1,
                plans.len(),
                if passed { "ok".to_string() } else { format!("WRONG: {report}") }
            ));
            candidates.push(Candidate {
                plan: *plan,
                kernel: chosen.loaded.variant.name,
                passed,
                check: if passed { "ok".into() } else { format!("WRONG: {report}") },
                median_us: f64::NAN,
            });
        }

        // Timing: one round to size the rest, then as many rounds as the budget leaves (interleaved).
        let timed: Vec<usize> = (0..candidates.len()).filter(|&i| candidates[i].passed).collect();
        if timed.is_empty() {
            return Err(Error::InvalidArgument {
                name: "kernels",
                reason: format!("no candidate passed the oracle check for {key}; this is a sparsek bug"),
            });
        }
        // Input sets to rotate through, launch by launch: identical copies of A, B and C that together span twice
        // the L2, so that no timed launch finds its operands in L2 left there by the one before (a product timed
        // on warm L2 favours other plans than one whose weights come from memory, as they do between the layers
        // of a model).
        let elem = |bytes: usize, count: usize| (bytes as u64).saturating_mul(count as u64);
        let set_bytes = elem(std::mem::size_of::<TA>(), a.shape.nnzb.saturating_mul(bs * bs))
            .saturating_add(elem(std::mem::size_of::<TA>(), b_d.rows() * b_d.ld()))
            .saturating_add(elem(std::mem::size_of::<TC>(), c_d.rows() * c_d.ld()))
            .max(1);
        let depth = (2 * self.info().l2_bytes).div_ceil(set_bytes).clamp(1, MAX_SETS as u64) as usize;
        let mut copies = Vec::with_capacity(depth - 1);
        for _ in 1..depth {
            copies.push((
                self.upload(&a_host)?,
                self.upload_matrix(&b_host_stored)?,
                self.zeros::<TC>(c_d.rows(), c_d.cols())?,
            ));
        }
        drop(b_host_stored);
        let timer = EventTimer::new(&stream);
        let mut count = 0usize;
        let mut launch = |i: usize| {
            let plan = &candidates[timed[i]].plan;
            let chosen = self.choose::<TA, TC>(a.shape, layouts, n, None, Choice::Fixed(*plan))?;
            let set = count % depth;
            count += 1;
            match set.checked_sub(1).map(|s| &mut copies[s]) {
                None => self.launch_owned(&stream, (&chosen, None), a, (&b_d, &mut c_d), layouts, ep),
                Some((a, b, c)) => self.launch_owned(&stream, (&chosen, None), a, (b, c), layouts, ep),
            }
        };
        let probe = timer.time_interleaved(1, 1, timed.len(), &mut launch)?;
        let round_s = probe.iter().map(|t| f64::from(t.iter().sum::<f32>()) * 1e-3).sum::<f64>().max(1e-6);
        let left = opts.budget.saturating_sub(start.elapsed()).as_secs_f64();
        // A block of `block` timed launches of a candidate costs `depth` untimed ones more.
        let block = BLOCK.max(depth);
        let affordable = left / round_s * block as f64 / (block + depth) as f64;
        let blocks = (affordable as usize).clamp(MIN_ROUNDS, MAX_ROUNDS).div_ceil(block);
        let rounds = blocks * block;
        say(format!(
            "timing {} candidates, {rounds} launches each in blocks of {block} over {depth} input sets",
            timed.len()
        ));
        // In blocks, not launch by launch: the candidates leave L2 in different states (the decode launches mark A
        // evict-first, the others do not), and interleaved launch by launch one candidate found part of its A left
        // there by the candidate that had read the same input set a few launches before, round after round: one
        // plan measured up to 1.4x faster than the identical launch of another (docs/perf-notes.md, "Tuned plans").
        let times = timer.time_in_blocks(blocks, (depth, block), timed.len(), &mut launch)?;
        for (slot, t) in timed.iter().zip(&times) {
            candidates[*slot].median_us = median(t).map_or(f64::NAN, |ms| f64::from(ms) * 1e3);
        }

        let heuristic_us = candidates[0].median_us;
        let best = timed
            .iter()
            .copied()
            .min_by(|&x, &y| candidates[x].median_us.total_cmp(&candidates[y].median_us))
            .unwrap_or(0);
        let keep_heuristic = candidates[0].passed && candidates[best].median_us > heuristic_us * (1.0 - MARGIN);
        let chosen = if keep_heuristic { 0 } else { best };
        let (plan, tuned_us) = (candidates[chosen].plan, candidates[chosen].median_us);
        let unix_time = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let cached = CachedPlan { plan, tuned_us, heuristic_us, unix_time };
        // Also under the key with the row lengths unknown: launches on views (`spmm_raw`, the Python package),
        // whose row lengths live on the device, take the plan last tuned for the same shape and block count.
        let keys = [key, PlanKey { skew_bucket: 0, ..key }];
        for k in keys {
            self.remember_plan(k, cached);
        }
        let entries = keys.map(|key| PlanEntry { device: self.device_key().clone(), key, cached });
        let saved = match self.plan_cache().path() {
            Some(path) if opts.save => {
                Some(self.plan_cache().save(&entries).map(|_| path.to_path_buf()).map_err(|e| e.to_string()))
            }
            _ => None,
        };
        match &saved {
            Some(Ok(p)) => say(format!("plan {plan} saved to {}", p.display())),
            Some(Err(e)) => eprintln!("sparsek tune: warning: the plan serves this process but was not saved: {e}"),
            None => {}
        }
        Ok(TuneReport {
            key,
            heuristic,
            plan,
            candidates,
            heuristic_us,
            tuned_us,
            rounds,
            input_sets: depth,
            elapsed: start.elapsed(),
            saved,
        })
    }

    /// A copy of an uploaded matrix on the host (the tuner's oracle operand), validated again.
    fn download_bsr<T: InputElement>(&self, a: &DeviceBsr<T>) -> Result<Bsr<T>> {
        let s = self.stream();
        let row_ptr = s.clone_dtoh(&a.row_ptr).map_err(cuda("cuMemcpyDtoH"))?;
        let mut col_idx = s.clone_dtoh(&a.col_idx).map_err(cuda("cuMemcpyDtoH"))?;
        let mut values = s.clone_dtoh(&a.values).map_err(cuda("cuMemcpyDtoH"))?;
        s.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        // An upload without blocks holds one unused element in each.
        col_idx.truncate(a.shape.nnzb);
        values.truncate(a.shape.nnzb.saturating_mul(a.shape.bs * a.shape.bs));
        Ok(Bsr::try_new(a.shape.rows, a.shape.cols, a.shape.bs, row_ptr, col_idx, values)?)
    }
}
