//! The scale searches behind the K-quant (and IQ4) reference quantisers, ported from the "Helper
//! functions" section of llama.cpp `ggml/src/ggml-quants.c`.
//!
//! - [`nearest_int`]: round to nearest (ties to even) by adding `1.5·2²³` and reading the mantissa.
//! - [`make_qx_quants`]: symmetric `x ≈ scale·(L − nmax)`, `L ∈ 0..2·nmax`, trying 18 scales around
//!   `−nmax/max` and keeping the weighted least-squares best (Q6_K uses it with `rmse_type = 1`, weights
//!   `x²`).
//! - [`make_q3_quants`]: symmetric with a coordinate-descent refinement (Q3_K).
//! - [`make_qkx2_quants`]: asymmetric `x ≈ scale·L − min`, `L ∈ 0..=nmax`, searching `nstep + 1` scales
//!   and fitting scale and min by weighted least squares (Q2_K, Q4_K, Q5_K).
//! - [`get_scale_min_k4`]: unpacks the 6-bit scale and min `j` of Q4_K/Q5_K's 12 scale bytes.
//!
//! Every loop keeps the C evaluation order (`w*x[i]*l` is `(w·x)·l`, sums run from index 0, no fused
//! multiply-add), so the quantisers produce the same bytes as the C reference compiled without
//! floating-point contraction. Non-finite inputs give meaningless but in-range codes, never a panic.

/// `GROUP_MAX_EPS`: groups whose largest magnitude is below this quantise to zero.
pub const GROUP_MAX_EPS: f32 = 1e-15;

/// llama.cpp's `nearest_int`: `fval` rounded to the nearest integer, ties to even, for
/// `|fval| <= 4194303` (other inputs give some value in `−2²²..2²²`, as in C without the assert).
#[inline]
pub fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0;
    (val.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// `make_qx_quants(n, nmax, x, L, rmse_type, qw)` for `n = x.len()`; writes `l` (values `0..2·nmax`) and
/// returns the scale.
pub fn make_qx_quants(nmax: i32, x: &[f32], l_out: &mut [i8], rmse_type: i32, qw: Option<&[f32]>) -> f32 {
    let n = x.len();
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let clampl = |l: i32| l.clamp(-nmax, nmax - 1);
    let mut iscale = -nmaxf / max;
    if rmse_type == 0 {
        for (o, &v) in l_out.iter_mut().zip(x) {
            *o = (nmax + clampl(nearest_int(iscale * v))) as i8;
        }
        return 1.0 / iscale;
    }
    let (rmse_type, return_early) = if rmse_type < 0 {
        (-rmse_type, true)
    } else {
        (rmse_type, false)
    };
    let weight = |i: usize| -> f32 {
        match qw {
            Some(qw) => qw[i],
            None => match rmse_type {
                1 => x[i] * x[i],
                2 => 1.0,
                3 => x[i].abs(),
                _ => x[i].abs().sqrt(),
            },
        }
    };
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..n {
        let l = clampl(nearest_int(iscale * x[i]));
        l_out[i] = (l + nmax) as i8;
        let w = weight(i);
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 {
            0.5 * (scale + 1.0 / iscale)
        } else {
            1.0 / iscale
        };
    }
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmaxf + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for (i, &xi) in x.iter().enumerate() {
            let lf = clampl(nearest_int(iscale * xi)) as f32;
            let w = weight(i);
            sumlx += w * xi * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                l_out[i] = (nmax + clampl(nearest_int(iscale * x[i]))) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `make_q3_quants(n, nmax, x, L, do_rmse)` for `n = x.len()`; writes `l` (values `0..2·nmax`) and returns
/// the scale.
pub fn make_q3_quants(nmax: i32, x: &[f32], l_out: &mut [i8], do_rmse: bool) -> f32 {
    let n = x.len();
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let clampl = |l: i32| l.clamp(-nmax, nmax - 1);
    let iscale = -(nmax as f32) / max;
    if do_rmse {
        // `L` holds signed values during the search (C keeps them in the int8_t array too).
        let mut l = [0i32; 32];
        let l = &mut l[..n];
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for i in 0..n {
            l[i] = clampl(nearest_int(iscale * x[i]));
            let w = x[i] * x[i];
            let lf = l[i] as f32;
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        for _ in 0..5 {
            let mut n_changed = 0;
            for i in 0..n {
                let w = x[i] * x[i];
                let li = l[i] as f32;
                let mut slx = sumlx - w * x[i] * li;
                if slx > 0.0 {
                    let mut sl2 = suml2 - w * li * li;
                    let new_l = clampl(nearest_int(x[i] * sl2 / slx));
                    if new_l != l[i] {
                        let nl = new_l as f32;
                        slx += w * x[i] * nl;
                        sl2 += w * nl * nl;
                        if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                            l[i] = new_l;
                            sumlx = slx;
                            suml2 = sl2;
                            n_changed += 1;
                        }
                    }
                }
            }
            if n_changed == 0 {
                break;
            }
        }
        for (o, &li) in l_out.iter_mut().zip(l.iter()) {
            *o = (li + nmax) as i8;
        }
        return if suml2 > 0.0 { sumlx / suml2 } else { 0.0 };
    }
    for (o, &v) in l_out.iter_mut().zip(x) {
        *o = (clampl(nearest_int(iscale * v)) + nmax) as i8;
    }
    1.0 / iscale
}

/// `make_qkx2_quants(n, nmax, x, weights, L, &the_min, Laux, rmin, rdelta, nstep, use_mad)` for
/// `n = x.len() <= 32`; writes `l` (values `0..=nmax`) and returns `(scale, the_min)` with
/// `x ≈ scale·l − the_min`.
#[allow(clippy::too_many_arguments)]
pub fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let err = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let quant = |iscale: f32, v: f32, min: f32| nearest_int(iscale * (v - min)).clamp(0, nmax) as u8;
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        l_out[i] = quant(iscale, x[i], min);
        let diff = scale * f32::from(l_out[i]) + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmaxf) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = quant(iscale, x[i], min);
            laux[i] = l;
            let w = weights[i];
            let lf = f32::from(l);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(laux[i]) + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// `get_scale_min_k4(j, q, &d, &m)`: the 6-bit scale and min of sub-block `j` (0..8) of Q4_K/Q5_K's
/// 12 scale bytes `q` (sub-blocks 0..4 in the low 6 bits of bytes 0..4 / 4..8; 4..8 split between the
/// nibbles of bytes 8..12 and the top 2 bits of bytes 0..8).
#[inline]
pub fn get_scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        let got: Vec<i32> = [0.5f32, 1.5, 2.5, -0.5, -1.5, 2.49, -7.6, 4_194_303.0]
            .map(nearest_int)
            .to_vec();
        assert_eq!(got, [0, 2, 2, 0, -2, 2, -8, 4_194_303]);
    }
}
