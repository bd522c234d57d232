//! The gated MLP: `down(act(gate(x)) · up(x))`, with gate and up separate or one fused `gate_up_proj`
//! (Phi-3: gate rows first), and the gate activation SiLU or GELU-tanh.
//!
//! Shapes: `x: [b, s, h]`; gate and up `[b, s, i]`.

use burn::tensor::Tensor;

use super::linear::Linear;
use crate::kernels;
use crate::model::config::Act;

/// The gate and up projections.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant, reason = "one per layer, never moved in a loop")]
pub enum GateUp {
    Split {
        gate: Linear,
        up: Linear,
    },
    /// One `[2i, h]` projection, gate rows then up rows.
    Fused(Linear),
}

/// One layer's MLP weights.
#[derive(Debug, Clone)]
pub struct Mlp {
    pub gate_up: GateUp,
    pub down: Linear,
}

impl Mlp {
    /// `x: [b, s, h]` → `[b, s, h]`.
    pub fn forward(&self, x: Tensor<3>, act: Act) -> Tensor<3> {
        let (gate, up) = match &self.gate_up {
            GateUp::Split { gate, up } => {
                let [gate, up] = Linear::forward_many([gate, up], x);
                (gate, up)
            }
            GateUp::Fused(l) => {
                let y = l.forward(x);
                let i = y.dims()[2] / 2;
                (y.clone().narrow(2, 0, i), y.narrow(2, i, i))
            }
        };
        let mixed = match act {
            Act::Silu => kernels::silu_mul(gate, up),
            Act::GeluTanh => kernels::gelu_tanh_mul(gate, up),
        };
        self.down.forward(mixed)
    }

    /// A gated MLP of width `inter` over hidden size `h` from `ckpt`: `{prefix}.{gate|up|down}.weight`, by
    /// the family's names of the three.
    pub fn take(
        ckpt: &mut dyn crate::model::placed::Tensors,
        prefix: &str,
        [gate, up, down]: [&str; 3],
        (inter, h): (usize, usize),
    ) -> Result<Self, crate::loader::LoadError> {
        let mut take = |part: &str, shape| Linear::take(ckpt, &format!("{prefix}.{part}"), shape, false);
        Ok(Self {
            gate_up: GateUp::Split {
                gate: take(gate, [inter, h])?,
                up: take(up, [inter, h])?,
            },
            down: take(down, [h, inter])?,
        })
    }

    /// The projections' weights.
    pub fn linears(&self) -> Vec<&Linear> {
        match &self.gate_up {
            GateUp::Split { gate, up } => vec![gate, up, &self.down],
            GateUp::Fused(l) => vec![l, &self.down],
        }
    }
}
