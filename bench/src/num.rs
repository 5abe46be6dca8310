//! Numbers as the JSON files write them: measured values to 6 significant digits (`null` when not finite, read
//! back as infinity where an error was written), u64 seeds as strings. Shared by the results file ([`crate::json`]),
//! the records ([`crate::report`]) and the side modes' files.

use serde::{Deserialize, Deserializer, Serializer};

/// `x` rounded to `digits` significant decimal digits.
pub fn round_sig(x: f64, digits: usize) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    format!("{:.*e}", digits.saturating_sub(1), x).parse().unwrap_or(x)
}

/// A measured value: rounded to 6 significant digits; `null` when not finite.
pub fn sig6<S: Serializer>(x: &f64, s: S) -> std::result::Result<S::Ok, S::Error> {
    if x.is_finite() { s.serialize_f64(round_sig(*x, 6)) } else { s.serialize_none() }
}

/// [`sig6`] of an optional value.
pub fn opt_sig6<S: Serializer>(x: &Option<f64>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match x {
        Some(v) => sig6(v, s),
        None => s.serialize_none(),
    }
}

/// An error written by [`sig6`]: `null` (a non-finite error) reads back as infinity.
pub fn f64_or_inf<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// A u64 written as a string (exact for JSON readers that hold numbers as doubles); a number reads too.
pub mod u64_string {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `v` as a string.
    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    /// Reads a string or a number.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum U64OrString {
            Number(u64),
            String(String),
        }
        match U64OrString::deserialize(d)? {
            U64OrString::Number(n) => Ok(n),
            U64OrString::String(s) => s.trim().parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_sig_keeps_six_digits() {
        assert_eq!(round_sig(1.234_567_8, 6), 1.234_57);
        assert_eq!(round_sig(987_654_321.0, 3), 988_000_000.0);
        assert_eq!(round_sig(0.0, 6), 0.0);
        assert!(round_sig(f64::NAN, 6).is_nan());
    }
}
