//! The resources a guest holds handles to, named in the bindings' `with`: plain types
//! holding nothing of the attempt's state, so the generated bindings need not import the
//! capabilities that make and use them (`db`, `files`).

use crate::sandbox::files::Upload;
use crate::store::guest::GuestTx;

/// A transaction in the guest's resource table: `None` in a replay, where nothing is
/// behind it.
pub struct TxHandle(pub(super) Option<GuestTx>);

/// An upload in the guest's resource table: `None` in a replay, where nothing is behind
/// it.
pub struct UploadHandle(pub(super) Option<Upload>);
