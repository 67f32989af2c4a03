//! `examples/totals`, rebuilt with its `fixed` feature: the same source, so a replay of a
//! journal `totals` recorded takes the same path until the fix.

#[path = "../../../../examples/totals/src/lib.rs"]
mod totals;
