//! The shared pieces every family's decoder is composed of: projections ([`linear`]), attention with its
//! masks and GQA ([`attention`]), rotary embeddings ([`rope`]), RMSNorm ([`norm`]), the gated MLP
//! ([`mlp`]) and the KV cache ([`kv_cache`]).

pub mod attention;
pub mod kv_cache;
pub mod linear;
pub mod mlp;
pub mod norm;
pub mod rope;
