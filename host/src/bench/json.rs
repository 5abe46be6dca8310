//! A minimal JSON writer (the project takes no serde dependency): a value tree and a pretty printer.

use std::fmt::Write;

/// A JSON value. Objects keep their keys in insertion order.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer, written exactly.
    Int(i64),
    /// A number; NaN and infinities are written as `null` (JSON has no such numbers).
    Num(f64),
    /// A string, escaped when written.
    Str(String),
    /// An array.
    Arr(Vec<Json>),
    /// An object.
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// A number rounded to 6 significant digits (timings and rates do not carry more); `null` if not finite.
    pub fn num(x: f64) -> Json {
        if x.is_finite() { Json::Num(round_sig(x, 6)) } else { Json::Null }
    }

    /// [`Json::num`] of the value, or `null`.
    pub fn opt_num(x: Option<f64>) -> Json {
        x.map_or(Json::Null, Json::num)
    }

    /// A string value.
    pub fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    /// An unsigned count (saturating at `i64::MAX`).
    pub fn count(n: usize) -> Json {
        Json::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }

    /// Pretty-printed with two-space indentation and a final newline.
    pub fn to_pretty(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out.push('\n');
        out
    }

    fn write(&self, out: &mut String, indent: usize) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Json::Num(x) => out.push_str(&number(*x)),
            Json::Str(s) => escape_into(out, s),
            Json::Arr(items) if items.is_empty() => out.push_str("[]"),
            Json::Obj(fields) if fields.is_empty() => out.push_str("{}"),
            Json::Arr(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    pad(out, indent + 1);
                    v.write(out, indent + 1);
                }
                out.push('\n');
                pad(out, indent);
                out.push(']');
            }
            Json::Obj(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    pad(out, indent + 1);
                    escape_into(out, k);
                    out.push_str(": ");
                    v.write(out, indent + 1);
                }
                out.push('\n');
                pad(out, indent);
                out.push('}');
            }
        }
    }
}

fn pad(out: &mut String, indent: usize) {
    for _ in 0..indent {
        out.push_str("  ");
    }
}

/// A finite f64 as a JSON number (Rust's `Display` never uses an exponent, so its output is valid JSON);
/// non-finite values become `null`.
fn number(x: f64) -> String {
    if x.is_finite() { format!("{x}") } else { "null".to_string() }
}

/// `x` rounded to `digits` significant decimal digits.
pub fn round_sig(x: f64, digits: usize) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    format!("{:.*e}", digits.saturating_sub(1), x).parse().unwrap_or(x)
}

/// `s` as a quoted JSON string: `"` and `\` escaped, control characters as `\n`, `\t`, ... or `\u00XX`;
/// everything else (non-ASCII included) passes through as UTF-8.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    escape_into(&mut out, s);
    out
}

fn escape_into(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_quotes_backslashes_and_controls() {
        assert_eq!(escape("plain"), "\"plain\"");
        assert_eq!(escape("a\"b"), "\"a\\\"b\"");
        assert_eq!(escape("C:\\dir"), "\"C:\\\\dir\"");
        assert_eq!(escape("l1\nl2\r\t"), "\"l1\\nl2\\r\\t\"");
        assert_eq!(escape("\u{0}\u{1f}\u{8}\u{c}"), "\"\\u0000\\u001f\\b\\f\"");
        // Non-ASCII and DEL pass through unchanged.
        assert_eq!(escape("H100 µs ×\u{7f}"), "\"H100 µs ×\u{7f}\"");
    }

    #[test]
    fn numbers_are_valid_json_and_non_finite_is_null() {
        assert_eq!(Json::num(1.0).to_pretty(), "1\n");
        assert_eq!(Json::num(0.000_123_456_789).to_pretty(), "0.000123457\n");
        assert_eq!(Json::num(1.234_567_89e20).to_pretty(), "123457000000000000000\n");
        assert_eq!(Json::num(-2.5).to_pretty(), "-2.5\n");
        assert_eq!(Json::num(f64::NAN), Json::Null);
        assert_eq!(Json::Num(f64::INFINITY).to_pretty(), "null\n");
        assert_eq!(Json::opt_num(None), Json::Null);
        assert_eq!(Json::count(7), Json::Int(7));
    }

    #[test]
    fn round_sig_keeps_six_digits() {
        assert_eq!(round_sig(1.234_567_8, 6), 1.234_57);
        assert_eq!(round_sig(987_654_321.0, 3), 988_000_000.0);
        assert_eq!(round_sig(0.0, 6), 0.0);
    }

    #[test]
    fn nested_structure_pretty_prints() {
        let v = Json::Obj(vec![
            ("name".into(), Json::str("x\"y")),
            ("ok".into(), Json::Bool(true)),
            ("none".into(), Json::Null),
            ("list".into(), Json::Arr(vec![Json::Int(1), Json::Obj(vec![])])),
            ("empty".into(), Json::Arr(vec![])),
        ]);
        let expected = "{\n  \"name\": \"x\\\"y\",\n  \"ok\": true,\n  \"none\": null,\n  \"list\": [\n    1,\n    {}\n  ],\n  \"empty\": []\n}\n";
        assert_eq!(v.to_pretty(), expected);
    }
}
