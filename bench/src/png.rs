//! PNG files of RGB images through the `png` crate, compressed. An image of at most 256 colours (the plots: a
//! white background, black text and axes, greys, one colour per line) is written as an indexed image with the
//! smallest bit depth that holds its palette (1, 2, 4 or 8 bits per pixel), unfiltered (the PNG spec's advice
//! for palette images); anything else as 8-bit RGB with adaptive filtering. Either way the deflate level is
//! `High`: the 960 x 600 speedup plot takes tens of kilobytes instead of 1.7 MB of raw pixels.

use std::collections::HashMap;

/// The palette of `rgb` (in order of first appearance) and each pixel's index in it; `None` with more than
/// 256 colours.
fn palette(rgb: &[u8]) -> Option<(Vec<[u8; 3]>, Vec<u8>)> {
    let mut colours: Vec<[u8; 3]> = Vec::new();
    let mut index: HashMap<[u8; 3], u8> = HashMap::new();
    let mut indices = Vec::with_capacity(rgb.len() / 3);
    for px in rgb.chunks_exact(3) {
        let c = [px[0], px[1], px[2]];
        let i = match index.get(&c) {
            Some(&i) => i,
            None => {
                let i = u8::try_from(colours.len()).ok()?;
                colours.push(c);
                index.insert(c, i);
                i
            }
        };
        indices.push(i);
    }
    Some((colours, indices))
}

/// The smallest PNG bit depth for indices below `colours`.
fn index_bits(colours: usize) -> u8 {
    match colours {
        0..=2 => 1,
        3..=4 => 2,
        5..=16 => 4,
        _ => 8,
    }
}

/// `indices` (`width` per row) packed `bits` per pixel, most significant bits first, each row starting on a
/// byte boundary (PNG's layout for bit depths below 8).
fn pack(indices: &[u8], width: usize, bits: u8) -> Vec<u8> {
    if bits == 8 {
        return indices.to_vec();
    }
    let per_byte = 8 / usize::from(bits);
    let mut out = Vec::with_capacity(indices.len().div_ceil(per_byte));
    for row in indices.chunks(width) {
        for group in row.chunks(per_byte) {
            let mut byte = 0u8;
            for (j, &i) in group.iter().enumerate() {
                byte |= i << (8 - bits as usize * (j + 1));
            }
            out.push(byte);
        }
    }
    out
}

/// A PNG file of a `width x height` 8-bit RGB image, `rgb` holding `3 * width * height` bytes row by row.
/// Panics if `rgb` has the wrong length or a dimension is 0 (callers build the buffer from the same numbers).
pub fn encode_rgb(width: u32, height: u32, rgb: &[u8]) -> Vec<u8> {
    let (w, h) = (width as usize, height as usize);
    assert!(w > 0 && h > 0, "a PNG image needs positive dimensions, got {width}x{height}");
    assert_eq!(rgb.len(), 3 * w * h, "RGB buffer length for {width}x{height}");
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, width, height);
    enc.set_compression(png::Compression::High);
    let data = match palette(rgb) {
        Some((colours, indices)) => {
            let bits = index_bits(colours.len());
            enc.set_color(png::ColorType::Indexed);
            enc.set_depth(match bits {
                1 => png::BitDepth::One,
                2 => png::BitDepth::Two,
                4 => png::BitDepth::Four,
                _ => png::BitDepth::Eight,
            });
            enc.set_palette(colours.concat());
            enc.set_filter(png::Filter::NoFilter);
            pack(&indices, w, bits)
        }
        None => {
            enc.set_color(png::ColorType::Rgb);
            enc.set_depth(png::BitDepth::Eight);
            enc.set_filter(png::Filter::Adaptive);
            rgb.to_vec()
        }
    };
    // Writing into a Vec cannot fail, and the data has the length the header announces.
    let mut writer = enc.write_header().expect("PNG header into memory");
    writer.write_image_data(&data).expect("PNG image data into memory");
    writer.finish().expect("PNG end into memory");
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Decodes a PNG with the `png` crate, palettes expanded: (width, height, RGB bytes).
    pub(crate) fn decode_rgb(file: &[u8]) -> (u32, u32, Vec<u8>) {
        let mut dec = png::Decoder::new(std::io::Cursor::new(file));
        dec.set_transformations(png::Transformations::EXPAND);
        let mut reader = dec.read_info().expect("a PNG header");
        let mut buf = vec![0; reader.output_buffer_size().expect("a sane size")];
        let info = reader.next_frame(&mut buf).expect("the image");
        assert_eq!((info.color_type, info.bit_depth), (png::ColorType::Rgb, png::BitDepth::Eight));
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    #[test]
    fn palette_images_round_trip_at_every_depth() {
        for (colours, w, h) in [(1usize, 1u32, 1u32), (2, 13, 5), (4, 7, 9), (16, 33, 17), (200, 300, 40)] {
            let rgb: Vec<u8> = (0..(w * h) as usize)
                .flat_map(|i| {
                    let c = (i * 7 + i / 5) % colours;
                    [c as u8, (255 - c) as u8, (c * 3 % 256) as u8]
                })
                .collect();
            let file = encode_rgb(w, h, &rgb);
            assert_eq!(&file[..8], b"\x89PNG\r\n\x1a\n");
            assert_eq!(decode_rgb(&file), (w, h, rgb), "{colours} colours, {w}x{h}");
        }
    }

    #[test]
    fn many_colours_are_written_as_rgb() {
        let (w, h) = (300u32, 250u32);
        let rgb: Vec<u8> = (0..3 * w * h).map(|i| (i % 251) as u8).collect();
        let file = encode_rgb(w, h, &rgb);
        assert_eq!(decode_rgb(&file), (w, h, rgb));
    }

    #[test]
    fn packing() {
        assert_eq!(pack(&[1, 0, 1, 1, 0, 0, 0, 1, 1], 9, 1), [0b1011_0001, 0b1000_0000]);
        assert_eq!(pack(&[3, 2, 1, 0, 3], 5, 2), [0b1110_0100, 0b1100_0000]);
        // Rows start on a byte boundary.
        assert_eq!(pack(&[15, 1, 2, 3, 4, 5], 3, 4), [0xf1, 0x20, 0x34, 0x50]);
        assert_eq!([2, 4, 16, 17, 256].map(index_bits), [1, 2, 4, 8, 8]);
        let grey256: Vec<u8> = (0..300u32).flat_map(|i| [(i % 256) as u8; 3]).collect();
        assert_eq!(palette(&grey256).map(|(c, _)| c.len()), Some(256));
        let rainbow: Vec<u8> = (0..257u32).flat_map(|i| [(i % 256) as u8, (i / 256) as u8, 0]).collect();
        assert!(palette(&rainbow).is_none());
    }
}
