//! `sparsek bench`: sparsek against cuBLAS dense GEMM and cuSPARSE, in one process on one GPU, with the method
//! of DESIGN.md (Benchmarks):
//!
//! - every contender gets the same A (BSR; expanded to dense f16 for cuBLAS) and B, f16, with f32
//!   accumulation and an f32 C (cuSPARSE: whichever precision the installed library accepts, named in the
//!   output);
//! - each contender's output is compared with the f64 CPU oracle on sampled rows *before* it is timed (C
//!   poisoned first); a baseline that fails is kept but its time marked untrusted;
//! - warm-up, then launches interleaved contender by contender, each between its own pair of CUDA events,
//!   read after the loop; the median is reported;
//! - while one input set (every operand a launch reads) is under 2x L2, several identical sets are allocated
//!   and rotated per launch;
//! - the SM clock is read with nvidia-smi right after each case's timed loop.
//!
//! Every contender's output goes through the library's one verification path ([`sparsek::check::Expected`]:
//! sampled oracle rows, the tolerance of the output's precision, the comparison), and every timing through
//! its one timer ([`sparsek::gpu::timing::EventTimer`]); the problem is a [`Case`], whose [`Case::operands`]
//! builds A and B as `sparsek run` does.
//!
//! Results: `latest.json` (one record per case and a header; serde, read back by [`read_results`]), a
//! Markdown table (stdout, and between markers in `BENCHMARKS.md`), and `speedup.png`. [`compare()`] sets a
//! run against an earlier one (`sparsek bench --compare OLD.json`): the perf-regression gate. The writers and
//! the reader ([`json`], [`report`], [`png`], [`plot`]), the comparison ([`mod@compare`]), the grid ([`grid`]) and
//! the run facts ([`mod@env`]) need no GPU and are unit-tested.

pub mod budget;
pub mod compare;
mod cublas;
mod cuda;
mod cusparse;
pub mod decode;
pub mod env;
pub mod error;
pub mod grid;
pub mod json;
pub mod measure;
pub mod num;
pub mod plans;
pub mod plot;
pub mod png;
pub mod reach;
pub mod report;
pub mod research;
mod runner;
pub mod side;
pub mod tune;

pub use compare::{Comparison, compare};
pub use cublas::Cublas;
pub use cusparse::Kind as CusparseKind;
pub use error::{Error, Result};
pub use grid::{Case, Source, default_grid, parse_case, quick_grid};
pub use json::read_results;
pub use measure::rotation_sets;
pub use report::{Header, Record, Results};
pub use runner::{Config, CusparseChoice, Summary, run};
