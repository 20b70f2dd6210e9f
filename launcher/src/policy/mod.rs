//! Policy: one internal model, several input formats, one merge.
pub mod model;
