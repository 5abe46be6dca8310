//! A minimal PNG encoder: 8-bit RGB, no filtering, the image data in a zlib stream of stored (uncompressed)
//! deflate blocks. Plots of a few hundred kilobytes do not need compression, and this needs no crate.
//!
//! File layout (PNG spec, ISO/IEC 15948): the 8-byte signature, then chunks of
//! `length (u32 BE) | type (4 ASCII bytes) | data | CRC-32 (u32 BE) of type and data`: IHDR, IDAT, IEND.
//! The IDAT data is a zlib stream (RFC 1950): header `78 01`, deflate blocks (RFC 1951) of type 00 (stored:
//! `BFINAL|00` in one byte, `LEN` and `!LEN` as u16 LE, then `LEN` raw bytes), and the Adler-32 of the raw data
//! (u32 BE). The raw data is each row prefixed with filter byte 0 (none).

/// The PNG file signature.
pub const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// Largest payload of one stored deflate block.
const STORED_MAX: usize = 65_535;

const CRC_TABLE: [u32; 256] = crc_table();

const fn crc_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        t[n] = c;
        n += 1;
    }
    t
}

/// CRC-32 (ISO 3309 / ITU-T V.42, reflected polynomial 0xEDB88320) as PNG chunks use it.
pub fn crc32(data: &[u8]) -> u32 {
    crc32_update(0xffff_ffff, data) ^ 0xffff_ffff
}

fn crc32_update(mut c: u32, data: &[u8]) -> u32 {
    for &b in data {
        c = CRC_TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    c
}

/// Adler-32 (RFC 1950) of `data`.
pub fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65_521;
    let (mut a, mut b) = (1u32, 0u32);
    // 5552 bytes is the most that can be summed before b could overflow u32 (zlib's NMAX).
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

/// `raw` as a zlib stream of stored deflate blocks.
pub fn zlib_stored(raw: &[u8]) -> Vec<u8> {
    let blocks = raw.len().div_ceil(STORED_MAX).max(1);
    let mut out = Vec::with_capacity(raw.len() + 5 * blocks + 6);
    // CMF = 0x78 (deflate, 32 KiB window), FLG = 0x01 (fastest level, (CMF*256 + FLG) % 31 == 0).
    out.extend_from_slice(&[0x78, 0x01]);
    let mut chunks = raw.chunks(STORED_MAX).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]); // one final, empty stored block
    }
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        out.push(u8::from(last)); // BFINAL, BTYPE = 00
        let len = chunk.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(&adler32(raw).to_be_bytes());
    out
}

/// Appends one chunk (length, type, data, CRC of type + data).
fn push_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    let len = u32::try_from(data.len()).expect("a PNG chunk holds less than 2^31 bytes");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&(crc32_update(crc32_update(0xffff_ffff, kind), data) ^ 0xffff_ffff).to_be_bytes());
}

/// A PNG file of a `width x height` 8-bit RGB image, `rgb` holding `3 * width * height` bytes row by row.
/// Panics if `rgb` has the wrong length or a dimension is 0 (callers build the buffer from the same numbers).
pub fn encode_rgb(width: u32, height: u32, rgb: &[u8]) -> Vec<u8> {
    let (w, h) = (width as usize, height as usize);
    assert!(w > 0 && h > 0, "a PNG image needs positive dimensions, got {width}x{height}");
    assert_eq!(rgb.len(), 3 * w * h, "RGB buffer length for {width}x{height}");
    let mut raw = Vec::with_capacity(h * (1 + 3 * w));
    for row in rgb.chunks(3 * w) {
        raw.push(0); // filter type: none
        raw.extend_from_slice(row);
    }
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    // Bit depth 8, colour type 2 (RGB), compression 0, filter method 0, no interlace.
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);

    let idat = zlib_stored(&raw);
    let mut out = Vec::with_capacity(idat.len() + 64);
    out.extend_from_slice(&SIGNATURE);
    push_chunk(&mut out, b"IHDR", &ihdr);
    push_chunk(&mut out, b"IDAT", &idat);
    push_chunk(&mut out, b"IEND", &[]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be32(b: &[u8]) -> u32 {
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Walks a PNG made of stored blocks the way a decoder would, checking every invariant; returns
    /// (width, height, raw scanlines, chunk types).
    fn decode(png: &[u8]) -> (u32, u32, Vec<u8>, Vec<String>) {
        assert_eq!(&png[..8], &SIGNATURE, "signature");
        let mut pos = 8;
        let (mut w, mut h) = (0, 0);
        let mut idat = Vec::new();
        let mut kinds = Vec::new();
        while pos < png.len() {
            let len = be32(&png[pos..]) as usize;
            let kind = &png[pos + 4..pos + 8];
            let data = &png[pos + 8..pos + 8 + len];
            let crc = be32(&png[pos + 8 + len..]);
            assert_eq!(crc, crc32(&png[pos + 4..pos + 8 + len]), "CRC of chunk {}", String::from_utf8_lossy(kind));
            kinds.push(String::from_utf8_lossy(kind).into_owned());
            match kind {
                b"IHDR" => {
                    assert_eq!(len, 13);
                    w = be32(data);
                    h = be32(&data[4..]);
                    assert_eq!(&data[8..], &[8, 2, 0, 0, 0]);
                }
                b"IDAT" => idat.extend_from_slice(data),
                b"IEND" => assert_eq!(len, 0),
                _ => panic!("unexpected chunk"),
            }
            pos += 12 + len;
        }
        assert_eq!(pos, png.len(), "chunks end exactly at the end of the file");
        // zlib header.
        assert_eq!(idat[0] & 0x0f, 8, "CM = deflate");
        assert_eq!((u32::from(idat[0]) * 256 + u32::from(idat[1])) % 31, 0, "FCHECK");
        assert_eq!(idat[1] & 0x20, 0, "no preset dictionary");
        let mut p = 2;
        let mut raw = Vec::new();
        loop {
            let hdr = idat[p];
            assert_eq!(hdr & 0b110, 0, "stored block");
            let len = u16::from_le_bytes([idat[p + 1], idat[p + 2]]);
            let nlen = u16::from_le_bytes([idat[p + 3], idat[p + 4]]);
            assert_eq!(len, !nlen, "LEN/NLEN");
            raw.extend_from_slice(&idat[p + 5..p + 5 + len as usize]);
            p += 5 + len as usize;
            if hdr & 1 == 1 {
                break;
            }
        }
        assert_eq!(be32(&idat[p..]), adler32(&raw), "Adler-32 trailer");
        assert_eq!(p + 4, idat.len(), "nothing after the trailer");
        (w, h, raw, kinds)
    }

    #[test]
    fn crc32_known_values() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        // The CRC of an IEND chunk (type only, no data) is in every PNG file: AE 42 60 82.
        assert_eq!(crc32(b"IEND"), 0xae42_6082);
    }

    #[test]
    fn adler32_known_values() {
        assert_eq!(adler32(b""), 1);
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
        // Long input exercises the modular reduction: 100000 bytes of 0xff.
        let long = vec![0xffu8; 100_000];
        let (mut a, mut b) = (1u64, 0u64);
        for &x in &long {
            a = (a + u64::from(x)) % 65_521;
            b = (b + a) % 65_521;
        }
        assert_eq!(adler32(&long), ((b << 16) | a) as u32);
    }

    #[test]
    fn zlib_stored_splits_into_blocks() {
        for n in [0usize, 1, 65_535, 65_536, 200_000] {
            let raw: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
            let z = zlib_stored(&raw);
            let blocks = n.div_ceil(65_535).max(1);
            assert_eq!(z.len(), 2 + 5 * blocks + n + 4, "size for {n} bytes");
            assert_eq!(&z[..2], &[0x78, 0x01]);
        }
    }

    #[test]
    fn png_structure_decodes() {
        let (w, h) = (300u32, 250u32); // 250 rows of 901 bytes: several stored blocks
        let rgb: Vec<u8> = (0..3 * w * h).map(|i| (i % 256) as u8).collect();
        let png = encode_rgb(w, h, &rgb);
        let (dw, dh, raw, kinds) = decode(&png);
        assert_eq!((dw, dh), (w, h));
        assert_eq!(kinds, ["IHDR", "IDAT", "IEND"]);
        assert_eq!(raw.len(), (h * (1 + 3 * w)) as usize);
        for (r, line) in raw.chunks((1 + 3 * w) as usize).enumerate() {
            assert_eq!(line[0], 0, "filter byte of row {r}");
            assert_eq!(&line[1..], &rgb[r * 3 * w as usize..(r + 1) * 3 * w as usize]);
        }
        // The IEND chunk is the well-known 12 bytes.
        assert_eq!(&png[png.len() - 12..], &[0, 0, 0, 0, b'I', b'E', b'N', b'D', 0xae, 0x42, 0x60, 0x82]);
    }

    #[test]
    fn one_pixel_png() {
        let png = encode_rgb(1, 1, &[255, 0, 0]);
        let (w, h, raw, _) = decode(&png);
        assert_eq!((w, h, raw), (1, 1, vec![0, 255, 0, 0]));
    }
}
