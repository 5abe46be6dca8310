//! Which products the benchmark measures: the default grid, the `--quick` grid, and `--case` specs.

use std::fmt;
use std::path::PathBuf;

use sparsek::error::{Error, Result};
use sparsek::format::{Bsr, Pattern, Underflow, generate};
use sparsek::{Matrix, f16};

/// Where a case's A comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// Generated with [`sparsek::format::generate`].
    Synthetic(Pattern),
    /// Read from a Matrix Market file (blockified with the case's block size, padded to multiples of it).
    File(PathBuf),
}

/// One product `C (M x N) = A (M x K, BSR) @ B (K x N)`: the problem spec shared by `sparsek run`, the
/// benchmark and the tests. [`Case::operands`] builds its A and B.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// Rows of A and C (for a file: filled in once it is read).
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B (for a file: filled in once it is read).
    pub k: usize,
    /// Block size.
    pub bs: usize,
    /// Fraction of nonzero blocks (for a file: filled in once it is read).
    pub density: f64,
    /// Where A comes from.
    pub source: Source,
}

impl Case {
    /// A generated case.
    pub fn synthetic(m: usize, n: usize, k: usize, bs: usize, density: f64, pattern: Pattern) -> Self {
        Case { m, n, k, bs, density, source: Source::Synthetic(pattern) }
    }

    /// The pattern's name, or `file:<file name>`.
    pub fn pattern_name(&self) -> String {
        match &self.source {
            Source::Synthetic(p) => p.name().to_string(),
            Source::File(path) => {
                format!(
                    "file:{}",
                    path.file_name().map_or_else(|| path.display().to_string(), |f| f.to_string_lossy().into())
                )
            }
        }
    }

    /// Builds A (generated from `seed`, or read from the file, which fills in `m`, `k` and `density`) and a
    /// random f16 B of `k x n` (from `seed`). Progress for a file goes to stderr. A file's BSR may take at most
    /// `max_file_bytes` (values and indices; [`Bsr::from_matrix_market_limited`]): a sparse file whose entries
    /// touch many blocks is refused with the size it would need instead of exhausting memory.
    pub fn operands(&mut self, seed: u64, max_file_bytes: usize) -> Result<(Bsr<f16>, Matrix<f16>)> {
        self.operands_with_underflow(seed, max_file_bytes).map(|(a, b, _)| (a, b))
    }

    /// [`Case::operands`], with the values of a file's A that flushed to zero in f16 (`None` for a generated A).
    pub fn operands_with_underflow(
        &mut self,
        seed: u64,
        max_file_bytes: usize,
    ) -> Result<(Bsr<f16>, Matrix<f16>, Option<Underflow>)> {
        let (a, under): (Bsr<f16>, _) = match &self.source {
            Source::Synthetic(p) => (generate(*p, self.m, self.k, self.bs, self.density, seed)?, None),
            Source::File(path) => {
                eprintln!("loading {} (block size {})", path.display(), self.bs);
                let (a, under) = Bsr::from_matrix_market_with_underflow(path, self.bs, max_file_bytes)?;
                self.density = a.density();
                (a, Some(under))
            }
        };
        (self.m, self.k) = (a.rows(), a.cols());
        let b = Matrix::<f16>::random(self.k, self.n, seed ^ 0xB)?;
        Ok((a, b, under))
    }

    /// A seed for A and B derived from the case's parameters and `seed`, so a case measured alone (`--case`)
    /// gets the same matrices as in the full grid.
    pub fn seed(&self, seed: u64) -> u64 {
        // FNV-1a over the label, mixed with the user's seed.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.to_string().bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
}

impl fmt::Display for Case {
    /// `8192x8192x8192 bs64 22% uniform` (M x N x K).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}x{} bs{} {} {}", self.m, self.n, self.k, self.bs, percent(self.density), self.pattern_name())
    }
}

/// A density as a short percentage: 0.22 -> "22%", 0.125 -> "12.5%", 0.0005 -> "0.05%".
pub fn percent(d: f64) -> String {
    let p = d * 100.0;
    for dec in 0..4 {
        let s = format!("{p:.dec$}");
        if (s.parse::<f64>().unwrap_or(f64::NAN) - p).abs() < 1e-9 {
            return format!("{s}%");
        }
    }
    format!("{p:.4}%")
}

/// The default grid (21 cases): 8192^3 at bs 16, 32, 64, 128 and density 5, 10, 22, 50% (uniform);
/// 4096^3 bs 64 at 12.5%; the skewed pattern at 8192^3 bs 64 22%; and decode shapes N = 1, 16, 128 at
/// 8192 x 8192 (K = 8192) bs 64 22%.
pub fn default_grid() -> Vec<Case> {
    let mut g = uniform_cubes(8192, &[16, 32, 64, 128], &[0.05, 0.10, 0.22, 0.50]);
    g.push(Case::synthetic(4096, 4096, 4096, 64, 0.125, Pattern::Uniform));
    g.push(Case::synthetic(8192, 8192, 8192, 64, 0.22, Pattern::Skewed));
    for n in [1, 16, 128] {
        g.push(Case::synthetic(8192, n, 8192, 64, 0.22, Pattern::Uniform));
    }
    g
}

/// Uniform `size^3` cases, each block size with each density in turn (the grids' opening rows).
pub fn uniform_cubes(size: usize, block_sizes: &[usize], densities: &[f64]) -> Vec<Case> {
    let case = |(bs, d): (usize, f64)| Case::synthetic(size, size, size, bs, d, Pattern::Uniform);
    block_sizes.iter().flat_map(|&bs| densities.iter().map(move |&d| (bs, d))).map(case).collect()
}

/// A small grid for smoke tests (seconds): 2048^3 at bs 32 and 64, a skewed case and a decode shape.
pub fn quick_grid() -> Vec<Case> {
    vec![
        Case::synthetic(2048, 2048, 2048, 32, 0.10, Pattern::Uniform),
        Case::synthetic(2048, 2048, 2048, 64, 0.10, Pattern::Uniform),
        Case::synthetic(2048, 2048, 2048, 64, 0.22, Pattern::Uniform),
        Case::synthetic(2048, 2048, 2048, 64, 0.22, Pattern::Skewed),
        Case::synthetic(2048, 16, 2048, 64, 0.22, Pattern::Uniform),
    ]
}

/// Parses a `--case` spec `m,n,k,bs,density[,pattern]`: density as a fraction (`0.22`) or a percentage
/// (`22%`), pattern one of the generator's (default `uniform`).
pub fn parse_case(spec: &str) -> Result<Case> {
    let bad = |reason: String| Error::InvalidArgument { name: "--case", reason: format!("'{spec}': {reason}") };
    let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
    if !(5..=6).contains(&parts.len()) {
        return Err(bad(format!(
            "expected m,n,k,bs,density[,pattern] (e.g. 8192,8192,8192,64,22%,uniform), got {} fields",
            parts.len()
        )));
    }
    let int = |i: usize, what: &str| -> Result<usize> {
        parts[i].parse::<usize>().map_err(|_| bad(format!("{what} '{}' is not a non-negative integer", parts[i])))
    };
    let (m, n, k, bs) = (int(0, "m")?, int(1, "n")?, int(2, "k")?, int(3, "bs")?);
    let d = parts[4];
    let density = match d.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
        None => d.parse::<f64>(),
    }
    .map_err(|_| bad(format!("density '{d}' is not a number")))?;
    if !(0.0..=1.0).contains(&density) {
        return Err(bad(format!("density {d} is outside [0, 1] (0%..100%)")));
    }
    let pattern = match parts.get(5) {
        Some(p) => p.parse::<Pattern>().map_err(|e| bad(e.to_string()))?,
        None => Pattern::Uniform,
    };
    if m == 0 || n == 0 || k == 0 {
        return Err(bad("m, n and k must be positive".into()));
    }
    Ok(Case::synthetic(m, n, k, bs, density, pattern))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_grid_has_the_issue_cases() {
        let g = default_grid();
        assert_eq!(g.len(), 21);
        let uniform_8k = g.iter().filter(|c| (c.m, c.n, c.k) == (8192, 8192, 8192) && c.pattern_name() == "uniform");
        assert_eq!(uniform_8k.count(), 16);
        assert!(g.contains(&Case::synthetic(4096, 4096, 4096, 64, 0.125, Pattern::Uniform)));
        assert!(g.contains(&Case::synthetic(8192, 8192, 8192, 64, 0.22, Pattern::Skewed)));
        for n in [1, 16, 128] {
            assert!(g.contains(&Case::synthetic(8192, n, 8192, 64, 0.22, Pattern::Uniform)));
        }
        // Every case is a valid generator input.
        for c in g.iter().chain(quick_grid().iter()) {
            assert!(c.m % c.bs == 0 && c.k % c.bs == 0, "{c}");
        }
    }

    #[test]
    fn labels_and_percentages() {
        assert_eq!(percent(0.22), "22%");
        assert_eq!(percent(0.125), "12.5%");
        assert_eq!(percent(0.05), "5%");
        assert_eq!(percent(1.0), "100%");
        assert_eq!(
            Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Skewed).to_string(),
            "8192x16x8192 bs64 22% skewed"
        );
        let f = Case { m: 0, n: 8, k: 0, bs: 32, density: 0.0, source: Source::File("/x/y/web.mtx".into()) };
        assert_eq!(f.pattern_name(), "file:web.mtx");
    }

    #[test]
    fn parse_case_specs() {
        assert_eq!(
            parse_case("8192,8192,8192,64,22%,skewed").unwrap(),
            Case::synthetic(8192, 8192, 8192, 64, 0.22, Pattern::Skewed)
        );
        assert_eq!(
            parse_case(" 4096, 1, 4096, 32, 0.125 ").unwrap(),
            Case::synthetic(4096, 1, 4096, 32, 0.125, Pattern::Uniform)
        );
        for bad in [
            "",
            "1,2,3",
            "1,2,3,4,5,6,7",
            "a,2,3,16,0.1",
            "16,16,16,16,150%",
            "16,16,16,16,0.1,zigzag",
            "0,16,16,16,0.1",
        ] {
            assert!(parse_case(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn seeds_depend_on_the_case_only() {
        let a = Case::synthetic(8192, 8192, 8192, 64, 0.22, Pattern::Uniform);
        let b = Case::synthetic(8192, 8192, 8192, 32, 0.22, Pattern::Uniform);
        assert_eq!(a.seed(1), a.clone().seed(1));
        assert_ne!(a.seed(1), b.seed(1));
        assert_ne!(a.seed(1), a.seed(2));
    }
}
