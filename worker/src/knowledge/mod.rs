//! A space's knowledge as research uses it: documents split into passages (`chunk`), the
//! passages written with each document (`index`), searched by full text and by vector
//! (`search`, fused in `retrieve`; research's reranker may reorder them),
//! with embeddings made in the background by an
//! OpenAI-compatible endpoint (`embeddings`, `backlog`) and stored portably (`vectors`).
pub mod backlog;
pub mod chunk;
pub mod embeddings;
pub mod extract;
pub mod index;
pub mod pages;
pub mod retrieve;
pub mod search;
pub mod uploads;
pub mod vectors;
