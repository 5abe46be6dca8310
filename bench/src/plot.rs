//! The speedup plot (`speedup.png`): an RGB canvas with thick lines, filled rectangles and a built-in 5x7
//! bitmap font, saved through [`super::png`] (the `png` crate; a plot's dozen colours make it a small indexed
//! PNG).

use super::png;

/// An RGB colour.
pub type Rgb = [u8; 3];

const WHITE: Rgb = [255, 255, 255];
const BLACK: Rgb = [0, 0, 0];
const GRID: Rgb = [225, 225, 225];
const GREY: Rgb = [110, 110, 110];

/// Line colours, one per series (the first four are kept for bs 16, 32, 64, 128).
const PALETTE: [Rgb; 8] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
];

/// A `width x height` RGB image, row-major, origin at the top left.
pub struct Canvas {
    width: usize,
    height: usize,
    px: Vec<u8>,
}

impl Canvas {
    /// A canvas filled with `bg`.
    pub fn new(width: usize, height: usize, bg: Rgb) -> Self {
        let mut px = Vec::with_capacity(3 * width * height);
        for _ in 0..width * height {
            px.extend_from_slice(&bg);
        }
        Canvas { width, height, px }
    }

    /// The pixel at (x, y), or `None` outside the canvas.
    pub fn get(&self, x: i64, y: i64) -> Option<Rgb> {
        if x < 0 || y < 0 || x as usize >= self.width || y as usize >= self.height {
            return None;
        }
        let i = 3 * (y as usize * self.width + x as usize);
        Some([self.px[i], self.px[i + 1], self.px[i + 2]])
    }

    /// Sets one pixel; coordinates outside the canvas are ignored (so shapes clip).
    pub fn set(&mut self, x: i64, y: i64, c: Rgb) {
        if x < 0 || y < 0 || x as usize >= self.width || y as usize >= self.height {
            return;
        }
        let i = 3 * (y as usize * self.width + x as usize);
        self.px[i..i + 3].copy_from_slice(&c);
    }

    /// Fills the rectangle with corners (x0, y0) and (x1, y1), both inclusive, in any order.
    pub fn fill_rect(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: Rgb) {
        for y in y0.min(y1)..=y0.max(y1) {
            for x in x0.min(x1)..=x0.max(x1) {
                self.set(x, y, c);
            }
        }
    }

    /// A line from (x0, y0) to (x1, y1) (Bresenham), drawn with a square brush `thickness` pixels wide.
    pub fn line(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, thickness: i64, c: Rgb) {
        self.line_dashed(x0, y0, x1, y1, thickness, c, 0);
    }

    /// [`Canvas::line`], dashed: `dash` pixels on, `dash` off (0: solid).
    #[allow(clippy::too_many_arguments)]
    pub fn line_dashed(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, thickness: i64, c: Rgb, dash: i64) {
        let (lo, hi) = (-(thickness - 1) / 2, thickness / 2);
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        let mut step = 0i64;
        loop {
            if dash == 0 || (step / dash) % 2 == 0 {
                self.fill_rect(x + lo, y + lo, x + hi, y + hi, c);
            }
            step += 1;
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// Draws `text` with its top-left corner at (x, y), each font pixel `scale x scale`.
    pub fn text(&mut self, x: i64, y: i64, text: &str, scale: i64, c: Rgb) {
        for (i, ch) in text.chars().enumerate() {
            let g = glyph(ch);
            let gx = x + i as i64 * GLYPH_ADVANCE * scale;
            for (row, bits) in g.iter().enumerate() {
                for col in 0..5 {
                    if bits & (0x10 >> col) != 0 {
                        let (px, py) = (gx + col * scale, y + row as i64 * scale);
                        self.fill_rect(px, py, px + scale - 1, py + scale - 1, c);
                    }
                }
            }
        }
    }

    /// Width in pixels.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> usize {
        self.height
    }

    /// The pixels, RGB, row by row from the top.
    pub fn pixels(&self) -> &[u8] {
        &self.px
    }

    /// The PNG file of the canvas.
    pub fn to_png(&self) -> Vec<u8> {
        png::encode_rgb(self.width as u32, self.height as u32, &self.px)
    }
}

/// Horizontal distance between glyph origins, in font pixels (5 wide plus 1 of spacing).
const GLYPH_ADVANCE: i64 = 6;

/// Width in pixels of `text` drawn at `scale` (without the trailing spacing).
pub fn text_width(text: &str, scale: i64) -> i64 {
    let n = text.chars().count() as i64;
    if n == 0 { 0 } else { (n * GLYPH_ADVANCE - 1) * scale }
}

/// Height in pixels of one line of text at `scale`.
pub fn text_height(scale: i64) -> i64 {
    7 * scale
}

/// The 5x7 glyph of `c`: seven rows, bit 4 the leftmost pixel. Lowercase letters other than 'x' are drawn
/// as capitals; characters without a glyph as a hollow box.
pub fn glyph(c: char) -> [u8; 7] {
    let c = if c.is_ascii_lowercase() && c != 'x' { c.to_ascii_uppercase() } else { c };
    match c {
        ' ' => [0; 7],
        '0' => [0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e],
        '1' => [0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e],
        '2' => [0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f],
        '3' => [0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e],
        '4' => [0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02],
        '5' => [0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e],
        '6' => [0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e],
        '7' => [0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e],
        '9' => [0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c],
        'A' => [0x0e, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11],
        'B' => [0x1e, 0x11, 0x11, 0x1e, 0x11, 0x11, 0x1e],
        'C' => [0x0e, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0e],
        'D' => [0x1c, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1c],
        'E' => [0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x1f],
        'F' => [0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x10],
        'G' => [0x0e, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0f],
        'H' => [0x11, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11],
        'I' => [0x0e, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e],
        'J' => [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0c],
        'K' => [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1f],
        'M' => [0x11, 0x1b, 0x15, 0x15, 0x11, 0x11, 0x11],
        'N' => [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
        'O' => [0x0e, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e],
        'P' => [0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10, 0x10],
        'Q' => [0x0e, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0d],
        'R' => [0x1e, 0x11, 0x11, 0x1e, 0x14, 0x12, 0x11],
        'S' => [0x0f, 0x10, 0x10, 0x0e, 0x01, 0x01, 0x1e],
        'T' => [0x1f, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e],
        'V' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x0a, 0x04],
        'W' => [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0a],
        'X' => [0x11, 0x11, 0x0a, 0x04, 0x0a, 0x11, 0x11],
        'Y' => [0x11, 0x11, 0x11, 0x0a, 0x04, 0x04, 0x04],
        'Z' => [0x1f, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1f],
        'x' => [0x00, 0x00, 0x11, 0x0a, 0x04, 0x0a, 0x11],
        '.' => [0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x0c],
        ',' => [0x00, 0x00, 0x00, 0x00, 0x0c, 0x04, 0x08],
        ':' => [0x00, 0x0c, 0x0c, 0x00, 0x0c, 0x0c, 0x00],
        '%' => [0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03],
        '-' => [0x00, 0x00, 0x00, 0x1f, 0x00, 0x00, 0x00],
        '+' => [0x00, 0x04, 0x04, 0x1f, 0x04, 0x04, 0x00],
        '=' => [0x00, 0x00, 0x1f, 0x00, 0x1f, 0x00, 0x00],
        '/' => [0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00],
        '(' => [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02],
        ')' => [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08],
        '^' => [0x04, 0x0a, 0x11, 0x00, 0x00, 0x00, 0x00],
        '_' => [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1f],
        _ => [0x1f, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1f],
    }
}

/// Whether `c` has a glyph of its own (not the fallback box).
pub fn has_glyph(c: char) -> bool {
    c == ' ' || glyph(c) != glyph('\u{1}')
}

/// Axis ticks covering `[lo, hi]`: a step of 1, 2 or 5 times a power of ten giving about `target` intervals,
/// and the first and last ticks (multiples of the step, `first <= lo`, `last >= hi`).
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> (f64, f64, f64) {
    let (lo, hi) = if hi > lo { (lo, hi) } else { (lo, lo + 1.0) };
    let raw = (hi - lo) / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|&s| s >= raw * 0.999).unwrap_or(10.0 * mag);
    let first = (lo / step + 1e-9).floor() * step;
    let last = (hi / step - 1e-9).ceil() * step;
    (first, last, step)
}

/// Decimals needed to print multiples of `step` exactly (0 for integers, 1 for 0.5, 2 for 0.25 or 0.05).
fn decimals(step: f64) -> usize {
    (0..6).find(|&d| ((step * 10f64.powi(d as i32)).round() - step * 10f64.powi(d as i32)).abs() < 1e-6).unwrap_or(6)
}

/// One line of the plot: a label and (x, y) points, drawn in x order.
pub struct Series {
    /// Legend text.
    pub label: String,
    /// The points.
    pub points: Vec<(f64, f64)>,
}

/// Text of a plot.
pub struct Labels<'a> {
    /// Title, drawn on top.
    pub title: &'a str,
    /// A second, smaller line under the title (e.g. the GPU).
    pub subtitle: &'a str,
    /// The x axis label (drawn under the axis).
    pub x_label: &'a str,
    /// The y axis label (drawn above the axis).
    pub y_label: &'a str,
}

/// A line plot of `series` with x ticks formatted as percentages (`x_percent`) or plain numbers, y from 0,
/// a dashed reference line at `y_ref`, and a legend; returns the canvas.
pub fn line_plot(series: &[Series], labels: &Labels<'_>, x_percent: bool, y_ref: Option<f64>) -> Canvas {
    let (w, h) = (960i64, 600i64);
    let mut cv = Canvas::new(w as usize, h as usize, WHITE);
    let (left, right, top, bottom) = (90i64, w - 190, 104i64, h - 80);

    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let x_max = xs.clone().fold(f64::NEG_INFINITY, f64::max);
    let x_min = xs.fold(f64::INFINITY, f64::min);
    let y_max = ys.fold(y_ref.unwrap_or(0.0), f64::max);
    let (x_min, x_max) = if x_min.is_finite() { (x_min.min(0.0), x_max) } else { (0.0, 1.0) };
    let (x0, x1, xstep) = nice_ticks(x_min, x_max, 6);
    let (y0, y1, ystep) = nice_ticks(0.0, if y_max > 0.0 { y_max * 1.08 } else { 1.0 }, 6);
    let px = |x: f64| left + ((x - x0) / (x1 - x0) * (right - left) as f64).round() as i64;
    let py = |y: f64| bottom - ((y - y0) / (y1 - y0) * (bottom - top) as f64).round() as i64;

    // Title.
    let ts = if text_width(labels.title, 3) <= w - 20 { 3 } else { 2 };
    cv.text((w - text_width(labels.title, ts)) / 2, 18, labels.title, ts, BLACK);
    cv.text((w - text_width(labels.subtitle, 2)) / 2, 18 + text_height(ts) + 10, labels.subtitle, 2, GREY);

    // Grid and y ticks.
    let ydec = decimals(ystep);
    let mut y = y0;
    while y <= y1 + ystep * 1e-6 {
        let yy = py(y);
        cv.line(left, yy, right, yy, 1, GRID);
        cv.line(left - 6, yy, left, yy, 2, BLACK);
        let t = format!("{y:.ydec$}");
        cv.text(left - 12 - text_width(&t, 2), yy - text_height(2) / 2, &t, 2, BLACK);
        y += ystep;
    }
    // x ticks.
    let xdec = decimals(if x_percent { xstep * 100.0 } else { xstep });
    let mut x = x0;
    while x <= x1 + xstep * 1e-6 {
        let xx = px(x);
        cv.line(xx, top, xx, bottom, 1, GRID);
        cv.line(xx, bottom, xx, bottom + 6, 2, BLACK);
        let t = if x_percent { format!("{:.xdec$}%", x * 100.0) } else { format!("{x:.xdec$}") };
        cv.text(xx - text_width(&t, 2) / 2, bottom + 12, &t, 2, BLACK);
        x += xstep;
    }
    // Axes.
    cv.line(left, top, left, bottom, 2, BLACK);
    cv.line(left, bottom, right, bottom, 2, BLACK);
    cv.text((left + right - text_width(labels.x_label, 2)) / 2, bottom + 40, labels.x_label, 2, BLACK);
    cv.text(left - 70, top - 26, labels.y_label, 2, BLACK);

    // Reference line.
    if let Some(r) = y_ref.filter(|r| (y0..=y1).contains(r)) {
        cv.line_dashed(left, py(r), right, py(r), 2, GREY, 8);
    }

    // Series.
    for (i, s) in series.iter().enumerate() {
        let c = PALETTE[i % PALETTE.len()];
        let mut pts = s.points.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        for pair in pts.windows(2) {
            cv.line(px(pair[0].0), py(pair[0].1), px(pair[1].0), py(pair[1].1), 3, c);
        }
        for &(x, y) in &pts {
            cv.fill_rect(px(x) - 4, py(y) - 4, px(x) + 4, py(y) + 4, c);
        }
    }

    // Legend.
    let (lx, mut ly) = (right + 24, top + 10);
    for (i, s) in series.iter().enumerate() {
        let c = PALETTE[i % PALETTE.len()];
        cv.line(lx, ly + 7, lx + 30, ly + 7, 3, c);
        cv.fill_rect(lx + 11, ly + 3, lx + 19, ly + 11, c);
        cv.text(lx + 40, ly, &s.label, 2, BLACK);
        ly += 30;
    }
    if y_ref.is_some() {
        cv.line_dashed(lx, ly + 7, lx + 30, ly + 7, 2, GREY, 8);
        cv.text(lx + 40, ly, "CUBLAS", 2, BLACK);
    }
    cv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glyphs_cover_the_plot_alphabet() {
        for c in "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz.%x-()/:,=+^_ ".chars() {
            assert!(has_glyph(c), "no glyph for {c:?}");
        }
        assert!(!has_glyph('#'));
        // Every glyph fits in 5 columns.
        for c in "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZx.%-()/:,=+^_".chars() {
            assert!(glyph(c).iter().all(|r| *r < 0x20), "glyph {c:?} is wider than 5 pixels");
        }
        // Distinct characters have distinct glyphs (a typo in the table would likely duplicate one).
        let chars: Vec<char> = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZx.%-()/:,=+^_".chars().collect();
        for (i, a) in chars.iter().enumerate() {
            for b in &chars[i + 1..] {
                assert_ne!(glyph(*a), glyph(*b), "{a:?} and {b:?} look the same");
            }
        }
    }

    #[test]
    fn text_draws_inside_its_box() {
        let mut cv = Canvas::new(100, 30, WHITE);
        cv.text(2, 3, "8%", 2, BLACK);
        let w = text_width("8%", 2);
        let mut inked = 0;
        for y in 0..30 {
            for x in 0..100 {
                let p = cv.get(x, y).unwrap();
                if p == BLACK {
                    inked += 1;
                    assert!((2..2 + w).contains(&x) && (3..3 + text_height(2)).contains(&y), "ink at ({x}, {y})");
                }
            }
        }
        assert!(inked > 20);
    }

    #[test]
    fn lines_reach_both_ends_and_clip() {
        let mut cv = Canvas::new(50, 40, WHITE);
        cv.line(3, 4, 45, 30, 1, BLACK);
        assert_eq!(cv.get(3, 4), Some(BLACK));
        assert_eq!(cv.get(45, 30), Some(BLACK));
        cv.line(-10, 20, 100, 20, 3, BLACK); // clipped, must not panic
        assert_eq!(cv.get(0, 19), Some(BLACK));
        assert_eq!(cv.get(49, 21), Some(BLACK));
        assert_eq!(cv.get(49, 23), Some(WHITE));
        let mut d = Canvas::new(40, 3, WHITE);
        d.line_dashed(0, 1, 39, 1, 1, BLACK, 5);
        assert_eq!(d.get(0, 1), Some(BLACK));
        assert_eq!(d.get(6, 1), Some(WHITE));
        assert_eq!(d.get(10, 1), Some(BLACK));
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_ticks(0.0, 0.5, 6), (0.0, 0.5, 0.1));
        let (a, b, s) = nice_ticks(0.0, 3.7, 6);
        assert_eq!((a, b, s), (0.0, 4.0, 1.0));
        let (a, b, s) = nice_ticks(0.0, 2.6, 6);
        assert_eq!((a, b, s), (0.0, 3.0, 0.5));
        let (a, b, s) = nice_ticks(0.0, 12.0, 6);
        assert_eq!((a, b, s), (0.0, 12.0, 2.0));
        assert_eq!(nice_ticks(1.0, 1.0, 5).2, 0.2);
        assert_eq!(decimals(0.5), 1);
        assert_eq!(decimals(2.0), 0);
        assert_eq!(decimals(0.05), 2);
    }

    #[test]
    fn plot_renders_a_png() {
        let s = vec![
            Series { label: "BS 16".into(), points: vec![(0.05, 3.0), (0.1, 1.9), (0.22, 0.9), (0.5, 0.4)] },
            Series { label: "BS 64".into(), points: vec![(0.05, 8.0), (0.5, 1.1)] },
        ];
        let labels = Labels { title: "SPEEDUP", subtitle: "GPU", x_label: "DENSITY", y_label: "SPEEDUP (x)" };
        let cv = line_plot(&s, &labels, true, Some(1.0));
        let file = cv.to_png();
        // The first series' colour appears on the canvas.
        let any = (0..600).any(|y| (0..960).any(|x| cv.get(x, y) == Some(PALETTE[0])));
        assert!(any);
        // The file decodes to the canvas, and is small.
        let (w, h, rgb) = png::tests::decode_rgb(&file);
        assert_eq!((w as usize, h as usize), (cv.width(), cv.height()));
        assert!(rgb == cv.pixels(), "decoded pixels differ from the canvas");
        assert!(file.len() < 100_000, "{} bytes", file.len());
    }
}
