//! What a capability's host impl is on: a view of its own per-attempt state and the
//! attempt's shared piece, nothing else, so no capability reaches another's state. One
//! type for all of them, projected from the attempt's state in `capability::add_to_linker`
//! (wasmtime-wasi's and Spin's factors' pattern).

use crate::sandbox::capability::shared::Attempt;
use std::marker::PhantomData;
use wasmtime::component::HasData;

/// One capability's state (`own`) and the attempt's shared piece, borrowed for one call.
pub struct View<'a, T> {
    pub own: &'a mut T,
    pub attempt: &'a mut Attempt,
}

impl<'a, T> View<'a, T> {
    pub fn new(own: &'a mut T, attempt: &'a mut Attempt) -> Self {
        View { own, attempt }
    }
}

/// The bindings' marker for a host impl on [`View`] of `T`: `add_to_linker::<_, Has<T>>`.
pub struct Has<T>(PhantomData<fn() -> T>);

impl<T: 'static> HasData for Has<T> {
    type Data<'a> = View<'a, T>;
}
