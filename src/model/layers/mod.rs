//! The shared pieces every family's decoder is composed of: projections ([`linear`]), attention with its
//! masks and GQA ([`attention`]), rotary embeddings ([`rope`]), RMSNorm ([`norm`]), the gated MLP
//! ([`mlp`]), short causal convolutions ([`conv`]), the KV cache ([`kv_cache`]) and the recurrent layers' states it also holds ([`state`]).

pub mod attention;
pub mod conv;
pub mod kv_cache;
pub mod linear;
pub mod mlp;
pub mod norm;
pub mod rope;
pub mod state;
