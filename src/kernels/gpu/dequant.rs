//! Reading GGML blocks inside `#[cube]` kernels: one element of a packed weight row, dequantised to f32.
//!
//! Weights live on the device as the file's bytes in a `u32` buffer (little-endian, the last word
//! zero-padded). Every field of every supported block sits at an even byte offset (all block sizes are
//! even), so a kernel reads bytes and 16-bit halves out of the word that holds them; nothing is ever read
//! past the last word of a row's last block.
//!
//! `fmt` is the GGML type id (`enum ggml_type`), a comptime value: each kernel is compiled for one format
//! and the branches for the others vanish. f16 scales are decoded from their bits by hand (WebGPU adapters
//! without `shader-f16`, SwiftShader among them, have no f16 type); the loader rejects inf/NaN, so only
//! normal numbers, subnormals and zero occur.
//!
//! The formulas follow llama.cpp's `dequantize_row_*` (`ggml-quants.c`), element by element: for element
//! `e` of a row, the block `e / block_elems`, then the position inside it.

use cubecl::prelude::*;

/// `enum ggml_type` ids of the formats the kernels read (as `loader::quant` numbers them).
pub(crate) mod id {
    use crate::loader::quant::GgmlType;
    pub const F32: u32 = GgmlType::F32.id();
    pub const F16: u32 = GgmlType::F16.id();
    pub const Q4_0: u32 = GgmlType::Q4_0.id();
    pub const Q4_1: u32 = GgmlType::Q4_1.id();
    pub const Q5_0: u32 = GgmlType::Q5_0.id();
    pub const Q5_1: u32 = GgmlType::Q5_1.id();
    pub const Q8_0: u32 = GgmlType::Q8_0.id();
    pub const Q2_K: u32 = GgmlType::Q2_K.id();
    pub const Q3_K: u32 = GgmlType::Q3_K.id();
    pub const Q4_K: u32 = GgmlType::Q4_K.id();
    pub const Q5_K: u32 = GgmlType::Q5_K.id();
    pub const Q6_K: u32 = GgmlType::Q6_K.id();
    pub const IQ4_NL: u32 = GgmlType::IQ4_NL.id();
    pub const IQ4_XS: u32 = GgmlType::IQ4_XS.id();
    pub const BF16: u32 = GgmlType::BF16.id();
}

/// Elements and bytes per block of a format (as `loader::quant` lays it out), `None` for one the kernels
/// do not read.
pub(crate) fn block_layout(fmt: u32) -> Option<(usize, usize)> {
    use crate::loader::quant::GgmlType;
    let ty = GgmlType::from_id(fmt)?;
    let read = matches!(
        fmt,
        id::F32
            | id::F16
            | id::BF16
            | id::Q4_0
            | id::Q4_1
            | id::Q5_0
            | id::Q5_1
            | id::Q8_0
            | id::IQ4_NL
            | id::Q2_K
            | id::Q3_K
            | id::Q4_K
            | id::Q5_K
            | id::Q6_K
            | id::IQ4_XS
    );
    read.then(|| (ty.block_elems(), ty.block_bytes()))
}

/// Byte `off` of the buffer, in the low 8 bits.
#[cube]
pub(crate) fn byte_at(w: &[u32], off: usize) -> u32 {
    (w[off / 4] >> (((off % 4) * 8) as u32)) & 0xFF
}

/// The little-endian 16 bits at the even byte offset `off`.
#[cube]
pub(crate) fn half_at(w: &[u32], off: usize) -> u32 {
    (w[off / 4] >> (((off % 4) * 8) as u32)) & 0xFFFF
}

/// A signed byte as f32.
#[cube]
pub(crate) fn signed_byte(b: u32) -> f32 {
    f32::cast_from(b) - f32::cast_from((b >> 7) * 256)
}

/// IEEE half bits → f32 (normal numbers, subnormals, ±0).
#[cube]
pub(crate) fn f16_to_f32(h: u32) -> f32 {
    let sign = h >> 15;
    let exp = (h >> 10) & 0x1F;
    let mant = h & 0x3FF;
    let mut v = f32::reinterpret((sign << 31) | ((exp + 112) << 23) | (mant << 13));
    if exp == 0 {
        // Subnormal or zero: mant · 2⁻²⁴, exact in f32.
        let mag = f32::cast_from(mant) * 5.9604645e-8;
        v = mag;
        if sign == 1 {
            v = -mag;
        }
    }
    v
}

/// Scale (bits 0..6) and min (bits 8..14) of sub-block `j` (0..8) of a Q4_K/Q5_K super-block whose 12
/// scale bytes start at `sc` (llama.cpp's `get_scale_min_k4`).
#[cube]
pub(crate) fn scale_min_k4(w: &[u32], sc: usize, j: usize) -> u32 {
    if j < 4 {
        (byte_at(w, sc + j) & 63) | ((byte_at(w, sc + j + 4) & 63) << 8)
    } else {
        let hi = byte_at(w, sc + j + 4);
        let s = (hi & 0xF) | ((byte_at(w, sc + j - 4) >> 6) << 4);
        let m = (hi >> 4) | ((byte_at(w, sc + j) >> 6) << 4);
        s | (m << 8)
    }
}

/// Entry `q` (0..16) of the IQ4 codebook (`kvalues_iq4nl`: −127, −104, −83, −65, −49, −35, −22, −10, 1,
/// 13, 25, 38, 53, 69, 89, 113), read from its sixteen signed bytes packed little-endian into four words.
#[cube]
pub(crate) fn iq4_value(q: u32) -> f32 {
    let quad = q / 4;
    let mut word = 0xBFAD_9881u32;
    if quad == 1 {
        word = 0xF6EA_DDCFu32;
    } else if quad == 2 {
        word = 0x2619_0D01u32;
    } else if quad == 3 {
        word = 0x7159_4535u32;
    }
    signed_byte((word >> ((q % 4) * 8)) & 0xFF)
}

/// Element `e` of the weight row whose first block starts at byte `base`, dequantised.
#[cube]
pub(crate) fn dequant_elem(w: &[u32], base: usize, e: usize, #[comptime] fmt: u32) -> f32 {
    let mut v = 0.0f32;
    if comptime![fmt == id::F32] {
        v = f32::reinterpret(w[base / 4 + e]);
    } else if comptime![fmt == id::F16] {
        v = f16_to_f32(half_at(w, base + 2 * e));
    } else if comptime![fmt == id::BF16] {
        v = f32::reinterpret(half_at(w, base + 2 * e) << 16);
    } else if comptime![fmt == id::Q8_0] {
        let bo = base + (e / 32) * 34;
        let d = f16_to_f32(half_at(w, bo));
        v = d * signed_byte(byte_at(w, bo + 2 + e % 32));
    } else if comptime![fmt == id::Q4_0] {
        let bo = base + (e / 32) * 18;
        let j = e % 32;
        let d = f16_to_f32(half_at(w, bo));
        let q = (byte_at(w, bo + 2 + j % 16) >> (((j / 16) * 4) as u32)) & 0xF;
        v = d * (f32::cast_from(q) - 8.0);
    } else if comptime![fmt == id::Q4_1] {
        let bo = base + (e / 32) * 20;
        let j = e % 32;
        let d = f16_to_f32(half_at(w, bo));
        let m = f16_to_f32(half_at(w, bo + 2));
        let q = (byte_at(w, bo + 4 + j % 16) >> (((j / 16) * 4) as u32)) & 0xF;
        v = d * f32::cast_from(q) + m;
    } else if comptime![fmt == id::Q5_0] {
        let bo = base + (e / 32) * 22;
        let j = e % 32;
        let d = f16_to_f32(half_at(w, bo));
        let qh = half_at(w, bo + 2) | (half_at(w, bo + 4) << 16);
        let lo = (byte_at(w, bo + 6 + j % 16) >> (((j / 16) * 4) as u32)) & 0xF;
        let q = lo | (((qh >> (j as u32)) & 1) << 4);
        v = d * (f32::cast_from(q) - 16.0);
    } else if comptime![fmt == id::Q5_1] {
        let bo = base + (e / 32) * 24;
        let j = e % 32;
        let d = f16_to_f32(half_at(w, bo));
        let m = f16_to_f32(half_at(w, bo + 2));
        let qh = half_at(w, bo + 4) | (half_at(w, bo + 6) << 16);
        let lo = (byte_at(w, bo + 8 + j % 16) >> (((j / 16) * 4) as u32)) & 0xF;
        let q = lo | (((qh >> (j as u32)) & 1) << 4);
        v = d * f32::cast_from(q) + m;
    } else if comptime![fmt == id::Q4_K || fmt == id::Q5_K] {
        // d, dmin, scales[12], (Q5_K: qh[32]), qs[128]; 64-element chunks of 2 sub-blocks of 32.
        let bytes = comptime![if fmt == id::Q4_K { 144usize } else { 176usize }];
        let qs_off = comptime![if fmt == id::Q4_K { 16usize } else { 48usize }];
        let bo = base + (e / 256) * bytes;
        let i = e % 256;
        let c = i / 64;
        let hi = (i % 64) / 32;
        let l = i % 32;
        let d = f16_to_f32(half_at(w, bo));
        let dmin = f16_to_f32(half_at(w, bo + 2));
        let sm = scale_min_k4(w, bo + 4, 2 * c + hi);
        let sc = f32::cast_from(sm & 0xFF);
        let mn = f32::cast_from(sm >> 8);
        let mut q = (byte_at(w, bo + qs_off + c * 32 + l) >> ((hi * 4) as u32)) & 0xF;
        if comptime![fmt == id::Q5_K] {
            q += ((byte_at(w, bo + 16 + l) >> ((2 * c + hi) as u32)) & 1) << 4;
        }
        v = d * sc * f32::cast_from(q) - dmin * mn;
    } else if comptime![fmt == id::Q6_K] {
        // ql[128], qh[64], scales[16] (i8), d; two 128-element halves of four 32-element quarters.
        let bo = base + (e / 256) * 210;
        let i = e % 256;
        let h = i / 128;
        let r = i % 128;
        let qq = r / 32;
        let l = r % 32;
        let lo = (byte_at(w, bo + h * 64 + l + (qq % 2) * 32) >> (((qq / 2) * 4) as u32)) & 0xF;
        let hb = (byte_at(w, bo + 128 + h * 32 + l) >> ((2 * qq) as u32)) & 3;
        let sc = signed_byte(byte_at(w, bo + 192 + h * 8 + l / 16 + 2 * qq));
        let d = f16_to_f32(half_at(w, bo + 208));
        v = d * sc * (f32::cast_from(lo | (hb << 4)) - 32.0);
    } else if comptime![fmt == id::Q2_K || fmt == id::Q3_K] {
        // Element i = 128·h + 32·j + l of a super-block: 2 low bits in bits 2j of qs[32·h + l], sub-block
        // (16 elements) s = i / 16. Q2_K: scales[16]@0 (scale | min << 4), qs@16, d@80, dmin@82. Q3_K:
        // hmask[32]@0 (the third bit, bit 4h + j of hmask[l]), qs@32, 6-bit signed scales[12]@96, d@108.
        let bytes = comptime![if fmt == id::Q2_K { 84usize } else { 110usize }];
        let qs_off = comptime![if fmt == id::Q2_K { 16usize } else { 32usize }];
        let bo = base + (e / 256) * bytes;
        let i = e % 256;
        let h = i / 128;
        let j = (i / 32) % 4;
        let l = i % 32;
        let s = i / 16;
        let low = (byte_at(w, bo + qs_off + 32 * h + l) >> ((2 * j) as u32)) & 3;
        if comptime![fmt == id::Q2_K] {
            let sc = byte_at(w, bo + s);
            let d = f16_to_f32(half_at(w, bo + 80));
            let dmin = f16_to_f32(half_at(w, bo + 82));
            v = d * f32::cast_from(sc & 0xF) * f32::cast_from(low) - dmin * f32::cast_from(sc >> 4);
        } else {
            let mut lo4 = byte_at(w, bo + 96 + s % 8);
            if s >= 8 {
                lo4 >>= 4;
            }
            let hi2 = (byte_at(w, bo + 104 + s % 4) >> ((2 * (s / 4)) as u32)) & 3;
            let scale = f32::cast_from((lo4 & 0xF) | (hi2 << 4)) - 32.0;
            let high = (byte_at(w, bo + l) >> ((4 * h + j) as u32)) & 1;
            let d = f16_to_f32(half_at(w, bo + 108));
            v = d * scale * (f32::cast_from(low + 4 * high) - 4.0);
        }
    } else if comptime![fmt == id::IQ4_NL] {
        // d@0, qs[16]@2: element j < 16 the low nibble of qs[j], j + 16 the high one.
        let bo = base + (e / 32) * 18;
        let j = e % 32;
        let d = f16_to_f32(half_at(w, bo));
        let q = (byte_at(w, bo + 2 + j % 16) >> (((j / 16) * 4) as u32)) & 0xF;
        v = d * iq4_value(q);
    } else if comptime![fmt == id::IQ4_XS] {
        // d@0, scales_h: u16@2, scales_l[4]@4, qs[128]@8; eight 32-element sub-blocks with 6-bit scales.
        let bo = base + (e / 256) * 136;
        let i = e % 256;
        let s = i / 32;
        let j = i % 32;
        let d = f16_to_f32(half_at(w, bo));
        let sh = (half_at(w, bo + 2) >> ((2 * s) as u32)) & 3;
        let sl = (byte_at(w, bo + 4 + s / 2) >> ((4 * (s % 2)) as u32)) & 0xF;
        let dl = d * (f32::cast_from(sl | (sh << 4)) - 32.0);
        let q = (byte_at(w, bo + 8 + 16 * s + j % 16) >> (((j / 16) * 4) as u32)) & 0xF;
        v = dl * iq4_value(q);
    }
    v
}
